"""One gate: the same bad deployment gets the same verdict, the same first reason and its documented
exit code from every caller of geometry.verdict.gate_run.run_gate.

Each case is one fault given to every caller: the recipe's callers (`build.py geometry`, `build
--dry-run`, `compose`, the in-image gate module on the gate-input.json the build writes) get it in
a copy of the default recipe; the start-time pre-flight (`build.py preflight` on the host, and the
image entrypoint's check function) gets the same values in the serve argv or the mounted configs.
Expected texts are worked out here from the default recipe's figures (README's table: one block
holds 9,216 tokens and costs 55,689,216 B; the target's attention page is 4,718,592 B), not read
from the code under test. The pre-flight parses its argv with vLLM's serve parser (marked
``oracle``: 20-60 s each); the geometry fails, so the planner's cross-check is not run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from bad_input_helpers import DIGEST, assert_refused, invoke
from models_support import misfit_drafter, models_dir
from recipe_copies import copy_recipe, pinned, set_key
from support import warm_preflight
from support.repo import REPO

GIB = 1024**3
GATE_FAILED = 5  # README: the geometry gate refuses (host CLI, build, pre-flight)
MISMATCH = 1  # geometry/gate_main.py: the geometry does not fit
# docs/cli.md: the dry run's error line, after the gate's, says the build would stop at its gate step
DRY_RUN_TAIL = "; the build would stop at its gate step with this, exit 5 (dry run: nothing built)"
# `compose` / `build --dry-run` say how many more reasons `build.py geometry` shows, `geometry` that its
# verdict (or its JSON report) has just listed them; the pre-flight lists them below.
MORE = re.compile(
    r" \(and \d+ more(; `build.py geometry` shows all|; the verdict above lists all|; the report's reasons list all"
    r"| below)\)$"
)


@dataclass(frozen=True)
class Case:
    name: str
    recipe_edit: object  # the fault in the recipe
    serve_args: tuple[str, ...]  # the same fault in the serve argv (after the recipe's command)
    drafter: dict | None  # the same fault in the mounted drafter config (None: the snapshot)
    reason: str  # the gate's first reason


def _misfit_recipe(data: dict, recipe_dir: Path) -> None:
    drafter = recipe_dir / "configs" / "drafter.config.json"
    drafter.write_text(json.dumps(misfit_drafter(), indent=2))
    data["drafter"]["config_sha256"] = hashlib.sha256(drafter.read_bytes()).hexdigest()


_MEMORY = 1_000_000_000  # 17 blocks of 55,689,216 B (18 would take 1,002,405,888 B)
CASES = [
    Case(
        "max-model-len-above-max-positions",
        set_key("serving.max_model_len", 2_097_152),
        ("--max-model-len", "2097152"),
        None,
        "max_model_len 2,097,152 is above the target's max_position_embeddings 1,048,576",
    ),
    # 1e9 B is 1953125 / 2**21 GiB exactly: the recipe's GiB and the flag's bytes are the same number.
    Case(
        "kv-budget-below-one-request",
        set_key("geometry.kv_cache_memory_gib", _MEMORY / GIB),
        ("--kv-cache-memory-bytes", str(_MEMORY)),
        None,
        # ceil(1,048,576 / 9,216) = 114 blocks; 17 x 9,216 = 156,672 tokens
        "one request of max_model_len 1,048,576 tokens needs at least 114 blocks of 9,216 tokens, but the KV "
        "cache (1,000,000,000 B at 55,689,216 B per block) holds 17 blocks (156,672 tokens)",
    ),
    # 4 KV heads x 80 x 2 (K, V) x 2 B = 1,280 B/token; at the target's block 9,216: 11,796,480 B
    Case(
        "misfit-drafter",
        "misfit",
        (),
        misfit_drafter(),
        "drafter layer drafter.model.layers.0.self_attn.attn (SlidingWindowSpec, 4 KV heads x head 80, bfloat16: "
        "1280 B/token) at block 9216 has a real page of 11,796,480 B, but the target attention page P is "
        "4,718,592 B; no drafter block fits exactly (4,718,592 is not a multiple of 1280) "
        # the drafter's five layers alike: one reason, with their count
        "[5x: also drafter.model.layers.1.self_attn.attn to drafter.model.layers.4.self_attn.attn]",
    ),
]
IDS = [c.name for c in CASES]


def bad_recipe(tmp_path: Path, case: Case) -> Path:
    recipe_dir = tmp_path / "recipe"

    def edit(data):
        pinned(data)
        if case.recipe_edit == "misfit":
            _misfit_recipe(data, recipe_dir)
        else:
            case.recipe_edit(data)

    return copy_recipe(tmp_path, edit)


def _first_reason(summary: str) -> str:
    return MORE.sub("", summary)


def _host_error(recipe: Path, line: str) -> str:
    prefix = f"error: {recipe}: geometry gate failed: "
    assert line.startswith(prefix), line
    return _first_reason(line[len(prefix) :])


def _preflight_verdict(line: str) -> tuple[str, str]:
    """(verdict, first reason) of ``pre-flight: FAIL: re-checked (WHAT CHANGED): REASON``; else (the line, "")."""
    match = re.match(r"pre-flight: FAIL: re-checked \((.*?)\): (.*)$", line)
    return ("fail", _first_reason(match.group(2))) if match else (line, "")


# --- the recipe's callers: no vLLM -------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_recipes_callers_give_one_verdict(tmp_path, case):
    recipe = bad_recipe(tmp_path, case)
    verdicts = {}

    geometry = invoke(["geometry", "--recipe", recipe])
    line = assert_refused(geometry, GATE_FAILED)
    verdicts["geometry"] = ("fail", _host_error(recipe, line), geometry.exit_code)
    assert "VERDICT (overlay): FAIL" in geometry.stdout and f"  - {case.reason}\n" in geometry.stdout

    out = tmp_path / "out.compose.yaml"
    compose = invoke(["compose", "--recipe", recipe, "-o", out, "--digest", DIGEST])
    verdicts["compose"] = ("fail", _host_error(recipe, assert_refused(compose, GATE_FAILED)), compose.exit_code)
    assert not out.exists()

    # The dry run shows the plan, then exits as the build would: its gate step fails (docs/cli.md).
    dry = invoke(["build", "--dry-run", "--owner", "acme", "--recipe", recipe])
    line = assert_refused(dry, GATE_FAILED)
    assert line.endswith(DRY_RUN_TAIL), line
    shown = next(line for line in dry.stdout.splitlines() if line.startswith("# geometry  "))
    word, summary = shown[len("# geometry  ") :].split(": ", 1)
    assert line.removesuffix(DRY_RUN_TAIL) == f"error: {recipe}: geometry gate failed: {summary}"
    verdicts["build --dry-run"] = (word, _host_error(recipe, line.removesuffix(DRY_RUN_TAIL)), dry.exit_code)
    dry_json = invoke(["build", "--dry-run", "--json", "--owner", "acme", "--recipe", recipe])
    assert dry_json.exit_code == GATE_FAILED, dry_json.stderr
    shown_json = json.loads(dry_json.stdout)
    assert (shown_json["geometry_verdict"], shown_json["exit_code"]) == ("fail", GATE_FAILED)

    # The in-image gate, as the build's gate step runs it: the build context's gate payload, its gate-input.json.
    from stackbuild.core.recipe import load_recipe
    from stackbuild.image.plan import make_plan
    from stackbuild.image.render import write_context

    plan = make_plan(load_recipe(recipe))
    context = write_context(plan, tmp_path / "context")
    payload = context / "gate-payload" / plan.payload_dir.lstrip("/")
    gate = subprocess.run(
        [sys.executable, "-m", "geometry.gate_main", "--input", "gate-input.json", "--behaviour", "input"],
        cwd=payload,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(payload)},
    )
    lines = gate.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("VERDICT (overlay): "))
    verdicts["gate_main"] = (
        lines[at].removeprefix("VERDICT (overlay): ").lower(),
        lines[at + 1].removeprefix("  - "),
        gate.returncode,
    )
    # The build's error line is the step's reason line (stackbuild/image/platform_build.py reads it).
    from geometry.image_contract import gate_reason

    reason = gate_reason(gate.stderr.splitlines())
    assert reason is not None and reason.split(" (and ")[0] == case.reason, gate.stderr

    assert verdicts == {
        "geometry": ("fail", case.reason, GATE_FAILED),
        "compose": ("fail", case.reason, GATE_FAILED),
        "build --dry-run": ("fail", case.reason, GATE_FAILED),
        "gate_main": ("fail", case.reason, MISMATCH),
    }, gate.stderr


# --- the start-time pre-flight: vLLM's serve parser --------------------------------------------

# The image entrypoint's check function on the default recipe's record, every case in one interpreter.
_ENTRYPOINT = """import json, sys
from geometry.preflight.run import preflight
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe
r = load_recipe(DEFAULT_RECIPE)
checked = checked_serve(r, gate_input(r))
out = []
for models, extra in json.loads(sys.argv[1]):
    o = preflight([*checked.argv, *extra], checked=checked, checked_path="-", overlay_manifest=None,
                  locate=lambda p, models=models: p.replace("/models", models, 1))
    out.append([o.code, list(o.lines)])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def case_models(tmp_path_factory):
    return {c.name: models_dir(tmp_path_factory.mktemp(c.name) / "models", drafter=c.drafter) for c in CASES}


