"""Build, check, tag and push one plan, in that order; nothing is tagged if anything fails.

Phases (each timed in the report): ``pull`` the pinned base if the engine
lacks it, ``build`` untagged from a temporary context, ``verify-arch`` (the
image config's os/architecture against the recipe's platform),
``geometry-report`` (the in-image gate's report read back), with
``--keep-record`` ``keep-record`` (the image's oracle record written next to
the recipe), with ``--push`` ``check-tags`` (no pinned tag in the registry
names another image, unless ``--force``), ``tag`` (``latest`` and the pinned
tag), ``push`` and ``attest`` (SBOM and provenance pushed as artifacts
referring to the pushed digest).
"""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Optional

from . import engine as engine_mod
from .errors import ArchitectureMismatch, BuildStepFailed, GeometryGateFailed, PushError, StackBuildError
from .attest import attest_image
from .labels import LABEL_NS
from .lock import PinnedBase
from .oracle_record import record_path, save_from_image
from .plan import BuildPlan
from .progress import GATE_STEP, Progress, step_name
from .publish import check_pinned_tags, local_image_of, push_tags, tag_image
from .render import write_context
from .report import GEOMETRY_REPORT_NAME, build_report, geometry_verdict, oracle_source, read_report, write_report

TAIL_LINES = 15


def local_base_reference(base: PinnedBase) -> str:
    """How the engine knows the base locally: by digest when pinned."""
    return f"{base.image}@{base.digest}" if base.digest else f"{base.image}:{base.tag}"


def ensure_base(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress) -> None:
    reference = local_base_reference(plan.base)
    if engine.has_image(reference):
        progress.note(f"base {reference} is already in the engine")
        return
    engine.pull(plan.base.reference, plan.recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event)


def _short_error(error: str) -> str:
    code = re.search(r"returned a non-zero code: (\d+)", error)
    return f"exited with code {code.group(1)}" if code else error


def build_image(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress, *, nocache: bool = False) -> str:
    """Build the plan's context untagged; return the image id or raise naming the failed step."""
    with tempfile.TemporaryDirectory(prefix="stackbuild-context-") as tmp:
        context = write_context(plan, Path(tmp) / "context")
        outcome = engine.build(str(context), plan.recipe.platform, progress.build_event, nocache=nocache)
    if outcome.image_id:
        return outcome.image_id
    progress.end_step(failed=True)
    name = step_name(outcome.step_instruction) if outcome.step_instruction else "build context"
    tail = tuple(line for line in outcome.step_output if line.strip())[-TAIL_LINES:]
    where = f"step {outcome.step_number}/{outcome.step_total}" if outcome.step_number else "before the first step"
    detail = f"{_short_error(outcome.error or 'failed')} ({where})"
    if tail:
        detail += "; last output:\n" + "\n".join(f"    | {line}" for line in tail)
    if name == GATE_STEP:
        raise GeometryGateFailed(f"{plan.recipe.path}: build step failed: {GATE_STEP}: {detail}")
    raise BuildStepFailed(name, detail, tail)


def check_architecture(image: dict, plan: BuildPlan) -> None:
    wanted = ("linux", plan.recipe.architecture)
    got = (image.get("Os"), image.get("Architecture"))
    if got != wanted:
        raise ArchitectureMismatch(
            f"{image['Id'][:19]}: the image is {got[0]}/{got[1]}, the recipe's platform is {plan.recipe.platform}; nothing was tagged"
        )


def read_geometry_report(engine: engine_mod.DockerEngine, image_id: str, plan: BuildPlan) -> dict:
    path = f"{plan.payload_dir}/{GEOMETRY_REPORT_NAME}"
    raw = engine.read_file(image_id, path)
    if raw is None:
        raise BuildStepFailed(GATE_STEP, f"the image has no {path}: the gate did not run")
    try:
        report = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BuildStepFailed(GATE_STEP, f"{path} is not JSON ({exc})") from None
    if not isinstance(report, dict):
        raise BuildStepFailed(GATE_STEP, f"{path} does not hold a JSON object")
    verdict = geometry_verdict(report)
    if verdict != "pass":
        raise GeometryGateFailed(f"{plan.recipe.path}: the in-image gate report says {verdict or 'nothing'} ({path}); nothing was tagged")
    return report


def run_build(plan: BuildPlan, *, push: bool = False, report_path: Optional[Path] = None, json_progress: bool = False,
              nocache: bool = False, keep_record: bool = False, force: bool = False) -> dict:
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"build {plan.recipe.name}"):
            return _build(plan, progress, push=push, report_path=report_path, nocache=nocache, keep_record=keep_record,
                          force=force)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def keep_oracle_record(engine: engine_mod.DockerEngine, image_id: str, plan: BuildPlan, geometry: dict) -> Optional[Path]:
    """Write the image's oracle record next to the recipe unless the gate used the recipe's own.

    A gate that imported vLLM wrote a fresh record (the recipe had none, or its
    key no longer matched); keeping it spares the next cold build that import.
    """
    if oracle_source(geometry) == "record":
        return None
    path, _record = save_from_image(engine, image_id, plan.recipe, plan.gate_input, plan.payload_dir)
    return path


