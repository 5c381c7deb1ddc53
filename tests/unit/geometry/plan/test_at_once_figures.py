"""The default recipe's requests at once in the gate report (the together model, with the drafter, at the
default lengths) against the figures vLLM 0.34.0's own scheduler ran (tests/default_recipe_figures.py;
tests/agreement/test_together_figures.py runs it again), and the admission count kept beside them."""

from __future__ import annotations

import default_recipe_figures as F
import pytest
from support.repo import REPO

from geometry.image_contract import Behaviour
from geometry.model.inputs import GeometryInputs
from geometry.plan.concurrency import concurrency
from geometry.plan.simulate import simulate
from geometry.plan.together_state import Workload, workload
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import load_recipe

DEFAULT = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"


def _fits(behaviour: Behaviour):
    inputs = GeometryInputs.from_json(gate_input(load_recipe(DEFAULT), vllm_behaviour=behaviour).to_json())
    return concurrency(simulate(inputs), inputs).fits


@pytest.fixture(scope="module")
def stock():
    return _fits(Behaviour.STOCK)


@pytest.fixture(scope="module")
def overlay():
    return _fits(Behaviour.OVERLAY)


def test_the_length_rule_by_hand():
    """A length alone: output min(4,096, N // 4, at least 1), the prompt the rest; an output named is kept."""
    assert workload(1 << 20) == Workload(1_048_576 - 4_096, 4_096)
    assert workload(32_768) == Workload(28_672, 4_096)
    assert workload(8_192) == Workload(6_144, 2_048)
    assert workload(2) == Workload(1, 1)
    assert workload(6_000, 200) == Workload(6_000, 200)


def test_stock_figures_are_vllms(stock):
    got = [(f.work.prompt, f.work.output, f.requests) for f in stock["with_drafter"]]
    assert got == [(*w, n) for w, n in zip(F.TOGETHER_LENGTHS, F.TOGETHER_STOCK)]


@pytest.mark.parametrize("i", range(len(F.TOGETHER_LENGTHS)))
def test_overlay_figures_are_vllms(overlay, i):
    fit = overlay["with_drafter"][i]
    assert ((fit.work.prompt, fit.work.output), fit.requests) == (F.TOGETHER_LENGTHS[i], F.TOGETHER_OVERLAY[i])


def test_the_admission_count_stays_beside_the_count(stock, overlay):
    """The admission count at max_model_len (tests/default_recipe_figures.py, by hand) is its own field;
    the target-alone plans carry no together count."""
    assert overlay["with_drafter"][0].admitted == F.PREFIX_ON.requests_of_1m_at_once
    assert all(f.requests is None for label in ("target_only_same_spec", "without_drafter") for f in stock[label])
