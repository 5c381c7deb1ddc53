"""Oracle records: vLLM's answer kept, and the gate held to it without importing vLLM.

The gate runs as the image runs it (a script, in a subprocess) with the oracle
venv's pristine vLLM 0.33.0, on the default recipe's gate input in stock mode
(where simulator and vLLM must agree). ``python -X importtime`` shows whether
vLLM was imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from infra.fixtures import in_ci
from support.repo import REPO

GATE = REPO / "geometry" / "sim_glm5_drafter_hades.py"

try:
    import torch  # noqa: F401
    import vllm.v1.core.kv_cache_planning  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM's own planning code is not importable ({exc}): run `make oracle`", allow_module_level=True)

from geometry import gate_main  # noqa: E402
from geometry.oracle import record  # noqa: E402
from stackbuild.core.gate import gate_input  # noqa: E402
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe  # noqa: E402

pytestmark = pytest.mark.oracle


def run_gate(workdir: Path, record_name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            str(GATE),
            "--input",
            "gate-input.json",
            "--behaviour",
            "stock",
            "--oracle",
            "--oracle-record",
            record_name,
            "--report-out",
            f"report-{record_name}",
            *extra,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
    )


def imported_vllm(run: subprocess.CompletedProcess) -> bool:
    return any(
        line.startswith("import time:") and line.rstrip().endswith((" vllm", " torch"))
        for line in run.stderr.splitlines()
    )


def report(workdir: Path, record_name: str) -> dict:
    return json.loads((workdir / f"report-{record_name}").read_text())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A work directory whose ``first.json`` a real oracle run wrote, and that run."""
    workdir = tmp_path_factory.mktemp("record")
    raw = gate_input(load_recipe(DEFAULT_RECIPE)).to_json()
    (workdir / "gate-input.json").write_text(json.dumps(raw))
    run = run_gate(workdir, "first.json")
    # stock vLLM 0.33.0 fails the default recipe (tests/default_recipe_figures.py): exit 1, FAIL
    assert run.returncode == 1, run.stderr[-3000:]
    assert report(workdir, "first.json")["verdict"]["passed"] is False
    assert imported_vllm(run)
    assert report(workdir, "first.json")["oracle"] == {"agrees": True, "differences": [], "source": "imported vLLM"}
    return workdir, run, raw


def test_a_matching_record_stands_in_for_importing_vllm(recorded):
    workdir, first, _ = recorded
    (workdir / "again.json").write_bytes((workdir / "first.json").read_bytes())
    run = run_gate(workdir, "again.json")
    assert run.returncode == first.returncode
    assert not imported_vllm(run), "the gate imported vLLM although the record matched"
    assert "vLLM not imported" in run.stderr
    again, before = report(workdir, "again.json"), report(workdir, "first.json")
    assert again.pop("oracle") == {"agrees": True, "differences": [], "source": "record"}
    before.pop("oracle")
    assert again == before
    assert (workdir / "again.json").read_bytes() == (workdir / "first.json").read_bytes()  # left as it was


def test_the_simulator_is_held_to_the_recorded_numbers(recorded):
    workdir, _, _ = recorded
    edited = json.loads((workdir / "first.json").read_text())
    edited["vllm"]["with_drafter"]["num_blocks"] += 1
    (workdir / "edited.json").write_text(json.dumps(edited))
    run = run_gate(workdir, "edited.json")
    assert run.returncode == 17, run.stdout[-2000:]
    assert not imported_vllm(run)
    assert report(workdir, "edited.json")["oracle"]["differences"] == [
        f"with_drafter.num_blocks: simulator={edited['vllm']['with_drafter']['num_blocks'] - 1} "
        f"vllm={edited['vllm']['with_drafter']['num_blocks']}"
    ]
    assert "ORACLE DISAGREEMENT (simulator vs vLLM's recorded answer)" in run.stdout


def test_a_stale_record_makes_the_gate_import_vllm_and_record_again(recorded):
    workdir, _, _ = recorded
    stale = json.loads((workdir / "first.json").read_text())
    stale["key"]["distributions"]["torch"] = "0.0.1"
    (workdir / "stale.json").write_text(json.dumps(stale))
    run = run_gate(workdir, "stale.json")
    assert "distribution torch differs (recorded 0.0.1, here" in run.stderr
    assert imported_vllm(run)
    assert report(workdir, "stale.json")["oracle"]["source"] == "imported vLLM"
    assert (workdir / "stale.json").read_bytes() == (workdir / "first.json").read_bytes()


def test_read_only_uses_a_matching_record_and_writes_none_when_it_is_stale_or_missing(recorded):
    """verify's re-run: the record the build left stands in for vLLM; a stale or missing one makes the gate
    import vLLM, and nothing is written in either case."""
    workdir, first, _ = recorded
    (workdir / "kept.json").write_bytes((workdir / "first.json").read_bytes())
    matching = run_gate(workdir, "kept.json", "--oracle-record-read-only")
    assert matching.returncode == first.returncode and not imported_vllm(matching)
    assert report(workdir, "kept.json")["oracle"]["source"] == "record"
    stale = json.loads((workdir / "first.json").read_text())
    stale["key"]["vllm_tree"] = "0" * 64
    (workdir / "stale-ro.json").write_text(json.dumps(stale))
    before = (workdir / "stale-ro.json").read_bytes()
    run = run_gate(workdir, "stale-ro.json", "--oracle-record-read-only")
    assert run.returncode == first.returncode and imported_vllm(run)
    assert "the vLLM tree differs" in run.stderr
    assert report(workdir, "stale-ro.json")["oracle"]["source"] == "imported vLLM"
    assert (workdir / "stale-ro.json").read_bytes() == before  # not written over
    missing = run_gate(workdir, "missing.json", "--oracle-record-read-only")
    assert missing.returncode == first.returncode and imported_vllm(missing)
    assert not (workdir / "missing.json").exists()


