"""Build, check, tag and push a recipe's images, in that order; nothing is tagged if anything fails.

One path for N platforms (a single-platform recipe is N = 1): each
platform's plan is pulled, built, checked and gated in turn (arm64 through
qemu on an x86-64 host) before anything is tagged, then every image is
tagged and, with ``--push``, pushed and attested. One platform's image takes
the recipe's tags; several platforms' images each take ``<pinned
tag>-<arch>`` and an OCI image index over them takes the recipe's tags
(stackbuild/image/index.py).

Phases (each timed in the report): ``pull`` the pinned base if the engine
lacks it, ``build`` untagged from a temporary context, ``verify-arch`` (the
image config's os/architecture against the recipe's platform),
``geometry-report`` (the in-image gate's report read back), with
``--keep-record`` ``keep-record`` (the image's oracle record written next to
the recipe), with ``--push`` ``check-tags`` (no pinned tag in the registry
names another image, unless ``--force``), ``tag`` (``latest`` and the pinned
tag), ``push``, ``attest`` (SBOM and provenance pushed as artifacts
referring to each pushed digest) and, for several platforms, ``index``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from geometry import contract
from stackbuild.core.build_report import REPORT_SCHEMA, read_report
from stackbuild.core.errors import (
    ArchitectureMismatch,
    BuildStepFailed,
    GeometryGateFailed,
    PullError,
    PushError,
    StackBuildError,
)
from stackbuild.core.labels import RECIPE_SHA256
from stackbuild.core.naming import ImageName
from stackbuild.core.reference import ImageReference
from stackbuild.image import engine as engine_mod
from stackbuild.image.attest import attest_image
from stackbuild.image.engine_api import BuildOutcome, ContainerEngine, ImageInfo
from stackbuild.image.index import check_index_tags, index_platforms, push_index
from stackbuild.image.oracle_record import record_path, save_from_image
from stackbuild.image.plan import BuildPlan
from stackbuild.image.progress import Progress
from stackbuild.image.publish import check_pinned_tags, local_image_of, push_tags, tag_image
from stackbuild.image.registry import registry_client
from stackbuild.image.render import write_context
from stackbuild.image.report import PlatformImage, build_report, geometry_verdict, oracle_source, write_report

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
    if found is None:
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
        raise ArchitectureMismatch(
            f"{image.id[:19]}: the image is {image.platform}, the recipe's platform is "
            f"{plan.recipe.platform}; nothing was tagged"
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


def index_name(plans: Sequence[BuildPlan]) -> Optional[ImageName]:
    """The name the index goes under (the recipe's tags) for several platforms; None for one, whose image takes them."""
    return plans[0].image if len(plans) > 1 else None


def platform_plan(plan: BuildPlan) -> BuildPlan:
    """The plan as one platform's image of an index: tagged ``<pinned tag>-<arch>``."""
    return replace(plan, image=plan.image.for_architecture(plan.recipe.architecture))


def tagged_plan(plan: BuildPlan, index: Optional[ImageName]) -> BuildPlan:
    """The plan named as its image is tagged: the recipe's tags alone, ``<pinned tag>-<arch>`` under an index."""
    return plan if index is None else platform_plan(plan)


def run_build(
    plans: Sequence[BuildPlan],
    *,
    push: bool = False,
    report_path: Optional[Path] = None,
    json_progress: bool = False,
    nocache: bool = False,
    keep_record: bool = False,
    force: bool = False,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Build each platform's image and check it, then tag (and push) them all: one image, or an index over several.

    ``engine``: the engine to use (default: the one at DOCKER_HOST or the default socket).
    """
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"build {plans[0].recipe.name}"):
            engine = engine or engine_mod.connect()
            progress.note(engine.about().line)
            index = index_name(plans)
            if index is not None:
                progress.note(
                    f"{plans[0].recipe.name}: {len(plans)} platforms ({', '.join(p.recipe.platform for p in plans)}), "
                    "each built and gated before anything is tagged"
                )
            built = [build_checked(engine, plan, progress, nocache=nocache, keep_record=keep_record) for plan in plans]
            built = [replace(b, plan=tagged_plan(b.plan, index)) for b in built]
            return publish(engine, built, index, progress, push=push, report_path=report_path, force=force)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


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


def check_tags(
    engine: ContainerEngine,
    built: Sequence[PlatformImage],
    index: Optional[ImageName],
    progress: Progress,
    *,
    force: bool,
) -> None:
    """Refuse (PinnedTagTaken) before anything is tagged: a pinned tag of any image, or of the index, naming another."""
    with progress.phase("check-tags", built[0].plan.image.repository):
        for b in built:
            check_pinned_tags(engine, b.plan.image, b.image, b.platform, progress, force=force)
        if index is not None:
            check_index_tags(
                registry_client(engine, index.repository, progress),
                index,
                {b.platform: b.image for b in built},
                progress,
                force=force,
            )


def push_attested(
    engine: ContainerEngine, built: Sequence[PlatformImage], index: Optional[ImageName], progress: Progress
) -> tuple[list[PlatformImage], Optional[str]]:
    """Push each image's tags and attest it by its digest, then put the index (if any);
    the images pushed, the index's digest.

    What each push put in the registry is read back from it (:func:`push_tags`).
    """
    repository = built[0].plan.image.repository
    with progress.phase("push", repository):
        built = [replace(b, pushed=push_tags(engine, b.plan.image, b.image, b.platform, progress)) for b in built]
    with progress.phase("attest", ", ".join(str(b.plan.image.reference(digest=b.pushed_digest)) for b in built)):
        built = [
            replace(b, attestations=attest_image(engine, b.plan, b.image.id, b.pushed_digest, progress)) for b in built
        ]
    if index is None:
        return built, None
    with progress.phase("index", ", ".join(index.references)):
        digest = push_index(
            registry_client(engine, repository, progress),
            index,
            {b.platform: b.pushed.platform_manifest for b in built},
            progress,
        )
    return built, digest


def publish(
    engine: ContainerEngine,
    built: Sequence[PlatformImage],
    index: Optional[ImageName],
    progress: Progress,
    *,
    push: bool,
    report_path: Optional[Path],
    force: bool,
) -> dict:
    """Tag every image (checking the pinned tags first, with ``push``); write the report;
    push, attest, index, report again.

    The report is written before the push too: should the push fail,
    ``build.py push`` completes it.
    """
    if push:
        check_tags(engine, built, index, progress, force=force)
    with progress.phase("tag", ", ".join(ref for b in built for ref in b.plan.image.references)):
        for b in built:
            tag_image(engine, b.image.id, b.plan.image)
    about = engine.about()

    def report(images: Sequence[PlatformImage], index_digest: Optional[str] = None) -> dict:
        data = build_report(images, phases=progress.phase_seconds, engine=about, index=index, index_digest=index_digest)
        written = write_report(data, report_path)
        progress.note(f"wrote {written} ({data['status']})", report=str(written))
        return data

    built_report = report(built)
    if not push:
        return built_report
    pushed, index_digest = push_attested(engine, built, index, progress)
    return report(pushed, index_digest)


def run_push(
    plans: Sequence[BuildPlan],
    *,
    json_progress: bool = False,
    report_path: Optional[Path] = None,
    force: bool = False,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Push the local image(s) the plans' tags name, attested; several platforms get their index too.

    One platform's push completes the build report if it describes that
    image; several platforms' push writes the index's report.
    """
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"push {plans[0].image.repository}"):
            engine = engine or engine_mod.connect()
            index = index_name(plans)
            built = [local_built(engine, tagged_plan(plan, index)) for plan in plans]
            if index is not None:
                return publish(engine, built, index, progress, push=True, report_path=report_path, force=force)
            check_tags(engine, built, None, progress, force=force)
            (pushed,), _ = push_attested(engine, built, None, progress)
            return _complete_report(pushed, progress, report_path)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


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


def _complete_report(pushed: PlatformImage, progress: Progress, report_path: Optional[Path]) -> dict:
    """What one image's push did; the build report updated with it when it describes that image."""
    plan, digest = pushed.plan, pushed.pushed_digest
    result = {
        "image": plan.image.repository,
        "tags": list(plan.image.tags),
        "image_id": pushed.image.id,
        "config_digest": pushed.pushed.image_digest,
        "pushed_digest": digest,
        "pushed_reference": str(plan.image.reference(digest=digest)),
        "attestations": pushed.attestations,
        "phase_seconds": dict(progress.phase_seconds),
    }
    report = read_report(report_path)
    # The report describes this image when the same engine built it (the ids are that engine's names).
    if report and report.get("schema") == REPORT_SCHEMA and report.get("image_id") == pushed.image.id:
        report.update(
            status="pushed",
            pushed_digest=digest,
            pushed_reference=result["pushed_reference"],
            config_digest=pushed.pushed.image_digest,
            attestations=pushed.attestations,
        )
        report.setdefault("phase_seconds", {})["push"] = progress.phase_seconds["push"]
        result["report"] = str(write_report(report, report_path))
    return result


def run_index(
    plans: Sequence[BuildPlan],
    *,
    json_progress: bool = False,
    force: bool = False,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Put the index over the platforms' images already in the registry under ``<pinned tag>-<arch>``."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"index {plans[0].image.repository}"):
            return _index(plans, progress, force, engine)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def _index(plans: Sequence[BuildPlan], progress: Progress, force: bool, engine: Optional[ContainerEngine]) -> dict:
    if len(plans) < 2:
        raise PushError(
            f"{plans[0].recipe.path}: one platform ({plans[0].recipe.platform}): `build --push` pushes its image "
            "under the recipe's tags; there is no index to put"
        )
    engine = engine or engine_mod.connect()
    name = plans[0].image
    client = registry_client(engine, name.repository, progress)
    digests, configs = {}, {}
    with progress.phase("check-tags", name.repository):
        for plan in plans:
            tag = tagged_plan(plan, name).image.tags[0]
            remote = client.image(tag, plan.recipe.platform)
            if remote is None:
                raise PushError(
                    f"{name.reference(tag)}: not in the registry; push the {plan.recipe.platform} image "
                    f"first (build --platform {plan.recipe.platform} --push)"
                )
            config = client.image_content(remote)
            labels = config.labels if config is not None else {}
            if labels.get(RECIPE_SHA256) != plan.labels[RECIPE_SHA256]:
                raise PushError(
                    f"{name.reference(tag)}: the image was built from another recipe "
                    f"({RECIPE_SHA256}={labels.get(RECIPE_SHA256)!r})"
                )
            digests[plan.recipe.platform], configs[plan.recipe.platform] = remote.platform_manifest, config
        check_index_tags(client, name, configs, progress, force=force)
    with progress.phase("index", ", ".join(name.references)):
        digest = push_index(client, name, digests, progress)
    return {
        "image": name.repository,
        "tags": list(name.tags),
        "platforms": list(digests),
        "images": {p: {"pushed_digest": d, "config_digest": configs[p].id} for p, d in digests.items()},
        "pushed_digest": digest,
        "pushed_reference": str(name.reference(digest=digest)),
        "phase_seconds": dict(progress.phase_seconds),
    }
