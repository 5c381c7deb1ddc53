"""The in-image gate's command line (``python3 -m geometry.gate_main`` and the published script
name): stdlib only, its exit codes, the patched modules' import check, the oracle record's
options, and a failed verdict allowed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import geometry_cases as C  # noqa: E402
from support.repo import REPO

from geometry.image_contract import GateReport  # noqa: E402
from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.vllm_versions import DEFAULT_VERSION

GATE_MODULE = "geometry.gate_main"
COMPAT_SCRIPT = "sim_glm5_drafter_hades.py"  # the gate's name in the published images


def _inputs(data: dict) -> GeometryInputs:
    return GeometryInputs.from_json(data)


def test_simulator_is_stdlib_only():
    """Every module of geometry/ outside oracle/ and preflight/ (the simulator, its architecture
    entries, the gate) and the oracle's modules the gate loads first import the standard library and geometry
    only, and the overlay manifest and JSON shape readers the gate reads (stdlib only too). The one exception is
    the cross-check's call of vLLM's planner, imported inside the function that plans with it."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    geometry = REPO / "geometry"
    # The oracle's modules the gate and the pre-flight import before any vLLM: its record, cross-check,
    # the installed overlay's manifest, the import closure the record's key hashes and the refusal reasons.
    stdlib_oracle_modules = ("record", "refusals", "cross_check", "installed", "import_closure", "import_settings")
    stdlib_oracle = tuple(geometry / "oracle" / f"{name}.py" for name in stdlib_oracle_modules)
    files = [
        p
        for p in sorted(geometry.rglob("*.py"))
        if p.relative_to(geometry).parts[0] not in ("oracle", "preflight") or p in stdlib_oracle
    ]
    assert geometry / "model" / "architectures" / "qwen3_next.py" in files and geometry / "kv" / "kv_spec.py" in files
    for path in (*files, REPO / "overlay" / "manifest.py", REPO / "overlay" / "json_shape.py"):
        tree = ast.parse(path.read_text())
        planner_call = (
            {id(n) for f in ast.walk(tree) if getattr(f, "name", None) == "compare_with_vllm" for n in ast.walk(f)}
            if path.name == "cross_check.py"
            else set()
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                # `from geometry.oracle import record` imports the module geometry.oracle.record
                submodules = [f"{node.module}.{a.name}" for a in node.names]
                is_module = [(REPO / Path(*m.split("."))).with_suffix(".py").is_file() for m in submodules]
                mods = submodules if all(is_module) else [node.module]
            else:
                continue
            for m in mods:
                top = m.split(".")[0]
                in_simulator = top == "geometry" and (
                    m.split(".")[1:2] not in (["oracle"], ["preflight"])
                    or m in tuple(f"geometry.oracle.{name}" for name in stdlib_oracle_modules)
                )
                planner = id(node) in planner_call and m == "geometry.oracle.plan"
                assert top in stdlib or in_simulator or planner or m in ("overlay.manifest", "overlay.json_shape"), (
                    path,
                    m,
                )


def _run_cli(tmp_path, data, *args):
    p = tmp_path / "gate-input.json"
    p.write_text(json.dumps(data))
    return subprocess.run(
        [sys.executable, "-m", GATE_MODULE, "--input", str(p), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _manifest(patches=(), files=()):
    """An overlay manifest of the shape overlay/apply.py writes (overlay.manifest.OverlayManifest)."""
    return {
        "schema": "glm53-overlay-manifest/1",
        "package": "vllm",
        "version": DEFAULT_VERSION,
        "package_dir": "/usr/lib/python3/site-packages/vllm",
        "series": "/opt/glm53-overlay/overlay/series/x",
        "series_sha256": "0" * 64,
        "patches": list(patches),
        "files": list(files),
        "bytecode": [],
        "stale_bytecode": {"kept": [], "removed": []},
        "python": "3.12.3",
    }


def test_cli_exit_codes(tmp_path):
    manifest = tmp_path / "manifest.json"
    stock = _run_cli(tmp_path, C.recipe_input("overlay"), "--overlay-manifest", str(manifest))
    assert stock.returncode == 1, stock.stderr
    assert "no overlay manifest" in stock.stdout and "VERDICT (stock): FAIL" in stock.stdout
    manifest.write_text(
        json.dumps(
            _manifest(patches=[{"name": "0001-worker-fit-draft-block-size-to-target-page.patch", "sha256": "x"}])
        )
    )
    out = tmp_path / "report.json"
    ok = _run_cli(
        tmp_path, C.recipe_input("stock"), "--overlay-manifest", str(manifest), "--json", "--report-out", str(out)
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["verdict"]["passed"] and json.loads(out.read_text())["verdict"]["passed"]
    # Its one reader (geometry/image_contract.py) takes what it writes, field for field.
    written = json.loads(out.read_text())
    read = GateReport.from_json(written)
    assert read.verdict_word == "pass" and read.oracle is None and "applied" in read.behaviour_source
    assert json.loads(json.dumps(read.to_json())) == written
    forced = _run_cli(tmp_path, C.recipe_input("overlay"), "--behaviour", "stock")
    assert forced.returncode == 1
    bad = _run_cli(tmp_path, {"target_config": {}}, "--behaviour", "stock")
    assert bad.returncode == 2 and "bad input" in bad.stderr


def test_cli_import_check_names_the_module_or_the_manifest_at_fault(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps(
            _manifest(
                files=[
                    {
                        "file": "glm53_no_such_package/kv_cache_utils.py",
                        "sha256_before": "a",
                        "sha256_after": "b",
                        "patches": [],
                    }
                ]
            )
        )
    )
    failed = _run_cli(tmp_path, C.recipe_input("overlay"), "--overlay-manifest", str(manifest), "--import-patched")
    assert failed.returncode == 31, failed.stderr
    assert (
        "smoke import of patched module glm53_no_such_package.kv_cache_utils failed: ModuleNotFoundError"
        in failed.stderr
    )
    manifest.write_text(json.dumps(_manifest(files=[{"path": "vllm/config.py"}])))
    broken = _run_cli(tmp_path, C.recipe_input("overlay"), "--overlay-manifest", str(manifest), "--import-patched")
    assert broken.returncode == 2, broken.stderr
    assert f"geometry gate: bad input: overlay manifest {manifest}: files[0]: unknown key 'path'" in broken.stderr
    manifest.write_text(json.dumps({**_manifest(), "applied": True}))  # a field the applier never writes
    guessed = _run_cli(tmp_path, C.recipe_input("overlay"), "--overlay-manifest", str(manifest))
    assert guessed.returncode == 2, guessed.stderr
    assert f"geometry gate: bad input: overlay manifest {manifest}: unknown key 'applied'" in guessed.stderr


def test_cli_oracle_record_needs_the_oracle(tmp_path):
    run = _run_cli(tmp_path, C.recipe_input("overlay"), "--oracle-record", "r.json")
    assert run.returncode == 2 and "--oracle-record needs --oracle" in run.stderr


def test_cli_runs_from_a_copied_directory(tmp_path):
    """Inside the image geometry/ is copied as a whole under the payload root, next to the patch
    step's overlay/ (the gate reads the overlay manifest with overlay/manifest.py): the gate runs as
    a module with that root on PYTHONPATH, and under its published script name with no path set."""
    payload = tmp_path / "opt" / "payload"
    for package in ("geometry", "overlay"):
        for f in (REPO / package).rglob("*.py"):
            copy = payload / f.relative_to(REPO)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(f.read_text())
    p = tmp_path / "in.json"
    p.write_text(json.dumps(C.recipe_input("overlay")))
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    as_module = subprocess.run(
        [sys.executable, "-m", GATE_MODULE, "--input", str(p), "--behaviour", "overlay"],
        cwd="/",
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(payload)},
    )
    assert as_module.returncode == 0, as_module.stderr + as_module.stdout
    as_script = subprocess.run(
        [sys.executable, str(payload / "geometry" / COMPAT_SCRIPT), "--input", str(p), "--behaviour", "overlay"],
        cwd="/",
        capture_output=True,
        text=True,
        env=clean,
    )
    assert as_script.returncode == 0, as_script.stderr + as_script.stdout
    assert as_script.stdout == as_module.stdout


def test_a_failed_verdict_allowed_exits_0_and_the_report_still_says_fail(tmp_path):
    # Stock 0.33.0 on the default recipe: the drafter's page is not the target's (exit 1).
    refused = _run_cli(tmp_path, C.recipe_input("stock"), "--behaviour", "stock", "--report-out", "refused.json")
    assert refused.returncode == 1, refused.stderr
    kept = _run_cli(
        tmp_path,
        C.recipe_input("stock"),
        "--behaviour",
        "stock",
        "--report-out",
        "kept.json",
        "--verdict-failure-allowed",
    )
    assert kept.returncode == 0, kept.stderr
    assert "verdict fail allowed" in kept.stderr.splitlines()[-1]
    assert json.loads((tmp_path / "kept.json").read_text())["verdict"]["passed"] is False
    assert (tmp_path / "kept.json").read_text() == (tmp_path / "refused.json").read_text()
    # Bad input is still bad input.
    bad = _run_cli(tmp_path, {"nonsense": 1}, "--verdict-failure-allowed")
    assert bad.returncode == 2


def test_the_gate_sets_the_vllm_import_settings_where_unset_before_anything_else(tmp_path, monkeypatch):
    """The gate process's environment gets IMPORT_SETTINGS first thing (even when its input is then
    refused), and a value the caller set stands."""
    from geometry import gate_main
    from geometry.oracle.import_settings import IMPORT_SETTINGS

    name, value = next(iter(IMPORT_SETTINGS.items()))
    monkeypatch.delenv(name, raising=False)
    assert gate_main.main(["--input", str(tmp_path / "missing.json")]) == gate_main.EXIT_BAD_INPUT
    assert os.environ[name] == value
    monkeypatch.setenv(name, "users-own")
    gate_main.main(["--input", str(tmp_path / "missing.json")])
    assert os.environ[name] == "users-own"