def test_read_only_without_a_record_is_a_usage_error(recorded):
    workdir, _, _ = recorded
    run = subprocess.run(
        [sys.executable, str(GATE), "--input", "gate-input.json", "--oracle", "--oracle-record-read-only"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2
    assert "--oracle-record-read-only needs --oracle-record" in run.stderr.splitlines()[-1]


def test_an_unreadable_record_is_bad_input_naming_the_file(recorded):
    workdir, _, _ = recorded
    (workdir / "broken.json").write_text('{"schema": "glm53-oracle-record/1"')
    run = run_gate(workdir, "broken.json")
    assert run.returncode == 2
    assert "geometry gate: bad input: oracle record broken.json: not JSON" in run.stderr
    assert not imported_vllm(run)


@pytest.mark.parametrize(
    "part, edit, why",
    [
        ("inputs", lambda raw: raw.update(num_speculative_tokens=raw["num_speculative_tokens"] + 1), "inputs differs"),
        ("vllm_tree", None, "the vLLM tree differs"),
        ("python", None, "python differs"),
        ("geometry_code", None, "geometry_code differs"),
    ],
)
def test_every_part_of_the_key_is_checked(recorded, part, edit, why):
    workdir, _, raw = recorded
    kept = json.loads((workdir / "first.json").read_text())
    assert record.stale_because(kept, raw, str(REPO)) is None
    raw = dict(raw)
    if edit:
        edit(raw)
    else:
        kept["key"][part] = "0" * 64 if part != "python" else "2.7"
    assert why in record.stale_because(kept, raw, str(REPO))


def test_vllm_behaviour_is_not_part_of_the_key(recorded):
    workdir, _, raw = recorded
    kept = json.loads((workdir / "first.json").read_text())
    assert record.stale_because(kept, dict(raw, vllm_behaviour="overlay"), str(REPO)) is None


def test_a_record_made_without_the_patched_imports_does_not_skip_them(recorded):
    workdir, _, raw = recorded
    path = str(workdir / "first.json")
    kept, note = gate_main._oracle_from_record(path, raw, str(REPO), None)
    assert kept is not None
    kept, note = gate_main._oracle_from_record(path, raw, str(REPO), ["vllm.v1.core.kv_cache_utils"])
    assert kept is None and "made without importing the patched modules vllm.v1.core.kv_cache_utils" in note


def test_the_code_digest_sees_what_the_gate_imports_and_nothing_else(tmp_path):
    """Paths and bytes of the modules the gate imports (at any depth, its packages' __init__.py
    included); a module nothing imports, notes and bytecode change nothing."""
    root = tmp_path / "payload"
    (root / "geometry" / "oracle" / "__pycache__").mkdir(parents=True)
    (root / "geometry" / "__init__.py").write_text("")
    (root / "geometry" / "gate_main.py").write_text("def main():\n    from geometry.oracle import plan\n")
    (root / "geometry" / "oracle" / "__init__.py").write_text("")
    (root / "geometry" / "oracle" / "plan.py").write_text("B = 1\n")
    (root / "geometry" / "oracle" / "__pycache__" / "plan.cpython-311.pyc").write_bytes(b"a")
    (root / "geometry" / "README.md").write_text("notes\n")
    first = record.code_digest(str(root))
    (root / "geometry" / "oracle" / "__pycache__" / "plan.cpython-311.pyc").write_bytes(b"bytecode of another build")
    (root / "geometry" / "README.md").write_text("other notes\n")
    (root / "geometry" / "oracle" / "engine_core.py").write_text("only the tests import this\n")
    assert record.code_digest(str(root)) == first
    (root / "geometry" / "oracle" / "plan.py").write_text("B = 2\n")
    assert record.code_digest(str(root)) != first
    (root / "geometry" / "oracle" / "plan.py").write_text("B = 1\n")
    assert record.code_digest(str(root)) == first
    (root / "geometry" / "oracle" / "__init__.py").write_text("A = 1\n")
    assert record.code_digest(str(root)) != first


def test_the_tree_digest_sees_sources_and_sizes_not_bytecode(tmp_path):
    tree = tmp_path / "vllm"
    (tree / "v1" / "__pycache__").mkdir(parents=True)
    (tree / "v1" / "spec.py").write_text("PAGE = 1\n")
    (tree / "v1" / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"a")
    (tree / "_C.abi3.so").write_bytes(b"\0" * 8)
    first = record.tree_digest(str(tree))
    (tree / "v1" / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"bytecode of another build")
    assert record.tree_digest(str(tree)) == first
    (tree / "v1" / "spec.py").write_text("PAGE = 2\n")
    assert record.tree_digest(str(tree)) != first
    (tree / "v1" / "spec.py").write_text("PAGE = 1\n")
    (tree / "_C.abi3.so").write_bytes(b"\0" * 9)
    assert record.tree_digest(str(tree)) != first
    (tree / "_C.abi3.so").write_bytes(b"\0" * 8)
    assert record.tree_digest(str(tree)) == first
    (tree / "v1" / "spec.py").rename(tree / "v1" / "other.py")
    assert record.tree_digest(str(tree)) != first
