"""The scheduled port workflow (.github/workflows/port.yml; the linters run on every workflow in
tests/unit/stackbuild/image/test_workflow.py): zizmor finds an injection planted in it, and it runs
`make port` against vLLM's newest release and nightly and keeps the report as an artifact."""

from __future__ import annotations

import yaml
from support.workflow_linters import WORKFLOWS, zizmor

WORKFLOW = WORKFLOWS / "port.yml"


def test_zizmor_finds_an_event_value_expanded_in_the_run_block(tmp_path):
    injected = tmp_path / ".github" / "workflows" / "port.yml"
    injected.parent.mkdir(parents=True)
    text = WORKFLOW.read_text()
    assert 'make port TO="$TO"' in text
    injected.write_text(text.replace('make port TO="$TO"', 'make port TO="${{ github.head_ref }}"'))
    audit = zizmor(injected)
    assert audit.returncode != 0 and "template-injection" in audit.stdout, audit.stdout + audit.stderr


def test_it_ports_to_the_newest_release_and_nightly_on_a_schedule_and_uploads_the_report():
    data = yaml.safe_load(WORKFLOW.read_text())
    assert data[True]["schedule"] and data["permissions"] == {"contents": "read"}
    job = data["jobs"]["port"]
    assert [m["to"] for m in job["strategy"]["matrix"]["include"]] == ["latest", "nightly"]
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and "out/port/*/report.json" in upload["with"]["path"]
