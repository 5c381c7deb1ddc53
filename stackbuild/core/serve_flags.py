"""The `vllm serve` flags the recipe's own keys generate (stackbuild/core/serve_args.py writes them),
and the one rule about them: ``serving.extra_args`` may not repeat one."""

from __future__ import annotations

from typing import Optional

# Flag -> the recipe key that sets it.
GENERATED_FLAGS = {
    "--served-model-name": "serving.served_model_name",
    "--tensor-parallel-size": "serving.tensor_parallel_size",
    "--max-model-len": "serving.max_model_len",
    "--kv-cache-dtype": "serving.kv_cache_dtype",
    "--gpu-memory-utilization": "serving.gpu_memory_utilization",
    "--block-size": "serving.block_size",
    "--max-num-seqs": "serving.max_num_seqs",
    "--max-num-batched-tokens": "serving.max_num_batched_tokens",
    "--enable-prefix-caching": "serving.enable_prefix_caching",
    "--no-enable-prefix-caching": "serving.enable_prefix_caching",
    "--speculative-config": "drafter or speculation / serving.num_speculative_tokens",
    "--tool-call-parser": "serving.tool_call_parser",
    "--reasoning-parser": "serving.reasoning_parser",
    "--host": "the compose generator",
    "--port": "serving.port",
    "--model": "target.path",
    "--nnodes": "serving.nodes",
    "--node-rank": "serving.nodes (one rank per node role)",
    "--master-addr": "the leader address of the generated multi-node files",
    "--master-port": "the generated multi-node files",
    "--headless": "the generated multi-node worker files",
}
# Short spellings vLLM accepts for the flags above.
ALIASES = {"-tp": "--tensor-parallel-size", "-n": "--nnodes", "-r": "--node-rank"}


def flag_name(arg: str) -> Optional[str]:
    """``--max_model_len=5`` / ``--speculative-config.model`` / ``-tp`` -> the flag vLLM sees; None for values."""
    short = ALIASES.get(arg.split("=", 1)[0])
    if short:
        return short
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0].split(".", 1)[0].replace("_", "-")


def repeated_flag(extra_args: tuple[str, ...]) -> Optional[tuple[int, str]]:
    """The first extra argument that repeats a generated flag, as ``(index, problem)``; None if none does."""
    for i, arg in enumerate(extra_args):
        name = flag_name(arg)
        if name in GENERATED_FLAGS:
            return i, f"{arg} is generated from {GENERATED_FLAGS[name]}; set it there, not in extra_args"
    return None
