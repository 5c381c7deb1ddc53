"""The gate's agreement with a release's own planning, scenario by scenario (maintainer side).

``agreement(tree, scenarios)`` runs this module in a fresh interpreter whose ``PYTHONPATH`` starts
with ``tree`` (a vLLM package directory and its dist-info: that vLLM is imported, not the venv's),
then the checkout. The child reads the scenarios as JSON on stdin and, for each, plans it with the
simulator (``geometry.plan.simulate``) and with vLLM's own code (``geometry.oracle.plan.plan_with_vllm``),
compares them (``compare_reports``, and the drafter's backend as vLLM's selector chose it) and prints
one ``PORT_RESULT <json>`` line; vLLM's log goes wherever vLLM sends it, the parent reads only those
lines. Whatever vLLM's planning raises on a scenario is that scenario's ``oracle_error``, with the
innermost frame of vLLM's code it came from. The child's stderr is kept in a log file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from tools.port_report import ScenarioResult

REPO = Path(__file__).resolve().parent.parent
PREFIX = "PORT_RESULT "


def _where(exc: BaseException) -> str:
    """``Type: message (file:line)``, the line the innermost frame in vLLM's package (else the last frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f"{os.sep}vllm{os.sep}" in f.filename] or frames
    text = " ".join(str(exc).split()) or (inside[-1].line if inside else "")
    if not inside:
        return f"{type(exc).__name__}: {text}"
    frame = inside[-1]
    path = frame.filename.split(f"{os.sep}vllm{os.sep}", 1)[-1]
    return f"{type(exc).__name__}: {text} (vllm/{path}:{frame.lineno})"


def plan_one(data: dict) -> dict:
    """One scenario, in the child: its differences, the oracle's exception, the gate on vLLM's plan."""
    from geometry.errors import BadInput
    from geometry.model.inputs import GeometryInputs
    from geometry.oracle.plan import compare_reports, plan_with_vllm
    from geometry.plan.simulate import simulate
    from geometry.verdict.gate import check

    inputs = GeometryInputs.from_json(data)
    try:
        sim = simulate(inputs)
    except BadInput as exc:
        return {"differences": [f"the simulator refuses: {exc}"]}
    try:
        vllm = plan_with_vllm(inputs)
    except Exception as exc:  # any failure of vLLM's code on this release is the finding
        return {"oracle_error": _where(exc)}
    diffs = list(compare_reports(sim, vllm))
    if not sim.with_drafter.error and not vllm.with_drafter.error and sim.drafter_backend != vllm.drafter_backend:
        diffs.append(f"drafter_backend: simulator={sim.drafter_backend!r} vllm={vllm.drafter_backend!r}")
    return {"differences": diffs, "vllm_gate_passes": check(vllm).passed}


def child() -> int:
    import vllm

    print(f"{PREFIX}{json.dumps({'vllm': vllm.__version__, 'file': vllm.__file__})}", flush=True)
    for item in json.load(sys.stdin):
        result = dict(name=item["name"], behaviour=item["behaviour"], **plan_one(item["inputs"]))
        print(f"{PREFIX}{json.dumps(result)}", flush=True)
    return 0


class Run:
    """One child planning ``scenarios`` (tools.port_matrix.Scenario) with the vLLM in ``tree``; its log in ``log``."""

    def __init__(self, tree: Path, scenarios: list, log: Path):
        self.tree, self.scenarios, self.log = tree, scenarios, log
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]))
        self._log = open(log, "w", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.port_agreement"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        payload = [{"name": s.name, "behaviour": s.behaviour, "inputs": s.inputs} for s in scenarios]
        self.proc.stdin.write(json.dumps(payload))
        self.proc.stdin.close()

    def results(self, progress):
        """ScenarioResults as the child reports them; a child that dies leaves the rest as oracle errors."""
        header = None
        got = []
        for line in self.proc.stdout:
            if not line.startswith(PREFIX):
                continue
            data = json.loads(line[len(PREFIX) :])
            if header is None:
                header = data
                progress(f"planning with vLLM {data['vllm']} from {Path(data['file']).parent}")
                continue
            result = ScenarioResult(
                data["name"],
                data["behaviour"],
                tuple(data.get("differences", ())),
                data.get("oracle_error"),
                data.get("vllm_gate_passes"),
            )
            got.append(result)
            state = "agrees" if result.agrees else ("oracle error" if result.oracle_error else "differs")
            progress(f"[{result.behaviour}] {len(got)}/{len(self.scenarios)} {result.name}: {state}")
        code = self.proc.wait()
        self._log.close()
        if len(got) < len(self.scenarios):
            tail = [line for line in self.log.read_text(encoding="utf-8").splitlines() if line.strip()][-1:]
            why = f"the planning process exited {code}: {tail[0].strip() if tail else 'no output'} (log: {self.log})"
            got += [ScenarioResult(s.name, s.behaviour, (), why) for s in self.scenarios[len(got) :]]
        return got


def agreement(trees: dict, scenarios: list, log_dir: Path, progress) -> list:
    """ScenarioResults of ``scenarios``, each planned with the tree of its behaviour (``trees``:
    behaviour -> tree); the behaviours' children run side by side."""
    runs = []
    for behaviour, tree in trees.items():
        mine = [s for s in scenarios if s.behaviour == behaviour]
        if mine:
            runs.append(Run(tree, mine, log_dir / f"agreement-{behaviour}.log"))
    out: dict = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(id(r), r.results(progress))) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = {(s.name, s.behaviour): i for i, s in enumerate(scenarios)}
    results = [x for r in runs for x in out[id(r)]]
    return sorted(results, key=lambda x: order[(x.name, x.behaviour)])


if __name__ == "__main__":
    sys.exit(child())
