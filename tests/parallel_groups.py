"""Which tests share a pytest-xdist worker (`pytest -n N --dist loadgroup`, as run-tests.sh runs).

A Docker test goes to the group of the costliest session build it uses, so that build is
made once and the tests using it run one after another on one worker: the arm64 base (qemu
builds, minutes), the amd64 e2e build, the CPU serving image; the remaining Docker tests form
one more group. Every other test is grouped by its module, so a module-scoped fixture (the
pristine vLLM suite, the planner's scenarios) is set up once.

The tests that need no engine come first: on a fresh machine run-tests.sh is still building
the synthetic bases while they run. The engine groups follow, costliest first.
"""
from __future__ import annotations

from typing import Optional

import pytest

# (group, the session fixture that puts a Docker test in it), costliest first.
ENGINE_GROUPS = (
    ("engine-qemu", "synthetic_base_arm64"),
    ("engine-amd64-build", "amd64_build"),
    ("engine-serving", "cpu_serving_base"),
)
OTHER_ENGINE_GROUP = "engine-containers"
GROUP_ORDER = tuple(group for group, _ in ENGINE_GROUPS) + (OTHER_ENGINE_GROUP,)


def engine_group(item: pytest.Item) -> Optional[str]:
    """The group of a Docker test, None for a test that needs no engine."""
    if item.get_closest_marker("docker") is None:
        return None
    used = set(getattr(item, "fixturenames", ()))
    for group, fixture in ENGINE_GROUPS:
        if fixture in used:
            return group
    return OTHER_ENGINE_GROUP


def assign_groups(items: list[pytest.Item], root) -> None:
    """Mark every item with its xdist group; engine groups last, in GROUP_ORDER (in place)."""
    rank = {group: index + 1 for index, group in enumerate(GROUP_ORDER)}
    keyed = []
    for index, item in enumerate(items):
        group = engine_group(item)
        item.add_marker(pytest.mark.xdist_group(group or f"module-{item.path.relative_to(root)}"))
        keyed.append(((rank[group] if group else 0, index), item))
    items[:] = [item for _, item in sorted(keyed, key=lambda pair: pair[0])]
