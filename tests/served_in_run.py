"""What a live server of this test run reported, kept for another test module of the same run to compare with.

The store is the pytest session's stash, so nothing outlives the run: a figure is there only when a server
served it in this session. tests/docs/test_docs_walk.py keeps the KV-cache figures its patched server (the
image `make image` built) reported; tests/e2e/serve/test_chain_cpu_hybrid.py compares its stock server with them.
Both are in the live-vLLM unit of tests/parallel_groups.py (one worker, one session), the walk first.
"""

from __future__ import annotations

import pytest
from infra.fixtures import in_ci

PATCHED_SERVER = pytest.StashKey[dict]()


def keep_patched(config: pytest.Config, figures: dict, source: str) -> None:
    """The patched server's KV-cache figures (`qualify --json --server-log`'s served values, by name)."""
    config.stash[PATCHED_SERVER] = {"figures": dict(figures), "source": source}


def patched(config: pytest.Config) -> dict:
    """{"figures", "source"} the patched server of this run reported. None served: a failure under CI=true
    (the walk must have served it in the same run), a skip otherwise."""
    kept = config.stash.get(PATCHED_SERVER, None)
    if kept is None:
        message = (
            "no patched server reported its KV cache in this run: tests/docs/test_docs_walk.py serves it, "
            "in the same pytest session and before this test (tests/parallel_groups.py orders the live-vLLM unit)"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return kept
