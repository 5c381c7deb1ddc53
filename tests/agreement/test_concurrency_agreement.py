"""Requests at once: the report's count equals what vLLM's own scheduler admits
(tests/support/oracle_concurrency.py: vLLM's engine core plans the pool, vLLM's Scheduler
admits requests of each length one after another through ``allocate_slots``,
prefilling each in the chunks it splits, until it refuses one or preempts it), and
what each request holds, group by group, equals the simulator's.

The installed vLLM is pristine (the release requirements/vllm.txt pins), so the simulator runs ``stock`` here (the
overlay's count: tests/agreement/test_overlay_planning_agreement.py): the default recipe (GB300,
16,384 batched tokens, prefix caching on: KDA state in "align", FlashKDA's prefill
checkpoint), the 2x GB10 recipe (TP2, fp8_ds_mla, prefix caching off, 2,048 batched), a
Kimi-Linear target ("align", unified grouping) and a Qwen3-Next target ("none"), each
with a sliding-window DFlash2 drafter, whose window group holds the tokens the chunks
keep in flight: two batches with async scheduling, which vLLM's scheduler config is
given too.
"""

from __future__ import annotations

import copy

import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm.v1.core.kv_cache_planning  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise
    pytest.skip(f"vLLM's own planning code is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402
from support.oracle_concurrency import requests_until_refused  # noqa: E402
from support.repo import REPO  # noqa: E402

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.plan.concurrency import concurrency, in_flight_tokens  # noqa: E402
from geometry.plan.simulate import simulate  # noqa: E402
from stackbuild.core.gate import gate_input  # noqa: E402
from stackbuild.core.recipe import load_recipe  # noqa: E402

RECIPES = REPO / "recipes"


def _recipe(name: str) -> dict:
    return gate_input(load_recipe(RECIPES / name / "recipe.yaml"), vllm_behaviour="stock").to_json()


def _qwen3_next() -> dict:
    import random

    target = C.qwen3_next_target(random.Random(3))
    target["max_position_embeddings"] = 262144
    return C.recipe_input(
        "stock",
        memory=40 * C.GIB,
        target_config=target,
        kv_cache_dtype="auto",
        drafter_kv_cache_dtype="auto",
        **C.prefix_caching(False),
    )


CASES = {
    "default recipe": _recipe("glm53-flash-dflash2-gb300"),
    "2x GB10 recipe": _recipe("glm53-flash-dflash2-2x-gb10"),
    # bf16 MLA and an fp8 drafter with 4 KV heads: pages that unify (unified grouping).
    "Kimi-Linear": C.recipe_input(
        "stock",
        memory=60 * C.GIB,
        target_config=copy.deepcopy(C.kimi_linear_config()),
        drafter_config=dict(C.recipe_configs()[1], num_key_value_heads=4),
        kv_cache_dtype="auto",
        drafter_kv_cache_dtype="fp8",
        **C.prefix_caching(True),
    ),
    "Qwen3-Next": _qwen3_next(),
}


# The batch each case plans with: `vllm serve`'s default on a GB300 (>= 160 GiB) and on a GB10; the
# flag given (8,192, H100's default); SchedulerConfig's 2,048 where the input names none.
CASES["Kimi-Linear, 8,192 batched"] = dict(CASES["Kimi-Linear"], max_num_batched_tokens=8192)
BATCHED = {
    "default recipe": 16384,
    "2x GB10 recipe": 2048,
    "Kimi-Linear": 2048,
    "Qwen3-Next": 2048,
    "Kimi-Linear, 8,192 batched": 8192,
}


@pytest.mark.parametrize("name", list(CASES))
def test_requests_at_once_equal_vllms_scheduler(name):
    inputs = GeometryInputs.from_json(CASES[name])
    report = simulate(inputs)
    assert report.with_drafter.error is None, report.with_drafter.error
    # 2: a prompt of one token; 9,217: one past the default recipe's block
    result = concurrency(report, inputs, [2, 8192, 9217, 32768])
    counted = requests_until_refused(inputs, list(result.contexts))
    for label in ("with_drafter", "without_drafter"):
        for fit, vllm in zip(result.fits[label], counted[label], strict=True):
            assert vllm["in_flight_tokens"] == in_flight_tokens(inputs) == 2 * BATCHED[name]
            where = (name, label, fit.tokens, vllm["refused"])
            assert (fit.admitted, fit.group_blocks, fit.peak_blocks, fit.prefill_chunks) == (
                vllm["requests"],
                tuple(vllm["holdings"]),
                vllm["peak_blocks"],
                len(vllm["chunks"]),
            ), where
            assert (fit.blocks_per_request, fit.vllm_max_concurrency) == (
                vllm["blocks_per_request"],
                vllm["vllm_max_concurrency"],
            ), where
            assert report_groups(getattr(report, label)) == vllm["groups"], where
    # The lengths differ in what they cost: a check that compares something. (Not monotonic in between:
    # with Kimi-Linear's 2,048-token blocks the last chunk of a prompt of 8,191 starts at 6,144, that of
    # 9,216 at 8,192, so the window behind the chunk in flight has freed one block fewer at 8,192 tokens.)
    counts = [f.admitted for f in result.fits["with_drafter"]]
    assert counts[0] < counts[-1], counts


def report_groups(plan) -> list[str]:
    return [g.spec_class for g in plan.groups]
