"""The scheduled port workflow (.github/workflows/port.yml): actionlint and zizmor (offline) accept it, and it
runs `make port` against vLLM's newest release and nightly and keeps the report as an artifact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from support.repo import REPO

WORKFLOW = REPO / ".github" / "workflows" / "port.yml"
BIN = Path(sys.executable).parent
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def _run(*command) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **OFFLINE},
    )


def test_actionlint_and_zizmor_accept_the_port_workflow():
    lint = _run("actionlint", "-no-color", str(WORKFLOW))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    audit = _run("zizmor", "--offline", "--no-progress", str(WORKFLOW))
    assert audit.returncode == 0 and "No findings to report" in audit.stdout, audit.stdout + audit.stderr


def test_zizmor_finds_an_event_value_expanded_in_the_run_block(tmp_path):
    injected = tmp_path / ".github" / "workflows" / "port.yml"
    injected.parent.mkdir(parents=True)
    text = WORKFLOW.read_text()
    assert 'make port TO="$TO"' in text
    injected.write_text(text.replace('make port TO="$TO"', 'make port TO="${{ github.head_ref }}"'))
    audit = _run("zizmor", "--offline", "--no-progress", str(injected))
    assert audit.returncode != 0 and "template-injection" in audit.stdout, audit.stdout + audit.stderr


def test_it_ports_to_the_newest_release_and_nightly_on_a_schedule_and_uploads_the_report():
    data = yaml.safe_load(WORKFLOW.read_text())
    assert data[True]["schedule"] and data["permissions"] == {"contents": "read"}
    job = data["jobs"]["port"]
    assert [m["to"] for m in job["strategy"]["matrix"]["include"]] == ["latest", "nightly"]
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and "out/port/*/report.json" in upload["with"]["path"]
