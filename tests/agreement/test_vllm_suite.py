"""The default release's own KV-cache tests (vLLM's, requirements/vllm.txt) as a guard for the patch series.

Its sdist ships vLLM's tests (`make -f tools/pristine.mk vllm-tests` unpacks
them into .cache/vllm-VERSION-sdist). Two pytest sessions
run the selected files of its ``tests/v1/core/`` (tests/vllm_suite/selection.txt),
one on a copy of the pristine tree and one on a copy with the series applied,
side by side; every test that passes on the pristine tree must pass on the
patched one.

Tests that build a ``ModelConfig`` read the model's ``config.json`` from the
Hub; they get local snapshots instead (tests/vllm_suite/hf-hub, a Hugging
Face cache layout, with ``HF_HUB_OFFLINE=1``). What still cannot run here is
deselected, each with its reason, in tests/vllm_suite/exclusions.txt, and the
pristine session must then have no failure at all: an exclusion list that
misses a failure, or a snapshot that stops working, fails this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from infra.fixtures import unavailable
from overlay_helpers import VERSION, copy_tree, oracle_python, pristine_dir, run_apply
from support.repo import REPO

pytestmark = pytest.mark.oracle

SUITE = Path(__file__).resolve().parents[1] / "vllm_suite"
HF_HUB = SUITE / "hf-hub"
OVERLAY_DOC = REPO / "docs" / "overlay.md"


def doc_figure(pattern: str) -> int:
    """The count docs/overlay.md gives where ``pattern``'s group stands (a number such as 1,132)."""
    found = re.search(pattern, " ".join(OVERLAY_DOC.read_text().split()))
    assert found, f"docs/overlay.md says nothing matching {pattern!r}"
    return int(found.group(1).replace(",", ""))


def vllm_tests_dir() -> Path:
    """VLLM_TESTS_DIR if set, else .cache/vllm-VERSION-sdist (make vllm-tests)."""
    env = os.environ.get("VLLM_TESTS_DIR")
    path = Path(env) if env else REPO / ".cache" / f"vllm-{VERSION}-sdist"
    if not (path / "tests" / "v1" / "core").is_dir():
        unavailable(
            f"no vLLM {VERSION} test suite at {path}: run `make -f tools/pristine.mk vllm-tests` or set VLLM_TESTS_DIR"
        )
    return path


def _entries(name: str) -> list[tuple[str, str]]:
    """(entry, reason) per non-comment line of tests/vllm_suite/NAME: the
    entry, then ``#`` and why."""
    out = []
    for line in (SUITE / name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        entry, _, reason = line.partition("#")
        out.append((entry.strip(), reason.strip()))
    return out


def selection() -> list[str]:
    return [entry for entry, _ in _entries("selection.txt")]


def exclusions() -> list[tuple[str, str]]:
    return _entries("exclusions.txt")


def _session(python: str, site: Path, suite: Path, junit: Path, tests: list[str] | None = None) -> subprocess.Popen:
    """pytest on ``tests`` (default: the selection less the exclusions) with
    ``site``'s vLLM first on sys.path; the outcome goes to ``junit``."""
    args = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        # vLLM's top-level tests/conftest.py imports the whole serving stack
        # (LLM, multimodal assets); tests/v1/core needs none of it.
        "--confcutdir=tests/v1",
        "-o",
        "addopts=",
        f"--junitxml={junit}",
    ]
    if tests is not None:
        args += tests
    else:
        args += selection()
        for entry, _ in exclusions():
            # A whole file is not even imported (some need packages the oracle
            # venv does not have); a test id is deselected.
            args += ["--deselect", entry] if "::" in entry else ["--ignore", entry]
    env = dict(
        os.environ,
        PYTHONPATH=str(site),
        PYTHONDONTWRITEBYTECODE="1",
        VLLM_TARGET_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(HF_HUB),
        TRANSFORMERS_OFFLINE="1",
    )
    log = open(junit.with_suffix(".log"), "w")
    return subprocess.Popen(args, cwd=suite, env=env, stdout=log, stderr=subprocess.STDOUT)


