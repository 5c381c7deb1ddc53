"""The vLLM releases the simulator models, and what differs between them (stdlib only).

The simulator's rules are written once, for the planning code the modelled releases share
(``v1/core/kv_cache_planning.py``, the spec kinds of ``v1/kv_cache_interface.py``, the
platforms' block-size alignment). Where a release plans otherwise, the difference is a field
of its entry here, read where the rule applies; a release with no entry is refused, by name,
before anything is planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadInput


@dataclass(frozen=True)
class VllmRelease:
    """What the simulator reads of one vLLM release."""

    version: str
    # CacheConfig.DEFAULT_BLOCK_SIZE, and the block CpuPlatform.update_block_size_for_backend
    # asks its backends for when none is given.
    default_block_size: int
    cpu_default_block_size: int
    # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the batch without a flag or a GPU default.
    scheduler_max_num_batched_tokens: int
    # VllmConfig.max_concurrent_batches with async scheduling (on by default on a GPU): the
    # batches whose tokens a sliding-window group holds in flight.
    max_concurrent_batches: int


V0_33_0 = VllmRelease(
    version="0.33.0",
    default_block_size=16,
    cpu_default_block_size=128,
    scheduler_max_num_batched_tokens=2048,
    max_concurrent_batches=2,
)

RELEASES: dict[str, VllmRelease] = {r.version: r for r in (V0_33_0,)}
# The release the oracle runs (requirements/vllm.txt) and a gate input without a version means.
DEFAULT_VERSION = V0_33_0.version


class VllmVersionNotModelled(BadInput):
    """A vLLM release the simulator has no entry for."""


def public_version(version: str) -> str:
    """``0.32.0+cpu`` -> ``0.32.0``: the release, without a local build label."""
    return version.split("+", 1)[0]


def release(version: str) -> VllmRelease:
    """The entry of ``version`` (a local label such as ``+cpu`` ignored), or VllmVersionNotModelled."""
    found = RELEASES.get(public_version(version)) if isinstance(version, str) else None
    if found is None:
        raise VllmVersionNotModelled(
            f"vLLM {version} is not modelled by the geometry gate (modelled: {', '.join(RELEASES)})"
        )
    return found
