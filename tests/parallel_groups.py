"""Which tests share a pytest-xdist worker (`pytest -n N`, as run-tests.sh runs it).

The unit of work a worker takes is a module, so a module-scoped fixture (the pristine vLLM
suite, the multi-platform build, the planner's scenarios) is set up once. Modules that share a
session build form one unit: those using the amd64 e2e build (`amd64_build`), and those using
the CPU serving image (`cpu_serving_base`), so that build is made once, by one worker.
`check_groups` holds SHARED_BUILD_MODULES to what the tests use.

The tests that need no engine come first: on a fresh machine run-tests.sh is still building
the synthetic bases while they run. The Docker modules follow, the costliest first.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from xdist.scheduler import LoadScopeScheduling

AMD64_BUILD = "engine-amd64-build"
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
    "test_serving_e2e.py": SERVING,
    "test_health_e2e.py": SERVING,
    "test_chain_cpu_hybrid.py": LIVE_VLLM,
    "test_multinode_cpu.py": LIVE_VLLM,
    "test_docs_walk.py": LIVE_VLLM,
}
# Docker units in the order workers take them, costliest first (the amd64 group holds two qemu builds); the rest follow.
ENGINE_ORDER = (AMD64_BUILD, LIVE_VLLM, "test_multiplatform_e2e.py", SERVING)


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its module's shared-build group, else its module."""
    module = nodeid.split("::", 1)[0]
    return SHARED_BUILD_MODULES.get(PurePosixPath(module).name, module)


class SharedBuildScheduling(LoadScopeScheduling):
    """pytest-xdist's per-scope scheduling with `unit_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


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
    """Tests needing no engine first, then the Docker units in ENGINE_ORDER (in place, stable)."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("docker") is None:
            return 0
        unit = unit_of(item.nodeid)
        name = PurePosixPath(unit).name
        return 1 + (ENGINE_ORDER.index(name) if name in ENGINE_ORDER else len(ENGINE_ORDER))

    items[:] = [item for _, _, item in sorted((rank(item), index, item) for index, item in enumerate(items))]
