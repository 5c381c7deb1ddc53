"""Parse a `vllm serve` command line with vLLM's own parser (run by the oracle interpreter).

Usage: python serve_oracle.py RESULT.json  (the argv after ``vllm serve`` as a
JSON list on stdin, or ``{"cases": [argv, ...]}`` for several at one import). Needs
nothing but vLLM on purpose: the oracle interpreter has vLLM and its dependencies, not
this repository's; the parser itself is the image pre-flight's (preflight/serve_flags.py,
stdlib + vLLM), loaded from this checkout.

Writes {"status": "passed"|"rejected"|"unavailable"|"broken", ...} to
RESULT.json; the exit code is 0 whatever the verdict, non-zero only if this
script itself could not write its result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback

# The oracle interpreter need not have this project installed: geometry/ comes from the
# directory holding the stackbuild package (the checkout, or the site-packages it is installed in).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from geometry import (  # noqa: E402
    ServeFlagsRejected,
    one_line,  # noqa: E402
    parse_serve_args,
    prepare_parser_import,
)

# Parsing only, as the start check parses: vLLM's CPU platform keeps it off any GPU and lets the parser build
# its DeviceConfig defaults on a host where vLLM detects no platform; the import settings.
prepare_parser_import()

PARSED_FIELDS = (
    "model_tag",
    "served_model_name",
    "tensor_parallel_size",
    "max_model_len",
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "block_size",
    "enable_prefix_caching",
    "speculative_config",
    "tool_call_parser",
    "reasoning_parser",
    "enable_auto_tool_choice",
    "host",
    "port",
)


def parse(argv: list) -> dict:
    try:
        import vllm  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name == "vllm":
            return {"status": "unavailable", "reason": f"vLLM is not installed for {sys.executable}"}
        return {"status": "broken", "reason": f"importing vllm failed: {exc!r}"}
    try:
        from vllm.config.cache import CacheConfig
        from vllm.config.speculative import SpeculativeConfig
        from vllm.entrypoints.cli.serve import ServeSubcommand  # noqa: F401 - a broken install is named here
        from vllm.entrypoints.common import cli_args as common_cli_args
    except Exception as exc:  # noqa: BLE001 - any import failure means the oracle is incomplete
        return {"status": "broken", "reason": f"importing vLLM's serve parser failed: {type(exc).__name__}: {exc}"}

    version = getattr(vllm, "__version__", "unknown")
    try:
        # `vllm serve`'s own parser and its checks before loading anything (main.py: cmd.validate).
        args = parse_serve_args(argv)
    except ServeFlagsRejected as exc:
        return {"status": "rejected", "vllm_version": version, "error": str(exc)}

    # Then the parser-name checks the API server runs at start-up.
    try:
        structured = getattr(args, "structured_outputs_config", None)
        reasoning = getattr(args, "reasoning_parser", None) or getattr(structured, "reasoning_parser", None)
        common_cli_args.validate_api_server_args(_ApiArgs(args, reasoning))
    except (TypeError, ValueError, KeyError) as exc:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        return {"status": "rejected", "vllm_version": version, "error": one_line(message)}

    spec = args.speculative_config
    if spec is not None:
        if not isinstance(spec, dict):
            return {
                "status": "rejected",
                "vllm_version": version,
                "error": f"--speculative-config did not parse to a JSON object: {spec!r}",
            }
        known = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        unknown = sorted(set(spec) - known)
        if unknown:
            return {
                "status": "rejected",
                "vllm_version": version,
                "error": f"--speculative-config: unknown SpeculativeConfig field(s): {', '.join(unknown)}",
            }

    # SpeculativeConfig's own parsing of a backend name (AttentionBackendEnum[NAME]).
    if spec and spec.get("attention_backend") is not None:
        try:
            SpeculativeConfig._parse_attention_backend(spec["attention_backend"])
        except (KeyError, AttributeError, ValueError) as exc:
            return {
                "status": "rejected",
                "vllm_version": version,
                "error": f"--speculative-config attention_backend: unknown attention backend {exc}",
            }

    # The parser takes any string for a KV dtype (backends may register more);
    # vLLM's CacheConfig refuses unknown ones when the engine config is built.
    cache_dtypes = [("--kv-cache-dtype", args.kv_cache_dtype)]
    if spec and spec.get("kv_cache_dtype") is not None:
        cache_dtypes.append(("--speculative-config kv_cache_dtype", spec["kv_cache_dtype"]))
    for flag, dtype in cache_dtypes:
        try:
            CacheConfig(cache_dtype=dtype, gpu_memory_utilization=args.gpu_memory_utilization)
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError or vLLM's own
            errors = getattr(exc, "errors", None)
            message = errors()[0]["msg"] if callable(errors) and errors() else str(exc)
            return {"status": "rejected", "vllm_version": version, "error": f"{flag}: {one_line(message)}"}

    parsed = {name: getattr(args, name, None) for name in PARSED_FIELDS}
    return {"status": "passed", "vllm_version": version, "parsed": parsed}


class _ApiArgs:
    """The parsed args, with the reasoning parser where the API server looks for it."""

    def __init__(self, args, reasoning_parser):
        self._args = args
        self.structured_outputs_config = type("S", (), {"reasoning_parser": reasoning_parser})()

    def __getattr__(self, name):
        return getattr(self._args, name)


def main() -> int:
    out_path = sys.argv[1]
    try:
        request = json.load(sys.stdin)
        # One argv (a list of strings), or {"cases": [argv, ...]}: one vLLM import for all.
        cases = request["cases"] if isinstance(request, dict) else [request]
        for argv in cases:
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ValueError('stdin must hold a JSON list of strings, or {"cases": [lists of strings]}')
        results = [parse(argv) for argv in cases]
        result = {"cases": results} if isinstance(request, dict) else results[0]
    except Exception:  # noqa: BLE001 - reported to the caller, never swallowed
        result = {"status": "broken", "reason": one_line(traceback.format_exc().strip().splitlines()[-1])}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
