"""Read a ``vllm serve`` argv with the installed vLLM's own parser (imports vLLM when called).

The parser is built the way ``vllm serve`` builds it (``ServeSubcommand``
on a ``FlexibleArgumentParser``, then its ``validate``), so every spelling vLLM
accepts (``-tp``, ``--max-model-len=1M``, ``--config FILE``, ``--no-enable-...``)
means here what it means to the server; nothing is parsed by hand. Stdlib only
but for vLLM itself: serving/serve_oracle.py runs it under any interpreter that has vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from geometry.errors import one_line
from geometry.model.serve_settings import ServeDefaults, ServeSettings
from geometry.oracle.import_settings import IMPORT_SETTINGS

# vLLM's CPU platform for a process that parses, set before vLLM is first imported: parsing (and the start
# check's planning) never touch the GPU (vllm serve gets the environment the entrypoint started with), and the
# parser works on a CPU-only host (with no platform detected it cannot build its DeviceConfig defaults). The
# start check's cross-check does not depend on it: the oracle plans under the serving GPU's platform
# (geometry/oracle/serving_platform.py).
PARSE_SETTINGS = {"VLLM_TARGET_DEVICE": "cpu"}


def prepare_parser_import() -> None:
    """Set PARSE_SETTINGS and the import settings where unset: what a process does before it first imports
    vLLM's serve parser (the start check, the serve-parser oracle)."""
    for name, value in {**PARSE_SETTINGS, **IMPORT_SETTINGS}.items():
        os.environ.setdefault(name, value)


@dataclass(frozen=True)
class ServeFlags:
    """The geometry-relevant values of a ``vllm serve`` argv, as vLLM's own parser reads them."""

    model: str
    tensor_parallel_size: int
    kv_cache_dtype: str
    block_size: Optional[int]
    max_model_len: Optional[int]
    enable_prefix_caching: Optional[bool]
    mamba_cache_mode: Optional[str]
    kv_cache_memory_bytes: Optional[int]
    speculative_config: Optional[Mapping[str, Any]]
    # What the start-time checks beyond the geometry read: the memory share, the tokenizer
    # the parsers need (None: the model's own directory), an explicit chat template.
    gpu_memory_utilization: float
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    tokenizer: Optional[str] = None
    chat_template: Optional[str] = None

    @property
    def drafter_path(self) -> Optional[str]:
        spec = self.speculative_config
        return None if spec is None else spec.get("model")

    @property
    def num_speculative_tokens(self) -> Optional[int]:
        spec = self.speculative_config
        return None if spec is None else spec.get("num_speculative_tokens")

    def settings(self, defaults: ServeDefaults) -> ServeSettings:
        """What these flags say that decides the geometry, ``defaults`` for what they do not."""
        spec = self.speculative_config
        return ServeSettings(
            tensor_parallel_size=self.tensor_parallel_size,
            kv_cache_dtype=self.kv_cache_dtype,
            drafter_kv_cache_dtype=spec.get("kv_cache_dtype") if spec else None,
            num_speculative_tokens=spec["num_speculative_tokens"] if spec else 0,
            drafter_attention_backend=spec.get("attention_backend") if spec else None,
            enable_prefix_caching=self.enable_prefix_caching,
            mamba_cache_mode=self.mamba_cache_mode,
            block_size=self.block_size,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            defaults=defaults,
        )

    def to_json(self) -> dict:
        return {
            name: (dict(value) if isinstance(value, Mapping) else value)
            for name, value in ((f, getattr(self, f)) for f in self.__dataclass_fields__)
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ServeFlags":
        """The inverse of to_json (a TypeError names a missing or unknown field)."""
        if not isinstance(data, Mapping):
            raise TypeError("flags must be an object")
        return cls(**data)


class ServeFlagsRejected(Exception):
    """vLLM's serve parser refuses the argv (its own message, one line)."""


def _argparse_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    for i, line in enumerate(lines):
        if ": error: " in line:
            return one_line(" ".join([line.split(": error: ", 1)[1], *lines[i + 1 :]]))
    return one_line(stderr) or "the parser exited without a message"


def parse_serve_args(argv: Sequence[str]) -> argparse.Namespace:
    """What `vllm serve ARGV` parses and validates before it loads anything; ServeFlagsRejected if it refuses."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(["serve", *argv])
    except SystemExit:
        raise ServeFlagsRejected(_argparse_error(stderr.getvalue())) from None
    try:
        serve.validate(args)
        check_multinode(args)
    except (TypeError, ValueError, KeyError) as exc:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise ServeFlagsRejected(one_line(message)) from None
    return args


def _multinode_statements():
    """The statements of ``EngineArgs.create_engine_config`` that check the multi-node launch
    options (``--nnodes``, ``--node-rank``, ``--data-parallel-backend``): the top-level
    statements from the first ``if`` whose test reads ``self.nnodes`` to the last, compiled as vLLM wrote them.

    They run before any model is loaded, but inside the method that loads it, so they are
    taken out of vLLM's own source rather than restated here.
    """
    import ast
    import inspect
    import textwrap

    from vllm.engine.arg_utils import EngineArgs

    source = textwrap.dedent(inspect.getsource(EngineArgs.create_engine_config))
    body = ast.parse(source).body[0].body
    reads = [
        i
        for i, node in enumerate(body)
        if isinstance(node, ast.If)
        and any(
            isinstance(n, ast.Attribute)
            and n.attr == "nnodes"
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            for n in ast.walk(node.test)
        )
    ]
    if not reads:
        raise RuntimeError("vLLM's create_engine_config has no --nnodes checks to run")
    module = ast.Module(body=body[reads[0] : reads[-1] + 1], type_ignores=[])
    return compile(module, "<vllm.engine.arg_utils.EngineArgs.create_engine_config>", "exec")


def check_multinode(args: argparse.Namespace) -> None:
    """vLLM's own checks of a multi-node launch (``--nnodes`` divides the world size, the
    node rank is in range, the MP backend); a ValueError carries vLLM's message."""
    if getattr(args, "nnodes", 1) == 1 and getattr(args, "node_rank", 0) == 0:
        return
    import copy

    import vllm.engine.arg_utils as arg_utils

    engine_args = arg_utils.AsyncEngineArgs.from_cli_args(copy.copy(args))
    exec(_multinode_statements(), {**vars(arg_utils), "self": engine_args})  # noqa: S102 - vLLM's own code


def parse_serve_flags(argv: Sequence[str]) -> ServeFlags:
    args = parse_serve_args(argv)
    spec = args.speculative_config
    if spec is not None and not isinstance(spec, dict):
        raise ServeFlagsRejected(f"--speculative-config did not parse to a JSON object: {spec!r}")
    # `vllm serve` itself: the positional model takes precedence over --model.
    model = args.model_tag if getattr(args, "model_tag", None) is not None else args.model
    return ServeFlags(
        model=model,
        tensor_parallel_size=args.tensor_parallel_size,
        kv_cache_dtype=args.kv_cache_dtype,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        enable_prefix_caching=args.enable_prefix_caching,
        mamba_cache_mode=args.mamba_cache_mode,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        speculative_config=dict(spec) if spec is not None else None,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser,
        tokenizer=args.tokenizer,
        chat_template=args.chat_template,
    )