def _build(plan: BuildPlan, progress: Progress, *, push: bool, report_path: Optional[Path], nocache: bool,
           keep_record: bool, force: bool) -> dict:
    engine = engine_mod.connect()
    if plan.geometry_verdict != "pass":
        progress.note(f"the host-side gate says the drafter does not fit ({plan.geometry_summary}); "
                      "the in-image gate decides")
    progress.note(engine.describe())
    progress.note(plan.oracle_record_note)
    with progress.phase("pull", plan.base.reference):
        ensure_base(engine, plan, progress)
    with progress.phase("build", f"{plan.recipe.name} for {plan.recipe.platform}"):
        image_id = build_image(engine, plan, progress, nocache=nocache)
    with progress.phase("verify-arch", plan.recipe.platform):
        image = engine.inspect_image(image_id)
        check_architecture(image, plan)
    with progress.phase("geometry-report"):
        geometry = read_geometry_report(engine, image_id, plan)
    kept = None
    if keep_record:
        with progress.phase("keep-record", str(record_path(plan.recipe))):
            kept = keep_oracle_record(engine, image_id, plan, geometry)
        progress.note(f"wrote {kept} (the image's oracle record)" if kept
                      else f"left {plan.oracle_record} as it is: the gate checked against it")
    if push:
        with progress.phase("check-tags", plan.image.repository):
            check_pinned_tags(engine, plan.image, image_id, plan.recipe.platform, progress, force=force)
    with progress.phase("tag", ", ".join(plan.image.references)):
        tag_image(engine, image_id, plan.image)
    description = engine.describe()

    def report(digest: Optional[str]) -> dict:
        data = build_report(plan, image_id=image_id, image_config=image, geometry_report=geometry,
                            phases=progress.phase_seconds, pushed_digest=digest, engine=description, kept_record=kept)
        written = write_report(data, report_path)
        progress.note(f"wrote {written} ({data['status']})", report=str(written))
        return data

    # Written before the push too: should the push fail, `build.py push` completes this report.
    built = report(None)
    if not push:
        return built
    with progress.phase("push", plan.image.repository):
        digest = push_tags(engine, plan.image, progress)
    with progress.phase("attest", f"{plan.image.repository}@{digest}"):
        attestations = attest_image(engine, plan, image_id, digest, progress)
    pushed = report(digest)
    pushed["attestations"] = attestations
    write_report(pushed, report_path)
    return pushed


def run_push(plan: BuildPlan, *, json_progress: bool = False, report_path: Optional[Path] = None,
             force: bool = False) -> dict:
    """Push the local image the plan's tags name; update the build report if it describes that image."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"push {plan.image.repository}"):
            return _push(plan, progress, report_path, force)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def _push(plan: BuildPlan, progress: Progress, report_path: Optional[Path], force: bool) -> dict:
    engine = engine_mod.connect()
    image = local_image_of(engine, plan.image)
    recipe_label = f"{LABEL_NS}.recipe.sha256"
    labels = (image.get("Config") or {}).get("Labels") or {}
    if labels.get(recipe_label) != plan.labels[recipe_label]:
        raise PushError(f"{plan.image.references[0]}: the local image was built from another recipe "
                        f"({recipe_label}={labels.get(recipe_label)!r}); rebuild it first")
    with progress.phase("check-tags", plan.image.repository):
        check_pinned_tags(engine, plan.image, image["Id"], plan.recipe.platform, progress, force=force)
    with progress.phase("push", plan.image.repository):
        digest = push_tags(engine, plan.image, progress)
    with progress.phase("attest", f"{plan.image.repository}@{digest}"):
        attestations = attest_image(engine, plan, image["Id"], digest, progress)
    result = {"image": plan.image.repository, "tags": list(plan.image.tags), "image_id": image["Id"],
              "pushed_digest": digest, "pushed_reference": f"{plan.image.repository}@{digest}",
              "attestations": attestations, "phase_seconds": dict(progress.phase_seconds)}
    report = read_report(report_path)
    if report and report.get("image_id") == image["Id"]:
        report.update(status="pushed", pushed_digest=digest, pushed_reference=result["pushed_reference"],
                      attestations=attestations)
        report.setdefault("phase_seconds", {})["push"] = progress.phase_seconds["push"]
        result["report"] = str(write_report(report, report_path))
    return result
