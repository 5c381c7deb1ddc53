"""The KV-cache geometry of a vLLM target and its DFlash drafter: simulated, judged, held to vLLM's
own planning code, and checked again when the image starts (stdlib only; the functions of
``geometry.oracle`` import the installed vLLM).

This module is the package's public API: the host side (``stackbuild``) and users' scripts import
these names and nothing below them. The stages behind it, each a package:

* ``model``: the configs read into ``GeometryInputs`` and the typed target and drafter;
* ``kv``: one spec class per KV kind, the attention backends;
* ``plan``: the simulated plan (``simulate``), requests at once (``concurrency``);
* ``verdict``: the gate (``run_gate``), its table, stock against overlay, ``fit``;
* ``oracle``: the check against vLLM's own code and its record;
* ``preflight``: the start-time check the image's entrypoint runs.

Three documents are namespaces: ``contract`` (what the build writes into the image and the gate
reads back, ``geometry/image_contract.py``), ``oracle_record`` (vLLM's recorded answer) and
``checked`` (what the build checked, read by the pre-flight). docs/architecture.md lists the API.

The names load on first use (PEP 562): the image's own entry points (``python3 -m
geometry.gate_main``, the pre-flight) import their stage modules directly and load nothing else;
the gate step runs before the pre-flight's payload is in the image.
"""

from __future__ import annotations

import importlib

# Each public name: the module that defines it and its name there (None: the module itself).
_API: dict[str, tuple[str, str | None]] = {
    # errors and the one-line rule
    "BadInput": ("geometry.errors", "BadInput"),
    "ExitCode": ("geometry.errors", "ExitCode"),
    "one_line": ("geometry.errors", "one_line"),
    "ConfigInvalid": ("geometry.model.config", "ConfigInvalid"),
    "ConfigUnusable": ("geometry.preflight.configs", "ConfigUnusable"),
    "ContextTooLong": ("geometry.plan.concurrency", "ContextTooLong"),
    "ContractError": ("geometry.image_contract", "ContractError"),
    "ServeFlagsRejected": ("geometry.preflight.serve_flags", "ServeFlagsRejected"),
    "VllmVersionNotModelled": ("geometry.vllm_versions", "VllmVersionNotModelled"),
    # the closed sets: which model, which vLLM
    "Role": ("geometry.image_contract", "Role"),
    "Behaviour": ("geometry.image_contract", "Behaviour"),
    # the inputs
    "DEFAULT_VERSION": ("geometry.vllm_versions", "DEFAULT_VERSION"),
    "release": ("geometry.vllm_versions", "release"),
    "GeometryInputs": ("geometry.model.inputs", "GeometryInputs"),
    "KV_CACHE_DTYPES": ("geometry.kv.units", "KV_CACHE_DTYPES"),
    "build_inputs": ("geometry.model.inputs", "build_inputs"),
    "ServeDefaults": ("geometry.model.serve_settings", "ServeDefaults"),
    "serving_cpu_avx512_bf16": ("geometry.model.serving_cpu", "serving_cpu_avx512_bf16"),
    "check_drafter": ("geometry.model.config", "check_drafter"),
    "check_target": ("geometry.model.config", "check_target"),
    # the simulation
    "simulate": ("geometry.plan.simulate", "simulate"),
    "Concurrency": ("geometry.plan.concurrency", "Concurrency"),
    "concurrency": ("geometry.plan.concurrency", "concurrency"),
    "in_flight_tokens": ("geometry.plan.concurrency", "in_flight_tokens"),
    "max_model_len_of": ("geometry.plan.concurrency", "max_model_len_of"),
    "vllm_kv_cache_size_tokens": ("geometry.plan.concurrency", "vllm_kv_cache_size_tokens"),
    "AT_ONCE_DEFINITION": ("geometry.plan.together", "DEFINITION"),
    "Workload": ("geometry.plan.together_state", "Workload"),
    "TooMuchToStep": ("geometry.plan.limits", "TooMuchToStep"),
    "at_once": ("geometry.plan.at_once", "at_once"),
    "sent_together": ("geometry.plan.at_once", "sent_together"),
    # the gate verdict
    "GateRun": ("geometry.verdict.gate_run", "GateRun"),
    "run_gate": ("geometry.verdict.gate_run", "run_gate"),
    "render_table_text": ("geometry.verdict.table", "render_text"),
    "table_json": ("geometry.verdict.table", "to_json"),
    "BehaviourComparison": ("geometry.verdict.behaviours", "BehaviourComparison"),
    "compare_behaviours": ("geometry.verdict.behaviours", "compare"),
    "comparison_lines": ("geometry.verdict.behaviours", "comparison_lines"),
    "figures": ("geometry.verdict.behaviours", "figures"),
    "TogetherReport": ("geometry.verdict.together_report", "TogetherReport"),
    "together_report": ("geometry.verdict.together_report", "together_report"),
    "together_workloads": ("geometry.verdict.together_report", "workloads"),
    "FitResult": ("geometry.verdict.fit", "FitResult"),
    "search_fit": ("geometry.verdict.fit", "search"),
    "render_fit_text": ("geometry.verdict.fit", "render_text"),
    "fit_json": ("geometry.verdict.fit", "to_json"),
    "KEEPABLE": ("geometry.verdict.fit_keys", "KEEPABLE"),
    "KEPT_UNLESS_ALLOWED": ("geometry.verdict.fit_keys", "KEPT_UNLESS_ALLOWED"),
    # the start check
    "run_preflight": ("geometry.preflight.run", "preflight"),
    "Fingerprint": ("geometry.preflight.fingerprint", "Fingerprint"),
    "IMAGE_DIGEST_ENV": ("geometry.preflight.fingerprint", "IMAGE_DIGEST_ENV"),
    "DEFAULT_MASTER_PORT": ("geometry.preflight.launch", "DEFAULT_MASTER_PORT"),
    "PORT_OFFSET": ("geometry.preflight.launch", "PORT_OFFSET"),
    "ServeFlags": ("geometry.preflight.serve_flags", "ServeFlags"),
    "parse_serve_args": ("geometry.preflight.serve_flags", "parse_serve_args"),
    "PARSE_SETTINGS": ("geometry.preflight.serve_flags", "PARSE_SETTINGS"),
    "prepare_parser_import": ("geometry.preflight.serve_flags", "prepare_parser_import"),
    "read_config": ("geometry.preflight.configs", "read_config"),
    "snapshot_of": ("geometry.preflight.checkpoint", "snapshot_of"),
    # what the image's entry points import (the payload the render copies)
    "import_closure": ("geometry.oracle.import_closure", "import_closure"),
    # the documents, as namespaces
    "contract": ("geometry.image_contract", None),
    "oracle_record": ("geometry.oracle.record", None),
    "checked": ("geometry.preflight.checked", None),
}

__all__ = list(_API)


def __getattr__(name: str):
    try:
        module_name, attribute = _API[name]
    except KeyError:
        raise AttributeError(f"module 'geometry' has no public name {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
