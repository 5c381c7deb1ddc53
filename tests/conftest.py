"""Shared fixtures: the infra's engine, registry and synthetic bases, plus one e2e build.

The infra fixtures (tests/infra/fixtures.py) start or find the Docker engine
and the authenticated registry, and fail (never skip) when CI=true and they
are missing. The end-to-end fixtures below live in tests/stack_e2e.py.
"""
from __future__ import annotations

try:  # until tests/infra/fixtures.py lands
    from infra.fixtures import docker_engine, registry, synthetic_base_amd64, synthetic_base_arm64  # noqa: F401
    from stack_e2e import amd64_build, logged_in, stack_registry, wrong_vllm_base  # noqa: F401
except ImportError:
    pass
