"""The `vllm serve` argument list a recipe asks for.

The image's entrypoint (the pre-flight, which then execs ``vllm serve`` with the
same argv) takes everything after ``vllm serve``: the
target model path inside the container first, then the flags. Every value is
its own list element, so the speculative config (compact JSON) travels as
exactly one argument and no shell ever sees it. The argv is written part by part
(``argv_parts``), each part with what vLLM's serve parser reads from it, so the served
flags the build gates and the image records (``served_flags``) come from the same parts.

A multi-node recipe's node roles (``role_commands``) run this argv plus vLLM's
multi-node flags; what only the deployment knows (the bind address, the leader's
address, a worker's rank) is a named slot, and every deploy target (the compose
files, the Kubernetes manifests, the host pre-flight) fills it with
``RoleCommand.filled``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Optional

from geometry import DEFAULT_MASTER_PORT, PORT_OFFSET, ServeFlags, checked
from stackbuild.core.recipe import Recipe

# Address the server binds inside the container (the port is published by compose).
CONTAINER_HOST = "0.0.0.0"


def speculative_config(recipe: Recipe) -> dict:
    """The ``--speculative-config`` object: the modelled vLLM release's SpeculativeConfig field names.

    The drafter's KV dtype is SpeculativeConfig.kv_cache_dtype (unset: the
    drafter inherits the target's --kv-cache-dtype; ``auto``: the drafter's own
    dtype), its attention backend SpeculativeConfig.attention_backend (a
    backend name such as FLASH_ATTN; unset: vLLM chooses). Without a drafter
    (speculation.method ngram): the method, the tokens and the prompt-lookup window.
    """
    serving = recipe.serving
    if recipe.drafter is None:  # ngram: prompt lookup, no drafter model
        spec = recipe.speculation
        return {
            "method": spec.method,
            "num_speculative_tokens": serving.num_speculative_tokens,
            "prompt_lookup_max": spec.prompt_lookup_max,
            "prompt_lookup_min": spec.prompt_lookup_min,
        }
    config = {
        "method": recipe.drafter.method,
        "model": recipe.drafter.path,
        "num_speculative_tokens": serving.num_speculative_tokens,
    }
    if serving.drafter_kv_cache_dtype is not None:
        config["kv_cache_dtype"] = serving.drafter_kv_cache_dtype
    backend = getattr(recipe.drafter, "attention_backend", None)
    if backend is not None:
        config["attention_backend"] = backend
    return config


def speculative_config_json(recipe: Recipe) -> str:
    """Compact JSON with sorted keys: one argv element, stable across runs."""
    return json.dumps(speculative_config(recipe), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class ArgvPart:
    """Consecutive elements of the serve argv, and what vLLM's serve parser reads from them: the
    geometry.preflight.serve_flags.ServeFlags field (None: one the record does not hold) and its value."""

    argv: tuple[str, ...]
    field: Optional[str] = None
    value: Any = None


def _flag(flag: str, field: Optional[str], value: Any, text: Callable[[Any], str] = str) -> ArgvPart:
    return ArgvPart((flag, text(value)), field, value)


def argv_parts(recipe: Recipe) -> list[ArgvPart]:
    """The serve argv the recipe's keys write, part by part (``serving.extra_args`` follows them)."""
    s = recipe.serving
    parts = [ArgvPart((recipe.target.path,), "model", recipe.target.path)]
    if s.served_model_name:
        parts.append(_flag("--served-model-name", None, s.served_model_name))
    parts += [
        _flag("--tensor-parallel-size", "tensor_parallel_size", s.tensor_parallel_size),
        _flag("--max-model-len", "max_model_len", s.max_model_len),
        _flag("--kv-cache-dtype", "kv_cache_dtype", s.kv_cache_dtype),
        _flag("--gpu-memory-utilization", "gpu_memory_utilization", float(s.gpu_memory_utilization), repr),
    ]
    if s.block_size is not None:
        parts.append(_flag("--block-size", "block_size", s.block_size))
    if s.max_num_seqs is not None:
        parts.append(_flag("--max-num-seqs", "max_num_seqs", s.max_num_seqs))
    if s.max_num_batched_tokens is not None:
        parts.append(_flag("--max-num-batched-tokens", "max_num_batched_tokens", s.max_num_batched_tokens))
    if s.enable_prefix_caching is not None:
        flag = "--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching"
        parts.append(ArgvPart((flag,), "enable_prefix_caching", s.enable_prefix_caching))
    parts.append(
        ArgvPart(
            ("--speculative-config", speculative_config_json(recipe)), "speculative_config", speculative_config(recipe)
        )
    )
    if s.tool_call_parser:
        parts.append(_flag("--tool-call-parser", "tool_call_parser", s.tool_call_parser))
    if s.reasoning_parser:
        parts.append(_flag("--reasoning-parser", "reasoning_parser", s.reasoning_parser))
    parts += [_flag("--host", None, CONTAINER_HOST), _flag("--port", None, s.port)]
    return parts


