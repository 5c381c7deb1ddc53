"""One platform's image, built and checked, tagged nothing: the base pulled, the context built, the
image's architecture and its in-image gate report checked (and, with ``--keep-record``, its oracle
record kept next to the recipe).

Phases (each timed in the report): ``pull`` the pinned base if the engine lacks it, ``build``
untagged from a temporary context, ``verify-arch`` (the image config's os/architecture against the
recipe's platform), ``geometry-report`` (the in-image gate's report read back), with
``--keep-record`` ``keep-record``. A push of images built before reads them back from the engine
(:func:`local_built`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Optional

from geometry import contract
from stackbuild.core.errors import (
    ArchitectureMismatch,
    BuildStepFailed,
    GeometryGateFailed,
    PullError,
    PushError,
    StackBuildError,
)
from stackbuild.core.labels import RECIPE_SHA256
from stackbuild.core.reference import ImageReference
from stackbuild.image.engine_api import BuildOutcome, ContainerEngine, ImageInfo
from stackbuild.image.index import index_platforms
from stackbuild.image.oracle_record import record_path, save_from_image
from stackbuild.image.plan import BuildPlan
from stackbuild.image.progress import Progress
from stackbuild.image.publish import local_image_of
from stackbuild.image.registry import registry_client
from stackbuild.image.render import write_context
from stackbuild.image.report import PlatformImage, geometry_verdict, oracle_source

TAIL_LINES = 15


def ensure_base(engine: ContainerEngine, plan: BuildPlan, progress: Progress) -> Optional[ImageReference]:
    """Make sure the engine has the base for the plan's platform; return what FROM must name if not the pin.

    The engine keeps one image per digest reference: a base pinned by an
    index digest names the platform pulled by it first, and cannot be pulled
    again for another platform. A build for another platform then takes the
    index's own manifest for its platform (asked of the registry) and builds
    FROM that, which is the same image by content.
    """
    reference = plan.base.reference.by_digest_or_tag()  # how the engine knows the base locally
    found = engine.inspect_image(str(reference))
    if found is not None and found.architecture == plan.recipe.architecture:
        progress.note(f"base {reference} is already in the engine")
        return None
    if found is None or not found.architecture:  # absent, or held without its platform (content missing)
        engine.pull(
            plan.base.reference, plan.recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event
        )
        return None
    child = platform_manifest(engine, plan, progress)
    if child is None:  # one image, of another platform: the build's architecture check says so
        return None
    by_platform = ImageReference(plan.base.image, digest=child)
    progress.note(
        f"base {reference} in the engine is {found.architecture}: building FROM its "
        f"{plan.recipe.platform} manifest {child}"
    )
    local = engine.inspect_image(str(by_platform))
    if local is None or local.architecture != plan.recipe.architecture:
        engine.pull(by_platform, plan.recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event)
    return by_platform


def platform_manifest(engine: ContainerEngine, plan: BuildPlan, progress: Progress) -> Optional[str]:
    """The digest of the pinned base index's manifest for the plan's platform; None if the pin is one image."""
    base = plan.base
    try:
        found = registry_client(engine, base.image, progress).manifest(base.digest or base.tag)
    except StackBuildError as exc:  # the build's architecture check will name the mismatch
        progress.note(f"{base.reference}: cannot ask the registry for its {plan.recipe.platform} manifest ({exc})")
        return None
    if found is None:
        raise PullError(f"{base.reference}: the registry does not have it")
    if "manifests" not in found.document:
        return None
    offered = index_platforms(found.document)
    if plan.recipe.platform not in offered:
        raise PullError(
            f"{base.reference}: the base index offers {', '.join(sorted(offered)) or 'nothing'}, "
            f"not {plan.recipe.platform}"
        )
    return offered[plan.recipe.platform]


def _short_error(outcome: BuildOutcome) -> str:
    if outcome.exit_status is not None:
        return f"exited with code {outcome.exit_status}"
    return outcome.error or "failed"


def build_image(engine: ContainerEngine, plan: BuildPlan, progress: Progress, *, nocache: bool = False) -> str:
    """Build the plan's context untagged; return the image id or raise naming the failed step."""
    with tempfile.TemporaryDirectory(prefix="stackbuild-context-") as tmp:
        context = write_context(plan, Path(tmp) / "context")
        outcome = engine.build(str(context), plan.recipe.platform, progress.build_event, nocache=nocache)
    if outcome.image_id:
        return outcome.image_id
    progress.end_step(failed=True)
    name = contract.step_name(outcome.step_number) if outcome.step_number else "build context"
    tail = tuple(line for line in outcome.step_output if line.strip())[-TAIL_LINES:]
    where = f"step {outcome.step_number}/{outcome.step_total}" if outcome.step_number else "before the first step"
    if name == contract.PATCH_STEP and outcome.exit_status == contract.ARCHITECTURE_MISMATCH_STATUS:
        recipe = plan.recipe
        raise ArchitectureMismatch(
            f"{recipe.path}: architecture check ({name}, {where}): the recipe's platform "
            f"{recipe.platform} needs the machine {recipe.uname_machine}, the engine ran "
            "the build on another (the step's output names it); nothing was tagged"
        )
    detail = f"{_short_error(outcome)} ({where})"
    reason = contract.gate_reason(outcome.step_output) if name == contract.GATE_STEP else None
    if reason:
        raise GeometryGateFailed(f"{plan.recipe.path}: build step failed: {contract.GATE_STEP}: {reason} ({detail})")
    if tail:
        detail += "; last output:\n" + "\n".join(f"    | {line}" for line in tail)
    if name == contract.GATE_STEP:
        raise GeometryGateFailed(f"{plan.recipe.path}: build step failed: {contract.GATE_STEP}: {detail}")
    raise BuildStepFailed(name, detail, tail)


