"""The suite's scheduling (tests/parallel_groups.py): units taken in the order their bases are ready."""

from __future__ import annotations

from pathlib import PurePosixPath

from parallel_groups import AMD64_BUILD, LIVE_VLLM, SERVING, next_unit, order_items, unit_bases, unit_of

MULTI = "tests/e2e/image/test_multiplatform_e2e.py"
NEEDS = {
    AMD64_BUILD: ["amd64", "arm64"],
    LIVE_VLLM: ["serving"],
    MULTI: ["amd64", "arm64"],
    SERVING: ["serving"],
}
QUEUE = [
    "tests/unit/stackbuild/core/test_recipe.py",
    "tests/unit/geometry/verdict/test_fit.py",
    AMD64_BUILD,
    LIVE_VLLM,
    MULTI,
    SERVING,
]


def ready_of(*names: str):
    return lambda base: base in names


def test_nothing_built_yet_takes_the_first_unit_that_needs_no_base():
    assert next_unit(QUEUE, NEEDS, ready_of()) == "tests/unit/stackbuild/core/test_recipe.py"


def test_a_unit_whose_bases_are_built_goes_before_the_units_that_need_none():
    assert next_unit(QUEUE, NEEDS, ready_of("serving")) == LIVE_VLLM


def test_of_the_ready_units_the_costliest_goes_first():
    assert next_unit(QUEUE, NEEDS, ready_of("serving", "amd64", "arm64")) == LIVE_VLLM
    assert next_unit([AMD64_BUILD, MULTI, SERVING], NEEDS, ready_of("serving", "amd64", "arm64")) == AMD64_BUILD
    assert next_unit([SERVING, MULTI], NEEDS, ready_of("serving", "amd64", "arm64")) == MULTI


def test_a_unit_waits_until_every_base_it_needs_is_built():
    assert next_unit(QUEUE, NEEDS, ready_of("amd64")) == "tests/unit/stackbuild/core/test_recipe.py"


def test_when_only_waiting_units_are_left_the_one_nearest_to_ready_is_taken():
    waiting = [AMD64_BUILD, SERVING]
    assert next_unit(waiting, NEEDS, ready_of("amd64")) == AMD64_BUILD
    assert next_unit(waiting, NEEDS, ready_of()) == SERVING


class _Item:
    def __init__(self, nodeid: str, *fixtures: str):
        self.nodeid = nodeid
        self.fixturenames = fixtures


def test_a_units_bases_come_from_its_tests_fixtures():
    items = [
        _Item("tests/e2e/image/test_build_e2e.py::test_a", "registry", "synthetic_base_amd64"),
        _Item("tests/e2e/image/test_push_e2e.py::test_b", "synthetic_base_arm64"),
        _Item("tests/docs/test_docs_walk.py::test_c", "cpu_serving_base_pushed"),
        _Item("tests/unit/stackbuild/core/test_recipe.py::test_d", "tmp_path"),
    ]
    assert unit_bases(items) == {AMD64_BUILD: ["amd64", "arm64"], LIVE_VLLM: ["serving"]}
    assert unit_of("tests/e2e/image/test_push_e2e.py::test_b") == AMD64_BUILD


class _Collected:
    def __init__(self, nodeid: str, docker: bool):
        self.nodeid, self.docker = nodeid, docker
        self.path = PurePosixPath(nodeid.split("::")[0])

    def get_closest_marker(self, name: str):
        return object() if name == "docker" and self.docker else None


def test_the_docs_walk_runs_before_the_other_live_vllm_modules():
    """test_chain_cpu_hybrid.py compares its stock server with the patched server the walk served in the same
    session: within the live-vLLM unit the walk's tests come first, whatever the collection order."""
    collected = [
        _Collected("tests/e2e/serve/test_chain_cpu_hybrid.py::test_a", True),
        _Collected("tests/unit/stackbuild/core/test_recipe.py::test_b", False),
        _Collected("tests/docs/test_docs_walk.py::test_c", True),
        _Collected("tests/e2e/serve/test_chain_cpu_hybrid.py::test_d", True),
        _Collected("tests/docs/test_docs_walk.py::test_e", True),
        _Collected("tests/e2e/serve/test_multinode_cpu.py::test_f", True),
    ]
    items = list(collected)
    order_items(items)
    assert [i.nodeid.split("::")[1] for i in items] == ["test_b", "test_c", "test_e", "test_a", "test_d", "test_f"]
