"""The target's attention backend as vLLM's own selector picks it, against the simulator's choice.

The oracle builds the target's layers on the simulator's backend table (only the drafter's backend is vLLM's choice
in plan_with_vllm, compared in test_plan_agreement.py), so its plans cannot disagree with the simulator's choice of
the target's backend. Here vLLM's selector picks it for each draw of the same seeded sample and for the dense and
Qwen3-MoE matrices (support/target_selection.py: full attention, dense MLA, sparse MLA, from the configs and flags
as vLLM reads them, under the serving GPU's platform), and the simulator's choice is compared with it; where vLLM's
selector refuses, the refusal's reason is compared (geometry/oracle/refusals.py reads both messages).

Where this CPU host cannot pick as the GPU would (a candidate vLLM weighs first refused here only for lacking a
GPU kernel), the simulator's choice must be one of those vLLM may pick on the GPU: docs/gate.md ("Who picks the
backends") says where and why. The disagreements vLLM's code
shows (``KNOWN``) are simulator bugs, each reported as an expected failure with the reason vLLM gives, until the
simulator models the choice (or refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402
from plan_agreement import BEHAVIOUR, SEED, N, imported_vllm_version, inputs  # noqa: E402
from support.target_selection import (  # noqa: E402
    Selection,
    TargetAsk,
    simulator_target_backend,
    vllm_target_selection,
)

from geometry.errors import BadInput  # noqa: E402
from geometry.oracle import refusals  # noqa: E402

CASES = {
    **C.draws(C.sample(N, SEED), BEHAVIOUR, imported_vllm_version()),
    **{f"dense{i}": d for i, d in enumerate(C.dense_matrix(BEHAVIOUR))},
    **{f"moe{i}": d for i, d in enumerate(C.qwen3_moe_matrix(BEHAVIOUR))},
}


@dataclass(frozen=True)
class Known:
    """A disagreement vLLM's code shows: ``holds`` (the question, the simulator's backend, vLLM's answer)."""

    why: str
    holds: Callable[[TargetAsk, str | None, Selection], bool]


# None left: the simulator models vLLM's choice for every layer the cases ask about (geometry/kv/target_backend.py).
KNOWN: tuple[Known, ...] = ()


def _dtype_refusal_agrees(sim_error: str, vllm_error: str) -> bool:
    """The simulator's "<backend> does not take kv_cache_dtype" against vLLM's "No valid attention backend found":
    the same dtype, that backend refused by vLLM for it too."""
    sim, read = refusals.reason(sim_error, refusals.SIMULATOR), refusals.reason(vllm_error, refusals.VLLM)
    if not sim or not read or sim[0] != "backend does not take the KV cache dtype" or read[0] != "no valid backend":
        return False
    return sim[2] == read[2] and "kv_cache_dtype" in read[3].get(sim[1], ())


def _outcome(data: dict) -> tuple[TargetAsk, str | None, str | None, Selection]:
    case = inputs(data)
    try:
        sim, sim_error = simulator_target_backend(case)
    except BadInput as exc:
        pytest.skip(f"the simulator does not model this target: {exc}")
    ask, selection = vllm_target_selection(case)
    return ask, sim, sim_error, selection


def _differences(sim: str | None, sim_error: str | None, selection: Selection) -> list[str]:
    if selection.host_dependent:
        if sim in selection.possible:
            return []
        return [
            f"target backend: simulator {sim or sim_error!r}, vLLM on the GPU one of {list(selection.possible)} "
            f"(this host: {selection.host_dependent})"
        ]
    if sim_error and selection.error:
        if _dtype_refusal_agrees(sim_error, selection.error):
            return []
        return refusals.differences("target backend", sim_error, selection.error)
    if sim != selection.backend:
        return [
            f"target backend: simulator {sim or sim_error!r}, vLLM's selector {selection.backend or selection.error!r}"
        ]
    return []


@pytest.mark.parametrize("case_id", list(CASES))
def test_the_target_runs_the_backend_vllms_selector_picks(case_id):
    """The simulator's backend for the target's full-attention or MLA layers is the one vLLM's selector picks for the
    configs and flags of the case, or both refuse for the same reason; where this host cannot pick as the GPU would,
    it is one of those vLLM may pick there."""
    ask, sim, sim_error, selection = _outcome(CASES[case_id])
    diffs = _differences(sim, sim_error, selection)
    known = [k.why for k in KNOWN if not sim_error and k.holds(ask, sim, selection)]
    if diffs and known:
        pytest.xfail(f"{known[0]} ({diffs[0]})")
    assert not diffs, "\n".join(diffs)


def test_the_comparison_covers_each_kind_of_layer_and_each_known_disagreement():
    """Across the cases, vLLM's selector answers for the GPU (its choice compared, not only its candidates) for full
    attention on SM90 and SM12x, dense MLA on SM10x and SM12x and sparse MLA on SM10x, agreeing with the simulator,
    and refusals agree too; each entry of ``KNOWN``
    is seen (an entry no case shows any more is stale)."""
    decided, seen, asks = set(), set(), set()
    for data in CASES.values():
        try:
            ask, sim, sim_error, selection = _outcome(data)
        except pytest.skip.Exception:
            continue
        asks.add(ask)
        agreed = not _differences(sim, sim_error, selection)
        if not selection.host_dependent:
            decided.add((ask.role, ask.use_sparse, ask.family, agreed, selection.error is not None))
        seen.update(k.why for k in KNOWN if not sim_error and k.holds(ask, sim, selection))
    summary = f"{len(asks)} distinct questions; decided on this host: {sorted(decided)}"
    print(summary)
    agreeing = {(role, sparse, family) for role, sparse, family, agreed, _ in decided if agreed}
    assert {("attention", False, 90), ("attention", False, 120), ("mla_latent", False, 120)} <= agreeing, summary
    assert {("mla_latent", False, 100), ("mla_latent", True, 100)} <= agreeing, summary
    assert any(refused and agreed for *_, agreed, refused in decided), summary
    if N >= 100:
        assert seen == {k.why for k in KNOWN}, summary


@pytest.mark.parametrize("family", [90, 100, 120])
def test_the_recipes_sparse_mla_backend_on_each_family(family):
    """The default recipe's GLM-5.3 sparse MLA layer: on SM10x vLLM's selector answers here as on the GPU
    (FLASHINFER_MLA_SPARSE for the fp8 cache the model's config hook sets); on SM90 and SM12x a candidate it weighs
    first needs FlashInfer's kernels, so this host names the backends the GPU may pick, the simulator's among them
    (docs/gate.md, "Who picks the backends"). When a release or host decides those too, this fails."""
    data = dict(C.recipe_input(BEHAVIOUR), capability_family=family, block_size=None)
    ask, sim, sim_error, selection = _outcome(data)
    assert ask.role == "mla_latent" and ask.use_sparse and ask.head_size == 512
    assert sim is not None and not _differences(sim, sim_error, selection), (sim, sim_error, selection)
    if family == 100:
        assert ask.kv_cache_dtype == "fp8" and not selection.host_dependent
        assert selection.backend == sim == "FLASHINFER_MLA_SPARSE"
    else:
        assert selection.host_dependent and "FlashInfer" in selection.host_dependent, selection