def check_architecture(image: ImageInfo, plan: BuildPlan) -> None:
    if (image.os, image.architecture) != ("linux", plan.recipe.architecture):
        held = f"is {image.platform}" if image.architecture else "has no platform in the engine (content missing)"
        raise ArchitectureMismatch(
            f"{image.id[:19]}: the image {held}, the recipe's platform is {plan.recipe.platform}; nothing was tagged"
        )


def read_geometry_report(engine: ContainerEngine, image_id: str, plan: BuildPlan) -> dict:
    path = contract.payload_path(contract.GATE_REPORT, plan.payload_dir)
    raw = engine.read_file(image_id, path)
    if raw is None:
        raise BuildStepFailed(contract.GATE_STEP, f"the image has no {path}: the gate did not run")
    try:
        report = json.loads(raw)
        verdict = geometry_verdict(report)
    except json.JSONDecodeError as exc:
        raise BuildStepFailed(contract.GATE_STEP, f"{path} is not JSON ({exc})") from None
    except contract.ContractError as exc:
        raise BuildStepFailed(contract.GATE_STEP, f"{path}: {exc}") from None
    if verdict != "pass" and not plan.gate_failure_allowed:
        raise GeometryGateFailed(
            f"{plan.recipe.path}: the in-image gate report says {verdict} ({path}); nothing was tagged"
        )
    return report


def keep_oracle_record(engine: ContainerEngine, image_id: str, plan: BuildPlan, geometry: dict) -> Optional[Path]:
    """Write the image's oracle record next to the recipe unless the gate used the recipe's own.

    A gate that imported vLLM wrote a fresh record (the recipe had none, or its
    key no longer matched); keeping it spares the next cold build that import.
    """
    if oracle_source(geometry) == "record":
        return None
    path, _record = save_from_image(engine, image_id, plan.recipe, plan.gate_input, plan.payload_dir)
    return path


def build_checked(
    engine: ContainerEngine, plan: BuildPlan, progress: Progress, *, nocache: bool, keep_record: bool
) -> PlatformImage:
    """Pull the base, build, check the architecture and the gate's report; tag nothing."""
    if plan.stock:
        progress.note("stock comparison build: the base's vLLM without the patch series, gated as stock")
    if plan.geometry_verdict != "pass":
        progress.note(
            f"the host-side gate says the drafter does not fit ({plan.geometry_summary}); "
            + (
                "kept anyway (--allow-gate-failure): for comparison, never pushed"
                if plan.gate_failure_allowed
                else "the in-image gate decides"
            )
        )
    progress.note(plan.oracle_record_note)
    with progress.phase("pull", f"{plan.base.reference} for {plan.recipe.platform}"):
        from_reference = ensure_base(engine, plan, progress)
    if from_reference:
        plan = replace(plan, from_reference=from_reference)
    with progress.phase("build", f"{plan.recipe.name} for {plan.recipe.platform}"):
        image_id = build_image(engine, plan, progress, nocache=nocache)
    with progress.phase("verify-arch", plan.recipe.platform):
        image = engine.inspect_image(image_id)
        check_architecture(image, plan)
    with progress.phase("geometry-report", plan.recipe.platform):
        geometry = read_geometry_report(engine, image_id, plan)
    kept = None
    if keep_record:
        with progress.phase("keep-record", str(record_path(plan.recipe))):
            kept = keep_oracle_record(engine, image_id, plan, geometry)
        progress.note(
            f"wrote {kept} (the image's oracle record)"
            if kept
            else f"left {plan.oracle_record} as it is: the gate checked against it"
        )
    return PlatformImage(plan, image, geometry, kept)


def local_built(engine: ContainerEngine, plan: BuildPlan) -> PlatformImage:
    """The local image the plan's tags name, with the gate's report read from it; refused if another recipe built it."""
    image = local_image_of(engine, plan.image)
    if image.labels.get(RECIPE_SHA256) != plan.labels[RECIPE_SHA256]:
        raise PushError(
            f"{plan.image.references[0]}: the local image was built from another recipe "
            f"({RECIPE_SHA256}={image.labels.get(RECIPE_SHA256)!r}); rebuild it first"
        )
    raw = engine.read_file(image.id, contract.payload_path(contract.GATE_REPORT, plan.payload_dir))
    return PlatformImage(plan, image, json.loads(raw) if raw else {})