def serve_argv(recipe: Recipe) -> list[str]:
    """The argument list after ``vllm serve`` (the ``command:`` of the compose service); the recipe's
    rules (stackbuild/core/serve_flags.py) have refused extra_args that repeat a flag written here."""
    return [element for part in argv_parts(recipe) for element in part.argv] + list(recipe.serving.extra_args)


def baseline_argv(recipe: Recipe) -> list[str]:
    """``serve_argv`` without its ``--speculative-config``: the same model and flags served without
    speculation, the baseline `build.py qualify --baseline-url` measures the speed-up against."""
    parts = [part for part in argv_parts(recipe) if part.field != "speculative_config"]
    return [element for part in parts for element in part.argv] + list(recipe.serving.extra_args)


# What vLLM's serve parser reads for a flag the recipe's argv may leave out: its default (the
# ServeFlags fields with a default say theirs).
UNWRITTEN = {"block_size": None, "enable_prefix_caching": None, "mamba_cache_mode": None, "kv_cache_memory_bytes": None}


def served_flags(recipe: Recipe) -> ServeFlags:
    """What the recipe's serve argv means to vLLM's serve parser, read from the parts that write it
    (serving.extra_args aside: the recipe's gate does not read them either)."""
    return ServeFlags(**{**UNWRITTEN, **{p.field: p.value for p in argv_parts(recipe) if p.field is not None}})


# vLLM's torch.distributed rendezvous port on the leader (ParallelConfig.master_port's default,
# written out so every node and every generated file says it), and the port beside it where the
# leader's pre-flight offers its fingerprint to the workers (geometry/preflight/ranks.py).
MASTER_PORT = DEFAULT_MASTER_PORT
FINGERPRINT_PORT = MASTER_PORT + PORT_OFFSET
LEADER, WORKER = "leader", "worker"


def ranks_per_node(recipe: Recipe) -> int:
    """The tensor-parallel ranks (GPUs) each machine runs: serving.tensor_parallel_size / serving.nodes."""
    return recipe.serving.tensor_parallel_size // recipe.serving.nodes


@dataclass(frozen=True)
class SlotValues:
    """What one deploy target writes into a role's slots, each as that target reads it
    (a literal value, or the target's own variable syntax such as Compose's ``${VAR}``)."""

    host: str  # the address the API server binds
    master_addr: str  # the leader's address
    node_rank: Optional[str] = None  # a worker's node rank (the leader's is fixed: 0)

    def of(self, slot: str) -> str:
        """The value of ``slot`` (a KeyError names a slot given no value)."""
        value = {
            checked.HOST_SLOT: self.host,
            checked.MASTER_ADDR_SLOT: self.master_addr,
            checked.NODE_RANK_SLOT: self.node_rank,
        }[slot]
        if value is None:
            raise KeyError(slot)
        return value


def _literal(value: str) -> str:
    return value


@dataclass(frozen=True)
class RoleCommand(checked.CheckedRole):
    """One node role's `vllm serve` argv with the deploy-time values left as named slots
    (``argv`` holds ``{slot name}`` at each slot's position), as the image records it."""

    def filled(self, values: SlotValues, literal: Callable[[str], str] = _literal) -> list[str]:
        """The argv a deploy target writes: every slot given its value from ``values``, every fixed
        element passed through ``literal`` (the target's quoting of a literal, e.g. Compose's ``$$``)."""
        argv = [literal(a) for a in self.argv]
        for name, index in self.slots.items():
            argv[index] = values.of(name)
        return argv


def role_commands(recipe: Recipe) -> tuple[RoleCommand, ...]:
    """The leader's and the worker's argv for vLLM's own multi-node launch (serving.nodes > 1).

    Every node runs the recipe's serve argv (the same per-rank geometry) plus
    ``--nnodes N --node-rank R --master-addr LEADER --master-port P``; the leader is rank 0
    and serves the API, workers (ranks 1..N-1) add ``--headless``.
    """
    nodes = recipe.serving.nodes
    if nodes < 2:
        return ()
    base = serve_argv(recipe)
    host_at = base.index("--host") + 1
    out = []
    for role in (LEADER, WORKER):
        argv = list(base)
        argv[host_at] = "{" + checked.HOST_SLOT + "}"
        slots = {checked.HOST_SLOT: host_at}
        argv += ["--nnodes", str(nodes), "--node-rank"]
        if role == LEADER:
            argv.append("0")
        else:
            slots[checked.NODE_RANK_SLOT] = len(argv)
            argv.append("{" + checked.NODE_RANK_SLOT + "}")
        argv.append("--master-addr")
        slots[checked.MASTER_ADDR_SLOT] = len(argv)
        argv += ["{" + checked.MASTER_ADDR_SLOT + "}", "--master-port", str(MASTER_PORT)]
        if role == WORKER:
            argv.append("--headless")
        out.append(RoleCommand(role, nodes, tuple(argv), MappingProxyType(slots)))
    return tuple(out)
