"""The applier: strict, all-or-nothing, verified, on copies of the pristine tree."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from overlay_helpers import (
    APPLY,
    SERIES,
    VERSION,
    copy_tree,
    lock,
    oracle_python,
    pristine_dir,
    run_apply,
    tree_digest,
)

from overlay.bytecode import python_rejects, stale_bytecode
from overlay.lock import read_series, series_sha256, sha256_file
from overlay.manifest import OverlayManifest
from tools import refresh_lock as refresh


@pytest.fixture(scope="module")
def pristine() -> Path:
    return pristine_dir()


@pytest.fixture
def site(tmp_path, pristine) -> Path:
    return copy_tree(pristine, tmp_path / "site-packages")


def _sha(path: Path) -> str:
    return sha256_file(path)


def test_lock_matches_pristine_tree(pristine):
    """lock.json is what refresh.py computes from the pristine tree."""
    assert refresh.compute_lock(SERIES, pristine) == lock()


def test_every_patch_has_a_header(pristine):
    for name in read_series(SERIES):
        text = (SERIES / name).read_text()
        header = text.split("\n--- a/", 1)[0]
        assert "What it changes" in header and "Why" in header, name


def test_check_apply_manifest_bytecode_and_rerun(site, tmp_path):
    before = tree_digest(site)
    check = run_apply("--site-packages", site, "--check", "--json")
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["state"] == "pristine"
    assert tree_digest(site) == before  # --check writes nothing

    manifest = tmp_path / "opt" / "glm53-overlay" / "manifest.json"
    done = run_apply("--site-packages", site, "--manifest", manifest, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["action"] == "applied"

    files = lock()["files"]
    for rel, want in files.items():
        assert _sha(site / rel) == want["patched_sha256"], rel
    after = tree_digest(site)
    changed = {k for k, v in after.items() if before.get(k) != v}
    expected = set(files) | {f"dir:{Path(r).parent / '__pycache__'}" for r in files}
    assert {c for c in changed if not c.endswith(".pyc")} <= expected

    # By default no bytecode is written (this tree had none to deal with).
    for rel in files:
        assert stale_bytecode(site / rel) == [], rel
    assert result["bytecode"] == [] and result["stale_bytecode"] == {"kept": [], "removed": []}

    m = json.loads(manifest.read_text())
    assert m["version"] == VERSION
    assert m["series_sha256"] == series_sha256(SERIES)
    assert {f["file"] for f in m["files"]} == set(files)
    for entry in m["files"]:
        assert entry["sha256_before"] == files[entry["file"]]["pristine_sha256"]
        assert entry["sha256_after"] == files[entry["file"]]["patched_sha256"]
        assert entry["patches"]
    assert [p["name"] for p in m["patches"]] == read_series(SERIES)
    # The gate and the pre-flight read it as overlay/manifest.py's OverlayManifest, field for field.
    read = OverlayManifest.from_json(m)
    assert read.to_json() == m and read.draft_block_fit_applied
    assert read.patched_modules() == [rel[:-3].replace("/", ".") for rel in sorted(files) if rel.endswith(".py")]

    again = run_apply("--site-packages", site)
    assert again.returncode == 0, again.stderr
    assert "already-applied" in again.stdout
    check = run_apply("--site-packages", site, "--check", "--json")
    assert json.loads(check.stdout)["state"] == "applied"


def test_write_bytecode_is_hash_based(site, tmp_path):
    manifest = tmp_path / "manifest.json"
    done = run_apply("--site-packages", site, "--write-bytecode", "--manifest", manifest, "--json")
    assert done.returncode == 0, done.stderr
    files = lock()["files"]
    written = []
    for rel in files:
        pyc = Path(importlib.util.cache_from_source(str(site / rel)))
        assert stale_bytecode(site / rel) == [pyc], rel  # only the fresh one
        data = pyc.read_bytes()
        flags = int.from_bytes(data[4:8], "little")
        assert flags & 0b1, f"{pyc} is not hash-based"
        assert data[8:16] == importlib.util.source_hash((site / rel).read_bytes())
        written.append(str(pyc.relative_to(site)))
    assert sorted(json.loads(done.stdout)["bytecode"]) == sorted(written)
    assert json.loads(manifest.read_text())["bytecode"] == sorted(written)


def _pyc(source: Path, mode: str, tmp: Path) -> bytes:
    """Bytecode of ``source`` as py_compile writes it in ``mode``."""
    out = tmp / f"{source.stem}-{mode}.pyc"
    py_compile.compile(
        str(source), cfile=str(out), doraise=True, invalidation_mode=py_compile.PycInvalidationMode[mode]
    )
    return out.read_bytes()


def test_python_rejects_only_bytecode_it_cannot_load(tmp_path):
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    old.write_text("x = 1\n")
    new.write_text("x = 2\n")  # same size, other content
    longer = b"x = 22\n"
    cases = {
        "checked old": (_pyc(old, "CHECKED_HASH", tmp_path), new.read_bytes(), True),
        "checked new": (_pyc(new, "CHECKED_HASH", tmp_path), new.read_bytes(), False),
        "unchecked old": (_pyc(old, "UNCHECKED_HASH", tmp_path), new.read_bytes(), False),
        "timestamp, same size": (_pyc(old, "TIMESTAMP", tmp_path), new.read_bytes(), False),
        "timestamp, other size": (_pyc(old, "TIMESTAMP", tmp_path), longer, True),
        "truncated": (b"\x00" * 8, longer, True),
    }
    for n, (name, (data, source, rejected)) in enumerate(cases.items()):
        where = tmp_path / f"case{n}"
        pyc = Path(importlib.util.cache_from_source(str(where / "mod.py")))
        pyc.parent.mkdir(parents=True)
        (where / "mod.py").write_bytes(source)
        pyc.write_bytes(data)
        assert bool(python_rejects(pyc, source)) is rejected, name
        if rejected:  # and the interpreter agrees: it runs the new source, not the bytecode
            run = subprocess.run(
                [sys.executable, "-c", "import mod; print(mod.x)"],
                cwd=where,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
            assert run.stdout.strip() == source.decode().split("=")[1].strip(), (name, run.stderr)


def test_stale_bytecode_kept_only_where_python_rejects_it(site, pristine, tmp_path):
    """The base's bytecode of a patched module stays only if no Python can load it for
    the new source (no whiteout in the layer); loadable bytecode is replaced in place,
    or removed when it belongs to another interpreter."""
    rel = "vllm/v1/engine/core.py"
    source = site / rel
    own = Path(importlib.util.cache_from_source(str(source)))
    cache = own.parent
    cache.mkdir(exist_ok=True)
    own.write_bytes(_pyc(pristine / rel, "UNCHECKED_HASH", tmp_path))
    foreign_timestamp = cache / "core.cpython-399.pyc"
    foreign_timestamp.write_bytes(_pyc(pristine / rel, "TIMESTAMP", tmp_path))
    foreign_unchecked = cache / "core.cpython-399.opt-1.pyc"
    foreign_unchecked.write_bytes(_pyc(pristine / rel, "UNCHECKED_HASH", tmp_path))
    other_module = cache / "core_client.cpython-399.pyc"
    other_module.write_bytes(b"other module")
    kept_bytes = foreign_timestamp.read_bytes()

    manifest = tmp_path / "manifest.json"
    done = run_apply("--vllm-dir", site / "vllm", "--manifest", manifest, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)

    data = own.read_bytes()  # replaced in place by bytecode of the patched source
    assert int.from_bytes(data[4:8], "little") == 0b11
    assert data[8:16] == importlib.util.source_hash(source.read_bytes())
    assert foreign_timestamp.read_bytes() == kept_bytes
    assert not foreign_unchecked.exists()
    assert other_module.read_bytes() == b"other module"
    rel_of = lambda p: str(p.relative_to(site))  # noqa: E731
    assert result["bytecode"] == [rel_of(own)]
    assert result["stale_bytecode"] == {
        "kept": [{"file": rel_of(foreign_timestamp), "rejected": "timestamp-based, recorded source size differs"}],
        "removed": [rel_of(foreign_unchecked)],
    }
    assert json.loads(manifest.read_text())["stale_bytecode"] == result["stale_bytecode"]


def test_drifted_file_is_refused_and_tree_unchanged(site):
    target = site / "vllm" / "v1" / "worker" / "gpu" / "attn_utils.py"
    lines = target.read_text().splitlines(keepends=True)
    lines[10] = lines[10].rstrip("\n") + "  # local edit\n"
    target.unlink()  # break the hard link before editing
    target.write_text("".join(lines))
    before = tree_digest(site)

    for extra in ([], ["--check"]):
        proc = run_apply("--site-packages", site, *extra)
        assert proc.returncode == 1
        errors = proc.stderr.strip().splitlines()
        assert len(errors) == 1, proc.stderr
        assert str(target) in errors[0] and "sha256" in errors[0]
        assert tree_digest(site) == before


def test_wrong_version_is_refused_and_tree_unchanged(site):
    meta = site / f"vllm-{VERSION}.dist-info" / "METADATA"
    major_minor, patch = VERSION.rsplit(".", 1)
    other = f"{major_minor}.{int(patch) + 1}"
    meta.write_text(meta.read_text().replace(f"Version: {VERSION}", f"Version: {other}", 1))
    before = tree_digest(site)
    proc = run_apply("--site-packages", site)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert other in line and VERSION in line and str(meta) in line
    assert tree_digest(site) == before


def test_missing_dist_info_is_refused(site):
    shutil.rmtree(site / f"vllm-{VERSION}.dist-info")
    before = tree_digest(site)
    proc = run_apply("--site-packages", site)
    assert proc.returncode == 1
    assert "dist-info" in proc.stderr
    assert tree_digest(site) == before


def _series_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "series" / SERIES.name
    shutil.copytree(SERIES, copy)
    return copy


def test_second_patch_failing_leaves_tree_unchanged(site, tmp_path):
    """Patch 2 no longer matches its file: nothing is written, patch 1 included."""
    series = _series_copy(tmp_path)
    names = read_series(series)
    second = series / names[1]
    text = second.read_text()
    # Change one context line of the second patch (the file is untouched).
    marker = "\n             # buffer, a 1-block/req scratch buffer"
    assert marker in text
    second.write_text(text.replace(marker, "\n             # buffer, a 1-block/req SCRATCH buffer", 1))
    data = json.loads((series / "lock.json").read_text())
    data["patches"][names[1]] = sha256_file(second)
    (series / "lock.json").write_text(json.dumps(data))

    before = tree_digest(site)
    proc = run_apply("--series", series, "--site-packages", site)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "vllm/v1/engine/core.py" in line and names[1] in line
    assert "does not match" in line
    assert tree_digest(site) == before


def test_patch_leaving_a_syntax_error_is_refused(site, tmp_path, pristine):
    """A series whose result does not compile is refused before anything is written,
    even when its lock records that result."""
    series = _series_copy(tmp_path)
    second = series / read_series(series)[1]
    text = second.read_text()
    added = "+                and not set(g.layer_names) <= draft_layers\n"
    assert added in text
    second.write_text(text.replace(added, "+                and not set(g.layer_names) <=\n", 1))
    (series / "lock.json").write_text(json.dumps(refresh.compute_lock(series, pristine)))

    before = tree_digest(site)
    proc = run_apply("--series", series, "--site-packages", site)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "vllm/v1/engine/core.py" in line and "does not compile after patching" in line
    assert tree_digest(site) == before


def test_tampered_patch_is_refused(site, tmp_path):
    series = _series_copy(tmp_path)
    first = series / read_series(series)[0]
    first.write_text(first.read_text().replace("Why", "Why not", 1))
    before = tree_digest(site)
    proc = run_apply("--series", series, "--site-packages", site)
    assert proc.returncode == 1
    assert str(first) in proc.stderr
    assert tree_digest(site) == before


def test_failure_after_files_were_replaced_rolls_back(site, tmp_path):
    """A smoke import that fails after the commit restores every file."""
    before = tree_digest(site)
    # The host's stdlib-only Python cannot import vLLM (no torch): the smoke
    # import fails after every patched file and .pyc has been moved in place.
    python = shutil.which("python3") or sys.executable
    probe = run_apply("--print-series-sha256", python=python)
    assert probe.returncode == 0
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("python3 can import torch; no failing interpreter at hand")
    manifest = tmp_path / "m" / "manifest.json"
    proc = run_apply("--site-packages", site, "--smoke-import", "--manifest", manifest, python=python)
    assert proc.returncode == 1
    assert "smoke import" in proc.stderr
    assert tree_digest(site) == before
    assert not manifest.exists() and not manifest.parent.exists()


@pytest.mark.oracle
def test_smoke_import_passes_with_vllm_python(site):
    python = oracle_python()
    proc = run_apply("--site-packages", site, "--smoke-import", "--json", python=python)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["action"] == "applied"


def test_locates_vllm_without_importing_it(site, tmp_path):
    """Without --site-packages/--vllm-dir the package is found on sys.path
    (find_spec) and never imported: the tree here cannot even be imported
    by a Python without torch."""
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run(
        [shutil.which("python3") or sys.executable, str(APPLY), "--check", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["package_dir"] == str(site / "vllm")


def test_series_sha256_is_stable_and_content_based(tmp_path):
    copy = _series_copy(tmp_path)
    assert series_sha256(copy) == series_sha256(SERIES)
    (copy / "series").write_text((copy / "series").read_text() + "\n# note\n")
    assert series_sha256(copy) != series_sha256(SERIES)