@pytest.fixture(scope="module")
def entrypoint_outcomes(case_models):
    cases = [[str(case_models[c.name]), list(c.serve_args)] for c in CASES]
    run = warm_preflight.run(["-c", _ENTRYPOINT, json.dumps(cases)], cwd=REPO, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(zip(IDS, json.loads(run.stdout.strip().splitlines()[-1])))


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_preflight_gives_the_recipes_verdict(tmp_path, case, case_models, entrypoint_outcomes):
    from stackbuild.core.recipe import DEFAULT_RECIPE

    host = warm_preflight.build_py_preflight(
        "--recipe",
        str(DEFAULT_RECIPE),
        "--models-dir",
        str(case_models[case.name]),
        "--",
        *case.serve_args,
    )
    errors = [line for line in host.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) <= 1, host.stderr
    shown = errors[0].removeprefix("error: ") if errors else host.stdout.splitlines()[0]
    code, lines = entrypoint_outcomes[case.name]
    verdicts = {
        "build.py preflight": (*_preflight_verdict(shown), host.returncode),
        "entrypoint": (*_preflight_verdict(lines[0]), code),
    }
    assert verdicts == {name: ("fail", case.reason, GATE_FAILED) for name in verdicts}, host.stdout + host.stderr

    # And the recipe's own gate says the same for the same values (no vLLM).
    recipe = bad_recipe(tmp_path, case)
    assert _host_error(recipe, assert_refused(invoke(["geometry", "--recipe", recipe]), GATE_FAILED)) == case.reason
