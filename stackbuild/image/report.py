"""The build report: what was built, from what, on which engine, where it went, how long each phase took.

Written as JSON where ``--report`` says (default ``out/build-report.json``);
the serve side reads it back with :mod:`stackbuild.core.build_report`, which
holds the schema version and the engine section's type. It holds no
credentials: the driver never sees any.

``image_id`` is the engine's name for the image (see
:mod:`stackbuild.image.engine_api`); ``pushed_digest`` and ``config_digest``
are what the registry holds after the push, read back from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from geometry import contract
from stackbuild.core.atomic import replace_text
from stackbuild.core.build_report import DEFAULT_REPORT, REPORT_SCHEMA, BuildEngine
from stackbuild.core.naming import ImageName
from stackbuild.image.engine_api import ImageInfo
from stackbuild.image.plan import BuildPlan
from stackbuild.image.registry import RemoteImage


def oracle_source(report: Optional[Mapping[str, Any]]) -> Optional[str]:
    """What the gate checked the simulator against: ``record``, ``imported vLLM``; None without a report or oracle."""
    if not report:
        return None
    oracle = contract.GateReport.from_json(report).oracle
    return oracle.source if oracle is not None else None


def geometry_verdict(report: Mapping[str, Any]) -> str:
    """``pass`` / ``fail`` from the gate's report; ContractError if it is not the gate's shape."""
    return contract.GateReport.from_json(report).verdict_word


@dataclass(frozen=True)
class PlatformImage:
    """One platform's image of a build: built and checked, then (with a push) pushed and attested."""

    plan: BuildPlan  # the platform's plan, named as its image is tagged
    image: ImageInfo
    geometry: Optional[Mapping[str, Any]]  # the in-image gate's report
    kept: Optional[Path] = None  # the oracle record written, with --keep-record
    pushed: Optional[RemoteImage] = None  # what the registry holds under its tags after the push
    attestations: Optional[Mapping[str, Any]] = None
    signature: Optional[Mapping[str, Any]] = None  # stackbuild/image/signing.py signature_record

    @property
    def platform(self) -> str:
        return self.plan.recipe.platform

    @property
    def pushed_digest(self) -> Optional[str]:
        return self.pushed.manifest_digest if self.pushed else None


def build_report(
    images: Sequence[PlatformImage],
    *,
    phases: Mapping[str, float],
    engine: BuildEngine,
    index: Optional[ImageName] = None,
    index_digest: Optional[str] = None,
    index_signature: Optional[Mapping[str, Any]] = None,
) -> dict:
    """The report of a build: its one image's, or (``index``, several platforms) the index's with each image's inside.

    The index's report names the recipe's tags and the index's digest, and
    holds each platform's image report under ``images``; the phase times are
    the whole build's, at the top.
    """
    if index is None:
        (image,) = images
        return _image_report(image, phases, engine)
    sections = {image.platform: _image_report(image, {}, engine) for image in images}
    recipe = images[0].plan.recipe
    return {
        "schema": REPORT_SCHEMA,
        "status": "pushed" if index_digest else "built",
        "recipe": str(recipe.path),
        "recipe_name": recipe.name,
        "platforms": list(sections),
        "image": index.repository,
        "registry": index.registry,
        "tags": list(index.tags),
        "references": list(index.references),
        "pushed_digest": index_digest,
        "pushed_reference": str(index.reference(digest=index_digest)) if index_digest else None,
        "images": sections,
        **({"signature": dict(index_signature)} if index_signature is not None else {}),
        "geometry_verdict": "pass" if all(s["geometry_verdict"] == "pass" for s in sections.values()) else "fail",
        "phase_seconds": dict(phases),
        "engine": engine.to_json(),
    }


def _image_report(built: PlatformImage, phases: Mapping[str, float], engine: BuildEngine) -> dict:
    plan, geometry_report, pushed_digest = built.plan, built.geometry, built.pushed_digest
    verdict = geometry_verdict(geometry_report) if geometry_report else None
    report = {
        "schema": REPORT_SCHEMA,
        "status": "pushed" if pushed_digest else "built",
        "recipe": str(plan.recipe.path),
        "recipe_name": plan.recipe.name,
        "platform": plan.recipe.platform,
        "image": plan.image.repository,
        "registry": plan.image.registry,
        "tags": list(plan.image.tags),
        "references": list(plan.image.references),
        "image_id": built.image.id,
        "architecture": built.image.architecture,
        "os": built.image.os,
        "pushed_digest": pushed_digest,
        "pushed_reference": str(plan.image.reference(digest=pushed_digest)) if pushed_digest else None,
        "config_digest": built.pushed.image_digest if built.pushed else None,
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
            "kept": str(built.kept) if built.kept else None,
        },
        "labels": dict(plan.labels),
        "revision": plan.revision,
        "source_date_epoch": plan.source_date_epoch,
        "phase_seconds": dict(phases),
        "engine": engine.to_json(),
        "finished_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if built.attestations is not None:
        report["attestations"] = dict(built.attestations)
    if built.signature is not None:
        report["signature"] = dict(built.signature)
    return report


def write_report(report: Mapping[str, Any], path: Optional[Path] = None) -> Path:
    path = Path(path) if path else DEFAULT_REPORT
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    return path
