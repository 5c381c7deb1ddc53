"""Shared fixtures: the infra's engine, registry and synthetic bases, plus one e2e build.

The infra fixtures (tests/infra/fixtures.py) find the Docker engine, the
authenticated registry and the synthetic bases, and fail (never skip) when
CI=true and one is missing. The end-to-end fixtures live in tests/stack_e2e.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from engines import main_build, on_engine, target_engine  # noqa: F401

# Fixtures, imported to register them (pytest finds a conftest's names).
from infra.fixtures import (  # noqa: F401
    cosign,
    cpu_serving_base,
    cpu_serving_base_pushed,
    docker_engine,
    registry,
    synthetic_base_amd64,
    synthetic_base_arm64,
    wrong_vllm_base,
)
from stack_e2e import amd64_build, forget_session_images, logged_in  # noqa: F401


def pytest_collection_modifyitems(config, items):
    from parallel_groups import check_groups, order_items, record_unit_bases

    check_groups(items)
    order_items(items)
    record_unit_bases(config, items)


@pytest.fixture(scope="session", autouse=True)
def warm_parser():
    """This test process's warm parser process (tests/support/warm_preflight.py), started in the background,
    and the serve-parser oracle interpreter every `build.py` the tests start uses unless a test names its own
    (GLM53_ORACLE_PYTHON: tests/support/warm_oracle.py). A session started by a test (another release's
    agreement) keeps what its test process set."""
    from support.warm_oracle import oracle_wrapper
    from support.warm_preflight import SOCKET_ENV, the_warm_process

    from stackbuild.serve.validate import ORACLE_ENV

    if SOCKET_ENV not in os.environ and ORACLE_ENV not in os.environ:
        os.environ[SOCKET_ENV] = the_warm_process().address
        os.environ[ORACLE_ENV] = oracle_wrapper()
    yield


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from parallel_groups import SharedBuildScheduling

    return SharedBuildScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TEST_TIMELINE=DIR (run-tests.sh sets it), each test's start and end on its worker, one JSON
    line per test in DIR/WORKER.jsonl: tests/infra/ci_phases.py reports what each worker did when."""
    directory = os.environ.get("TEST_TIMELINE")
    started = time.time()
    yield
    if directory:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = json.dumps({"test": item.nodeid, "start": started, "end": time.time()})
        with open(os.path.join(directory, f"{worker}.jsonl"), "a") as timeline:
            timeline.write(line + "\n")
