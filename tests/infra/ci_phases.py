#!/usr/bin/env python3
"""CI's phases, from one test run's own records: each base build, pytest's wall time, the slowest modules.

    ci_phases.py RUN_DIR [--out FILE] [--json]

RUN_DIR is what run-tests.sh keeps of its run (out/test-run/): when the run started and ended
(`started`, `ended`: epoch seconds), the set-up it ran while the bases build (`setup.started`,
`.ended`: make test's venv and caches), each base build's `bases/NAME.started`, `.ended`, `.rc` and
`.log`, pytest's `pytest.started`, `.ended`, `.rc`, `.workers`, its JUnit XML (`junit.xml`) and each
worker's timeline (`timeline/WORKER.jsonl`: one line per test, its start and end).
The phases are written as JSON (--out, and on stdout with --json) and printed as a few lines
otherwise. `make bench` puts the last run's phases beside its own figures.

A base build's steps are the lines of its log that say how long something took ("... in N s").
A module's seconds are the sum of its tests' setup, call and teardown (JUnit's time per test):
under pytest-xdist, what the module cost its worker. A worker's busy seconds are the sum of its
tests' spans, its idle tail how long before pytest's end its last test ended.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

SLOWEST_MODULES = 5
STEP_LINE = re.compile(r"^\[(?P<tool>[\w-]+)\] (?P<what>.*?) in (?P<seconds>\d+(?:\.\d+)?) s\b")


def base_steps(log: Path) -> list[dict]:
    if not log.exists():
        return []
    steps = []
    for line in log.read_text(errors="replace").splitlines():
        m = STEP_LINE.match(line)
        if m:
            steps.append({"step": f"{m['tool']}: {m['what']}", "seconds": float(m["seconds"])})
    return steps


def module_seconds(junit: Path) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    if not junit.exists():
        return {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = (case.get("classname") or "").split(".")
        # classname is the module path dotted, then the class when there is one
        path = "/".join(part for part in module if part and not part[0].isupper())
        totals[(path or "?") + ".py"] += float(case.get("time") or 0)
    return dict(totals)


def test_counts(junit: Path) -> dict[str, int]:
    if not junit.exists():
        return {}
    root = ElementTree.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key) or 0)
    return counts


def worker_spans(timeline: Path, pytest_ended) -> dict[str, dict]:
    """Each worker's busy seconds, test count and idle tail (seconds between its last test's end and pytest's)."""
    out = {}
    for path in sorted(timeline.glob("*.jsonl")) if timeline.is_dir() else []:
        spans = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not spans:
            continue
        last = max(spans, key=lambda span: span["end"])
        out[path.stem] = {
            "tests": len(spans),
            "busy_s": round(sum(span["end"] - span["start"] for span in spans), 1),
            "idle_tail_s": None if pytest_ended is None else round(pytest_ended - last["end"], 1),
            "last_test": last["test"],
        }
    return out


def _read(path: Path):
    """A number a run file holds, else None (the phase did not get that far)."""
    try:
        return float(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _span(prefix: Path) -> tuple:
    started, ended = _read(prefix.with_name(prefix.name + ".started")), _read(prefix.with_name(prefix.name + ".ended"))
    rc = _read(prefix.with_name(prefix.name + ".rc"))
    return started, ended, None if rc is None else int(rc)


def phases(run_dir: Path) -> dict:
    start, end = _read(run_dir / "started"), _read(run_dir / "ended")
    bases = {}
    for marker in sorted((run_dir / "bases").glob("*.started"), key=lambda p: _read(p) or 0):
        name = marker.name.removesuffix(".started")
        started, ended, rc = _span(run_dir / "bases" / name)
        bases[name] = {
            "seconds": round(ended - started, 1) if ended else None,
            "ready_after_s": round(ended - start, 1) if ended else None,
            "exit": rc,
            "steps": base_steps(run_dir / "bases" / f"{name}.log"),
        }
    junit = run_dir / "junit.xml"
    modules = sorted(module_seconds(junit).items(), key=lambda item: -item[1])
    started, ended, rc = _span(run_dir / "pytest")
    workers = _read(run_dir / "pytest.workers")
    setup_started, setup_ended, _ = _span(run_dir / "setup")
    return {
        "run_seconds": round(end - start, 1) if end else None,
        "setup_s": round(setup_ended - setup_started, 1) if setup_started and setup_ended else None,
        "bases": bases,
        "pytest": {
            "wall_s": round(ended - started, 1) if ended else None,
            "exit": rc,
            "workers": None if workers is None else int(workers),
            **test_counts(junit),
        },
        "workers": worker_spans(run_dir / "timeline", ended),
        "slowest_modules": [{"module": name, "seconds": round(secs, 1)} for name, secs in modules[:SLOWEST_MODULES]],
    }


def lines(result: dict) -> list[str]:
    out = []
    if result.get("setup_s") is not None:
        out.append(f"set-up while the bases build: {result['setup_s']:.0f} s")
    for name, base in result["bases"].items():
        took = "did not end" if base["seconds"] is None else f"{base['seconds']:.0f} s"
        ready = "" if base["ready_after_s"] is None else f", ready {base['ready_after_s']:.0f} s into the run"
        out.append(f"base {name}: {took}{ready} (exit {base['exit']})")
        out += [f"  {step['step']}: {step['seconds']:.0f} s" for step in base["steps"]]
    test_run = result["pytest"]
    if test_run["wall_s"] is not None:
        out.append(
            f"pytest: {test_run['wall_s']:.0f} s on {test_run['workers']} workers, {test_run.get('tests', 0)} tests"
        )
    for name, worker in result.get("workers", {}).items():
        tail = "" if worker["idle_tail_s"] is None else f", idle for the last {worker['idle_tail_s']:.0f} s"
        out.append(
            f"  worker {name}: {worker['tests']} tests, busy {worker['busy_s']:.0f} s{tail} ({worker['last_test']})"
        )
    out += [f"  {m['module']}: {m['seconds']:.0f} s" for m in result["slowest_modules"]]
    if result["run_seconds"] is not None:
        out.append(f"run: {result['run_seconds']:.0f} s")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", action="store_true", help="the phases as JSON on stdout")
    args = parser.parse_args()
    if _read(args.run_dir / "started") is None:
        print(f"ci_phases.py: {args.run_dir}: no test run recorded there (make test writes it)", file=sys.stderr)
        return 2
    result = phases(args.run_dir)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(f"[ci-phases] {line}" for line in lines(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
