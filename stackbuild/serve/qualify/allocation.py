"""The gate's KV cache against the server's: what the recipe's gate run predicts vLLM allocates, what the
server says it allocated (/metrics `vllm:cache_config_info`, and the log lines of server_log), and where
they differ.

The prediction is the with-drafter plan of the recipe's gate run (stackbuild/core/gate.py
``recipe_geometry``, the path `build.py geometry` takes), for the vLLM behaviour the server runs:
``num_gpu_blocks`` (blocks per rank), ``block_size`` (cache_config.block_size after the platform's
alignment), the group block sizes in group order, and the tokens vLLM logs as its KV cache size,
``int(num_blocks / blocks per request at max_model_len x max_model_len)`` (vLLM's
``get_max_concurrency_for_kv_cache_config``; the blocks per request are geometry/plan/concurrency.py's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from geometry import Behaviour
from stackbuild.serve.qualify.result import KvCacheCheck, KvFigure
from stackbuild.serve.qualify.server_log import LoggedAllocation

FIGURES = ("num_gpu_blocks", "block_size", "group_block_sizes", "kv_cache_tokens")


@dataclass(frozen=True)
class Predicted:
    recipe: str
    behaviour: Behaviour  # the vLLM the server runs
    vllm_version: str  # the release the gate models (the recipe's base.vllm_version)
    num_gpu_blocks: Optional[int]
    block_size: Optional[int]
    group_block_sizes: tuple[int, ...]
    kv_cache_tokens: Optional[int]
    plan_error: Optional[str]  # vLLM cannot plan the recipe (the gate fails it)


def predict(recipe, run) -> Predicted:
    """The gate's figures in ``run`` (geometry.verdict.gate_run.GateRun: ``recipe_geometry`` of the loaded ``recipe``
    for the behaviour the server runs)."""
    from geometry import in_flight_tokens, max_model_len_of, vllm_kv_cache_size_tokens

    plan = run.report.with_drafter
    tokens = None
    if plan.num_blocks is not None:
        tokens = vllm_kv_cache_size_tokens(plan, max_model_len_of(run.inputs), in_flight_tokens(run.inputs))
    return Predicted(
        recipe=str(recipe.path),
        behaviour=run.report.behaviour,
        vllm_version=recipe.base.vllm_version,
        num_gpu_blocks=plan.num_blocks,
        block_size=plan.block_size,
        group_block_sizes=tuple(g.block_size for g in plan.groups),
        kv_cache_tokens=tokens,
        plan_error=plan.error,
    )


def _engines_value(cache_configs: tuple[Mapping[str, str], ...], label: str) -> Optional[int]:
    """The label's value when every engine reports the same integer (None: absent or not an integer);
    engines that differ report the smallest (the one a request may land on with the least)."""
    values = [c.get(label) for c in cache_configs]
    numbers = [int(v) for v in values if v is not None and v.isdigit()]
    return min(numbers) if numbers and len(numbers) == len(values) else None


def check(predicted: Predicted, cache_configs: tuple[Mapping[str, str], ...], log: Optional[LoggedAllocation]):
    """Each figure predicted against served, and one line per difference."""
    served_metrics = {
        "num_gpu_blocks": _engines_value(cache_configs, "num_gpu_blocks"),
        "block_size": _engines_value(cache_configs, "block_size"),
    }
    figures = [
        _figure("num_gpu_blocks", predicted.num_gpu_blocks, served_metrics["num_gpu_blocks"], "/metrics"),
        _figure("block_size", predicted.block_size, served_metrics["block_size"], "/metrics"),
    ]
    if log is not None:
        # vLLM logs the group sizes only when there are several groups
        several = len(predicted.group_block_sizes) > 1 or log.group_block_sizes is not None
        if several:
            figures.append(
                _figure(
                    "group_block_sizes",
                    tuple(predicted.group_block_sizes),
                    tuple(log.group_block_sizes) if log.group_block_sizes is not None else None,
                    f"--server-log {log.source}",
                )
            )
        figures.append(
            _figure("kv_cache_tokens", predicted.kv_cache_tokens, log.kv_cache_tokens, f"--server-log {log.source}")
        )
    differences = []
    where = f"(recipe {predicted.recipe}, vLLM {predicted.vllm_version} {predicted.behaviour})"
    if predicted.plan_error:
        differences.append(f"the gate has no plan to compare: vLLM raises {predicted.plan_error} {where}")
    for f in figures:
        if f.served is None:
            differences.append(f"the server reports no {f.name} ({f.source}) to hold to the gate's {_n(f.predicted)}")
        elif f.predicted is not None and f.served != f.predicted:
            differences.append(f"served {f.name} {_n(f.served)} != gate {_n(f.predicted)} {where}")
    return KvCacheCheck(
        recipe=predicted.recipe,
        behaviour=predicted.behaviour,
        gate_vllm_version=predicted.vllm_version,
        server_log=log.source if log else None,
        log_pool=log.pool if log else None,
        figures=tuple(figures),
        differences=tuple(differences),
    )


def _figure(name: str, predicted, served, source: str) -> KvFigure:
    return KvFigure(name, predicted, served, source, predicted is not None and served == predicted)


def _n(value) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(f"{v:,}" for v in value) + ")"
    return f"{value:,}" if isinstance(value, int) else str(value)
