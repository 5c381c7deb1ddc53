"""Which tests share a pytest-xdist worker (`pytest -n N`, as run-tests.sh runs it).

The unit of work a worker takes is a module, so a module-scoped fixture (the pristine vLLM
suite, the multi-platform build, the planner's scenarios) is set up once. Modules that share a
session build form one unit: those using the amd64 e2e build (`amd64_build`), and those using
the CPU serving image (`cpu_serving_base`), so that build is made once, by one worker.
`check_groups` holds SHARED_BUILD_MODULES to what the tests use.

Units start in the order their bases are ready: on a fresh machine run-tests.sh is still
building the synthetic bases (tests/infra/harness.py `base_ready`) while the suite runs. When a
worker asks for work it takes the costliest Docker unit whose bases are built (ENGINE_ORDER),
else a unit that needs no base (the tests that need no engine, first in collection order), and
only when nothing else is left a unit that must wait for its base. Which bases a unit needs
comes from its tests' fixtures (BASE_OF_FIXTURE), found at collection by the workers and kept
in pytest's cache for the scheduler, which sees node ids alone.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest
from infra import harness
from xdist.scheduler import LoadScopeScheduling

AMD64_BUILD = "engine-amd64-build"
# The main path's tests on the second engine (tests/engines.py): their own unit, whatever their module.
ENGINE28_RUNS = "engine-28"
ENGINE28_ID = re.compile(r"\[(?:.*-)?engine28(?:-.*)?\]$")
SERVING = "engine-serving"
# The modules that build CPU images with build.py and serve them (a vLLM server or group each, minutes
# of both cores): one worker takes them in turn, so two of them never serve at once.
LIVE_VLLM = "engine-live-vllm"
# The session fixture that makes a build, and the group of the modules whose tests use it.
SHARED_BUILDS = {"amd64_build": AMD64_BUILD, "cpu_serving_base": SERVING}
SHARED_BUILD_MODULES = {
    "test_build_e2e.py": AMD64_BUILD,
    "test_engine_ids_e2e.py": AMD64_BUILD,
    "test_oracle_record_e2e.py": AMD64_BUILD,
    "test_pinned_tags_e2e.py": AMD64_BUILD,
    "test_push_e2e.py": AMD64_BUILD,
    "test_reproducible_e2e.py": AMD64_BUILD,
    "test_verify_e2e.py": AMD64_BUILD,
    "test_signing_e2e.py": AMD64_BUILD,
    "test_signing_tamper_e2e.py": AMD64_BUILD,
    "test_signed_up_e2e.py": AMD64_BUILD,
    "test_serving_e2e.py": SERVING,
    "test_health_e2e.py": SERVING,
    "test_chain_cpu_hybrid.py": LIVE_VLLM,
    "test_multinode_cpu.py": LIVE_VLLM,
    "test_capacity_cpu_hybrid.py": LIVE_VLLM,
    "test_docs_walk.py": LIVE_VLLM,
}
# Docker units in the order workers take them, costliest first: the live-vLLM modules serve for
# minutes each on the CPU serving base, the critical path of a run on a fresh machine; the amd64 group
# holds two qemu builds; the rest follow.
ENGINE_ORDER = (LIVE_VLLM, AMD64_BUILD, "test_multiplatform_e2e.py", ENGINE28_RUNS, SERVING)
# Modules that run before the other modules of their unit: the docs walk serves the patched image whose
# figures test_chain_cpu_hybrid.py compares its stock server with (tests/served_in_run.py).
FIRST_IN_UNIT = ("test_docs_walk.py",)
# The fixtures that hand a test a synthetic base, and the base (run-tests.sh's job name) each waits for.
BASE_OF_FIXTURE = {
    "synthetic_base_amd64": "amd64",
    "synthetic_base_arm64": "arm64",
    "wrong_vllm_base": "wrong-version",
    "cpu_serving_base": "serving",
    "cpu_serving_base_pushed": "serving",
    "engine28_host": harness.ENGINE28,
}
# What a unit of the second engine waits for besides its fixtures' bases: that engine (run-tests.sh's job).
ENGINE28_JOB = harness.ENGINE28
# pytest's cache key under which the workers leave {unit: [bases]} for the scheduler.
UNIT_BASES_KEY = "parallel_groups/unit-bases"


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: the second engine's unit for its tests there, else its module's
    shared-build group, else its module."""
    if ENGINE28_ID.search(nodeid):
        return ENGINE28_RUNS
    module = nodeid.split("::", 1)[0]
    return SHARED_BUILD_MODULES.get(PurePosixPath(module).name, module)