def _outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = next((k for k in ("error", "failure", "skipped") if k in kinds), "passed").replace(
            "failure", "failed"
        )
    return out


def _node_id(test: str) -> str:
    """pytest's node id for a JUnit ``classname::name``."""
    module, _, name = test.partition("::")
    return module.replace(".", "/") + ".py::" + name


def _run_both(python, sites: dict, suite: Path, base: Path, tag: str, tests=None) -> dict:
    """The stock and patched sessions side by side (one per core)."""
    runs = {}
    for name, site in sites.items():
        junit = base / f"{name}{tag}.xml"
        runs[name] = (junit, _session(python, site, suite, junit, tests))
    out = {}
    for name, (junit, proc) in runs.items():
        rc = proc.wait(timeout=1800)
        log = junit.with_suffix(".log").read_text()
        assert junit.is_file(), f"{name} session wrote no report (exit {rc}):\n{log[-4000:]}"
        out[name] = _outcomes(junit)
        out[name + "_log"] = log
    return out


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    suite = vllm_tests_dir()
    python = oracle_python()
    pristine = pristine_dir()
    base = tmp_path_factory.mktemp("vllm-suite")
    sites = {
        "stock": copy_tree(pristine, base / "stock" / "site"),
        "patched": copy_tree(pristine, base / "patched" / "site"),
    }
    done = run_apply("--site-packages", sites["patched"])
    assert done.returncode == 0, done.stderr
    out = _run_both(python, sites, suite, base, "")
    # A few of vLLM's tests are timed (a subprocess that must import vLLM
    # within 60 s): on a loaded machine one can fail in one session only. A
    # test that failed on either tree runs again on both; the second answer
    # is the one compared.
    suspects = [
        t
        for t, o in out["stock"].items()
        if o in ("failed", "error") or out["patched"].get(t) in ("failed", "error", None)
    ]
    if suspects:
        again = _run_both(python, sites, suite, base, "-again", [_node_id(t) for t in suspects])
        for name in ("stock", "patched"):
            out[name].update(again[name])
            out[name + "_log"] += "\n--- again ---\n" + again[name + "_log"]
    return out


def test_exclusions_say_why():
    for entry, reason in exclusions():
        assert entry.startswith("tests/v1/core/") and reason, entry
    assert doc_figure(r"exclusions\.txt` \(([\d,]+) entries") == len(exclusions())


def test_pristine_passes_what_is_not_excluded(sessions):
    stock = sessions["stock"]
    failed = sorted(t for t, o in stock.items() if o in ("failed", "error"))
    assert len(stock) > 500, sessions["stock_log"][-4000:]
    assert not failed, (
        f"{len(failed)} tests fail on the pristine tree and are not in "
        "tests/vllm_suite/exclusions.txt:\n" + "\n".join(failed[:50])
    )


def test_patched_passes_everything_pristine_passes(sessions):
    stock, patched = sessions["stock"], sessions["patched"]
    passed = {t for t, o in stock.items() if o == "passed"}
    broken = sorted(t for t in passed if patched.get(t) != "passed")
    assert not broken, (
        f"{len(broken)} of {len(passed)} tests that pass on the pristine tree do not "
        "pass with the series:\n"
        + "\n".join(f"{t}: {patched.get(t, 'not run')}" for t in broken[:50])
        + "\n"
        + sessions["patched_log"][-4000:]
    )


def test_report_counts(sessions, capsys):
    """The counts (printed with -s)."""
    stock, patched = sessions["stock"], sessions["patched"]
    both = sum(1 for t, o in stock.items() if o == "passed" and patched.get(t) == "passed")
    skipped = sum(1 for o in stock.values() if o == "skipped")
    with capsys.disabled():
        print(
            f"\nvLLM {VERSION} tests/v1/core: {len(stock)} run, {both} pass on the pristine "
            f"and the patched tree, {skipped} skipped; {len(exclusions())} exclusions"
        )
    # docs/overlay.md gives both counts; they are this run's
    assert doc_figure(r"scheduler: ([\d,]+) tests run after the exclusions") == len(stock)
    assert doc_figure(r"\(all ([\d,]+) do:") == both
