"""The build report: what was built, from what, where it went, how long each phase took.

Written as JSON where ``--report`` says (default ``out/build-report.json``);
the serve side reads it back with :mod:`stackbuild.core.build_report`. It holds no
credentials: the driver never sees any.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional

from geometry.image_contract import GateReport

from stackbuild.core.atomic import replace_text
from stackbuild.image.plan import BuildPlan
from stackbuild.core.build_report import DEFAULT_REPORT, REPORT_SCHEMA



def oracle_source(report: Optional[Mapping[str, Any]]) -> Optional[str]:
    """What the gate checked the simulator against: ``record``, ``imported vLLM``; None without a report or oracle."""
    if not report:
        return None
    oracle = GateReport.from_json(report).oracle
    return oracle.source if oracle is not None else None


def geometry_verdict(report: Mapping[str, Any]) -> str:
    """``pass`` / ``fail`` from the gate's report; ContractError if it is not the gate's shape."""
    return GateReport.from_json(report).verdict_word


def build_report(
    plan: BuildPlan,
    *,
    image_id: str,
    image_config: Mapping[str, Any],
    geometry_report: Optional[Mapping[str, Any]],
    phases: Mapping[str, float],
    pushed_digest: Optional[str] = None,
    engine: str = "",
    kept_record: Optional[Path] = None,
) -> dict:
    verdict = geometry_verdict(geometry_report) if geometry_report else None
    return {
        "schema": REPORT_SCHEMA,
        "status": "pushed" if pushed_digest else "built",
        "recipe": str(plan.recipe.path),
        "recipe_name": plan.recipe.name,
        "platform": plan.recipe.platform,
        "image": plan.image.repository,
        "registry": plan.image.registry,
        "tags": list(plan.image.tags),
        "references": list(plan.image.references),
        "image_id": image_id,
        "architecture": image_config.get("Architecture"),
        "os": image_config.get("Os"),
        "pushed_digest": pushed_digest,
        "pushed_reference": str(plan.image.reference(digest=pushed_digest)) if pushed_digest else None,
        "base": {
            "reference": str(plan.base.reference),
            "image": plan.base.image,
            "tag": plan.base.tag,
            "digest": plan.base.digest,
            "pinned_by": plan.base.source,
        },
        "vllm_version": plan.recipe.base.vllm_version,
        "patch_series": plan.recipe.overlay.series,
        "patch_series_sha256": plan.series_sha256,
        "geometry_verdict": verdict,
        "geometry_verdict_host": plan.geometry_verdict,
        "geometry_report": dict(geometry_report) if geometry_report is not None else None,
        "oracle_record": {
            "shipped": str(plan.oracle_record) if plan.oracle_record else None,
            "gate_checked_against": oracle_source(geometry_report),
            "kept": str(kept_record) if kept_record else None,
        },
        "labels": dict(plan.labels),
        "revision": plan.revision,
        "source_date_epoch": plan.source_date_epoch,
        "phase_seconds": dict(phases),
        "engine": engine,
        "finished_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_report(report: Mapping[str, Any], path: Optional[Path] = None) -> Path:
    path = Path(path) if path else DEFAULT_REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    return path
