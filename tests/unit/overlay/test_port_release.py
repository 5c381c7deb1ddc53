"""tools.port_release (make port): a vLLM release fetched, the series ported onto it, the gate held to its
planning; one report and one exit code per outcome.

Real wheels from .cache/wheels (make pristine-all fetches them; nothing is downloaded here), the real
series, the real applier and vLLM's own planning code. Expected hunks are found independently, by
searching the new tree for each hunk's own lines.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from infra.fixtures import unavailable
from overlay_helpers import OVERLAY
from support.repo import REPO

from geometry.vllm_versions import RELEASES
from overlay.diff import parse_patch
from overlay.lock import read_series
from tools.port_report import PortExit
from tools.pristine import cache_dir

SERIES = OVERLAY / "series"
GB300 = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"


def _wheel(version: str) -> Path:
    found = sorted((cache_dir() / "wheels").glob(f"vllm-{version}-*.whl"))
    if not found:
        unavailable(f"no vllm {version} wheel in {cache_dir() / 'wheels'}: run `make pristine-all`")
    return found[0]


def _port(*args) -> tuple:
    proc = subprocess.run(
        [sys.executable, "-m", "tools.port_release", *map(str, args), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else None), proc.stderr


def _hunks(series: Path) -> list:
    return [
        (n, fp.path, h)
        for n in read_series(series)
        for fp in parse_patch((series / n).read_bytes(), n)
        for h in fp.hunks
    ]


def _old_text(hunk) -> str:
    return "".join(t.decode() for tag, t in hunk.lines if tag in (" ", "-"))


def test_the_0_33_0_series_on_0_34_0_needs_hand_work_at_the_hunks_whose_code_moved_or_went(tmp_path):
    _wheel("0.34.0")
    code, report, err = _port("--to", "0.34.0", "--from", "vllm-0.33.0", "--out", tmp_path)
    assert code == PortExit.HAND_WORK == report["exit_code"], err
    assert report["outcome"] == "needs hand work" and not report["port"]["applies"]
    tree = cache_dir() / "vllm-0.34.0"
    hand = {(h["patch"], h["file"], h["header"]): h for h in report["port"]["hand_work"]}
    expected = set()
    for patch, path, hunk in _hunks(SERIES / "vllm-0.33.0"):
        target = tree / path
        if not target.is_file() or _old_text(hunk) not in target.read_text():
            expected.add((patch, path, f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@"))
    assert set(hand) == expected
    fit = "0001-worker-fit-draft-block-size-to-target-page.patch"
    # 0.34.0 has only the V2 GPU runner: both of the V1 runner's hunks, and utils.py's hunk 2
    assert not (tree / "vllm/v1/worker/gpu_model_runner.py").exists()
    missing = [h for k, h in hand.items() if k[1] == "vllm/v1/worker/gpu_model_runner.py"]
    assert len(missing) == 2 and all("missing" in h["reason"] for h in missing)
    assert hand[(fit, "vllm/v1/worker/utils.py", "@@ -31,11 +32,17 @@")]["outcome"] == "failed"
    assert report["port"]["staged"] is None and not report["agreement"]["run"]
    assert not (tmp_path / "series").exists()


def test_main_s_0_34_0_series_applies_clean_on_0_34_0(tmp_path):
    _wheel("0.34.0")
    code, report, err = _port("--to", "0.34.0", "--out", tmp_path, "--matrix", "recipes")
    assert report["series"] == "vllm-0.34.0" and report["port"]["applies"], err
    assert all(h["outcome"] == "clean" for h in report["port"]["hunks"])
    staged = Path(report["port"]["staged"])
    for name in read_series(SERIES / "vllm-0.34.0"):
        assert (staged / name).read_bytes() == (SERIES / "vllm-0.34.0" / name).read_bytes()
    if "0.34.0" in RELEASES:  # the gate's entry: then it must agree with 0.34.0's own planning
        assert code == PortExit.APPLIES_CLEAN, "\n".join(json.dumps(s) for s in report["agreement"]["scenarios"])
    else:
        assert code == PortExit.NOT_MODELLED and "0.34.0 is not modelled" in report["not_modelled"]
        assert not report["agreement"]["run"]
    assert json.loads((tmp_path / "report.json").read_text()) == report


@pytest.fixture(scope="module")
def gb300_033(tmp_path_factory):
    """The 0.33.0 series ported onto 0.33.0 (a modelled release), the GB300 recipe as written, planned."""
    _wheel("0.33.0")
    out = tmp_path_factory.mktemp("port-033")
    return _port("--to", "0.33.0", "--from", "vllm-0.33.0", "--matrix", "recipes", "--recipe", GB300, "--out", out)


@pytest.mark.oracle
def test_a_modelled_release_the_series_fits_applies_clean_and_the_gate_agrees(gb300_033):
    code, report, err = gb300_033
    assert code == PortExit.APPLIES_CLEAN, err[-3000:]
    scenarios = {s["behaviour"]: s for s in report["agreement"]["scenarios"]}
    assert set(scenarios) == {"stock", "overlay"}
    assert all(s["agrees"] and not s["differences"] and s["oracle_error"] is None for s in scenarios.values())
    # the loss upstream: stock vLLM's own plan fails the gate; with the series it passes
    assert scenarios["stock"]["vllm_gate_passes"] is False and scenarios["overlay"]["vllm_gate_passes"] is True


@pytest.mark.oracle
def test_a_series_without_the_fit_makes_the_gate_disagree_on_the_drafter(tmp_path):
    """Only 0002 (the engine core's patch): it applies, but the patched tree plans the drafter as stock
    vLLM does while the simulator models the fit: the report names the scenario and the figures."""
    series = tmp_path / "vllm-0.33.0"
    series.mkdir()
    core = "0002-engine-core-draft-groups-keep-global-block-size.patch"
    shutil.copy(SERIES / "vllm-0.33.0" / core, series / core)
    (series / "series").write_text(core + "\n")
    code, report, err = _port(
        "--to", "0.33.0", "--from", series, "--matrix", "recipes", "--recipe", GB300, "--out", tmp_path / "out"
    )
    assert code == PortExit.GATE_DISAGREES == report["exit_code"], err[-3000:]
    stock, overlay = sorted(report["agreement"]["scenarios"], key=lambda s: s["behaviour"] != "stock")
    assert stock["agrees"] and not overlay["agrees"]
    assert overlay["name"] == "glm53-flash-dflash2-gb300: as written"
    assert any(d.startswith("with_drafter.layer[drafter.") and ".block_size:" in d for d in overlay["differences"])


def test_bad_input_is_one_line_and_a_documented_code(tmp_path):
    code, report, err = _port("--to", "0.33.0", "--from", tmp_path / "nope")
    assert code == PortExit.BAD_INPUT and report is None
    assert err.strip().splitlines()[-1] == f"port: error: {tmp_path / 'nope'}: no such series " + (
        f"(a series directory, or a name under {SERIES})"
    )
    assert _port("--to", "0.33.0", "--replace")[0] == PortExit.USAGE
    assert _port("--bogus")[0] == PortExit.USAGE


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64))
def test_an_unreadable_wheel_is_refused_in_one_line(tmp_path, monkeypatch, capsys, data):
    """Whatever bytes stand where the release's wheel should be: exit 3, one line naming the wheel."""
    from tools.port_release import main

    cache = tmp_path / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    (cache / "wheels").mkdir(parents=True)
    wheel = cache / "wheels" / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(data)
    monkeypatch.setenv("OVERLAY_CACHE", str(cache))
    assert main(["--to", "9.9.9", "--json"]) == PortExit.BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    errors = [line for line in err.splitlines() if line.startswith("port: error:")]
    assert len(errors) == 1 and str(wheel) in errors[0]