def unit_bases(items: list[pytest.Item]) -> dict[str, list[str]]:
    """{unit: the bases its tests wait for} for the units that need one."""
    bases: dict[str, set[str]] = {}
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in BASE_OF_FIXTURE:
                bases.setdefault(unit_of(item.nodeid), set()).add(BASE_OF_FIXTURE[fixture])
        if unit_of(item.nodeid) == ENGINE28_RUNS:
            bases.setdefault(ENGINE28_RUNS, set()).add(ENGINE28_JOB)
    return {unit: sorted(names) for unit, names in sorted(bases.items())}


def engine_rank(unit: str) -> int:
    name = PurePosixPath(unit).name
    return ENGINE_ORDER.index(name) if name in ENGINE_ORDER else len(ENGINE_ORDER)


def next_unit(units: list[str], needs: dict[str, list[str]], ready) -> str:
    """The unit a worker takes next, of ``units`` (in queue order): the costliest whose bases are
    all ready, else the first that needs none, else the one that waits for the fewest bases."""
    runnable = [unit for unit in units if unit in needs and all(ready(base) for base in needs[unit])]
    if runnable:
        return min(runnable, key=engine_rank)
    free = [unit for unit in units if unit not in needs]
    if free:
        return free[0]
    return min(units, key=lambda unit: (sum(not ready(base) for base in needs[unit]), engine_rank(unit)))


class SharedBuildScheduling(LoadScopeScheduling):
    """pytest-xdist's per-scope scheduling with `unit_of` as the scope, each unit taken when its bases are ready."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        needs = self.config.cache.get(UNIT_BASES_KEY, {}) if self.config.cache else {}
        scope = next_unit(list(self.workqueue), needs, harness.base_ready)
        self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)


def record_unit_bases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the units' bases in pytest's cache for SharedBuildScheduling (it runs where nothing is collected)."""
    if config.cache is not None:
        config.cache.set(UNIT_BASES_KEY, unit_bases(items))


def check_groups(items: list[pytest.Item]) -> None:
    """A module whose tests use a shared build must be listed in that build's group."""
    wrong = set()
    for item in items:
        for fixture, group in SHARED_BUILDS.items():
            if fixture in getattr(item, "fixturenames", ()) and SHARED_BUILD_MODULES.get(item.path.name) != group:
                wrong.add(f"{item.path.name} uses {fixture}: list it in SHARED_BUILD_MODULES as {group}")
    if wrong:
        raise pytest.UsageError("tests/parallel_groups.py: " + "; ".join(sorted(wrong)))


def order_items(items: list[pytest.Item]) -> None:
    """Tests needing no engine first, then the Docker units in ENGINE_ORDER, and within a unit the modules of
    FIRST_IN_UNIT first (in place, stable)."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        within = 0 if item.path.name in FIRST_IN_UNIT else 1
        if item.get_closest_marker("docker") is None:
            return 0, within
        unit = unit_of(item.nodeid)
        name = PurePosixPath(unit).name
        return 1 + (ENGINE_ORDER.index(name) if name in ENGINE_ORDER else len(ENGINE_ORDER)), within

    items[:] = [item for _, _, item in sorted((rank(item), index, item) for index, item in enumerate(items))]
