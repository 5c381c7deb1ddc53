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

A multi-platform recipe (several ``platforms``) is one plan per platform:
each is pulled, built, checked and gated in turn (arm64 through qemu on an
x86-64 host) before anything is tagged; then every platform's image is
tagged and pushed under its own ``<pinned tag>-<arch>``, attested by its
digest, and ``index`` puts the OCI image index over them under the recipe's
tags (stackbuild/index.py).
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from geometry.image_contract import (ARCHITECTURE_MISMATCH_STATUS, GATE_REPORT, GATE_STEP, PATCH_STEP, ContractError,
                                     payload_path, step_name)

from stackbuild.image import engine as engine_mod
from stackbuild.core.errors import ArchitectureMismatch, BuildStepFailed, GeometryGateFailed, PullError, PushError, StackBuildError
from stackbuild.image.attest import attest_image, registry_client
from stackbuild.image.index import check_index_tags, index_platforms, push_index
from stackbuild.core.labels import LABEL_NS
from stackbuild.image.oracle_record import record_path, save_from_image
from stackbuild.image.plan import BuildPlan
from stackbuild.image.progress import Progress
from stackbuild.image.publish import check_pinned_tags, local_image_of, push_tags, tag_image
from stackbuild.core.reference import ImageReference
from stackbuild.image.render import write_context
from stackbuild.image.report import build_report, geometry_verdict, oracle_source, write_report
from stackbuild.core.build_report import read_report

TAIL_LINES = 15


def ensure_base(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress) -> Optional[ImageReference]:
    """Make sure the engine has the base for the plan's platform; return what FROM must name if not the pin.

    The engine keeps one image per digest reference: a base pinned by an
    index digest names the platform pulled by it first, and cannot be pulled
    again for another platform. A build for another platform then takes the
    index's own manifest for its platform (asked of the registry) and builds
    FROM that, which is the same image by content.
    """
    reference = plan.base.reference.by_digest_or_tag()  # how the engine knows the base locally
    found = engine.inspect_image(str(reference))
    if found is not None and found.get("Architecture") == plan.recipe.architecture:
        progress.note(f"base {reference} is already in the engine")
        return None
    if found is None:
        engine.pull(plan.base.reference, plan.recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event)
        return None
    child = platform_manifest(engine, plan, progress)
    if child is None:  # one image, of another platform: the build's architecture check says so
        return None
    by_platform = ImageReference(plan.base.image, digest=child)
    progress.note(f"base {reference} in the engine is {found.get('Architecture')}: building FROM its "
                  f"{plan.recipe.platform} manifest {child}")
    local = engine.inspect_image(str(by_platform))
    if local is None or local.get("Architecture") != plan.recipe.architecture:
        engine.pull(by_platform, plan.recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event)
    return by_platform


def platform_manifest(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress) -> Optional[str]:
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
        raise PullError(f"{base.reference}: the base index offers {', '.join(sorted(offered)) or 'nothing'}, "
                        f"not {plan.recipe.platform}")
    return offered[plan.recipe.platform]


def _short_error(outcome: engine_mod.BuildOutcome) -> str:
    if outcome.exit_status is not None:
        return f"exited with code {outcome.exit_status}"
    return outcome.error or "failed"


def build_image(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress, *, nocache: bool = False) -> str:
    """Build the plan's context untagged; return the image id or raise naming the failed step."""
    with tempfile.TemporaryDirectory(prefix="stackbuild-context-") as tmp:
        context = write_context(plan, Path(tmp) / "context")
        outcome = engine.build(str(context), plan.recipe.platform, progress.build_event, nocache=nocache)
    if outcome.image_id:
        return outcome.image_id
    progress.end_step(failed=True)
    name = step_name(outcome.step_number) if outcome.step_number else "build context"
    tail = tuple(line for line in outcome.step_output if line.strip())[-TAIL_LINES:]
    where = f"step {outcome.step_number}/{outcome.step_total}" if outcome.step_number else "before the first step"
    if name == PATCH_STEP and outcome.exit_status == ARCHITECTURE_MISMATCH_STATUS:
        recipe = plan.recipe
        raise ArchitectureMismatch(f"{recipe.path}: architecture check ({name}, {where}): the recipe's platform "
                                   f"{recipe.platform} needs the machine {recipe.uname_machine}, the engine ran "
                                   "the build on another (the step's output names it); nothing was tagged")
    detail = f"{_short_error(outcome)} ({where})"
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
    path = payload_path(GATE_REPORT, plan.payload_dir)
    raw = engine.read_file(image_id, path)
    if raw is None:
        raise BuildStepFailed(GATE_STEP, f"the image has no {path}: the gate did not run")
    try:
        report = json.loads(raw)
        verdict = geometry_verdict(report)
    except json.JSONDecodeError as exc:
        raise BuildStepFailed(GATE_STEP, f"{path} is not JSON ({exc})") from None
    except ContractError as exc:
        raise BuildStepFailed(GATE_STEP, f"{path}: {exc}") from None
    if verdict != "pass":
        raise GeometryGateFailed(f"{plan.recipe.path}: the in-image gate report says {verdict} ({path}); nothing was tagged")
    return report


def run_build(plans: Sequence[BuildPlan], *, push: bool = False, report_path: Optional[Path] = None,
              json_progress: bool = False, nocache: bool = False, keep_record: bool = False, force: bool = False) -> dict:
    """Build the recipe's plans: one (a single image) or one per platform (an index)."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"build {plans[0].recipe.name}"):
            if len(plans) == 1:
                return _build(plans[0], progress, push=push, report_path=report_path, nocache=nocache,
                              keep_record=keep_record, force=force)
            return _build_platforms(plans, progress, push=push, report_path=report_path, nocache=nocache,
                                    keep_record=keep_record, force=force)
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


@dataclass(frozen=True)
class Built:
    """One platform's image, built and checked, not yet tagged."""

    plan: BuildPlan
    image_id: str
    image: dict            # the engine's inspect data
    geometry: dict         # the in-image gate's report
    kept: Optional[Path]   # the oracle record written, with --keep-record


def build_checked(engine: engine_mod.DockerEngine, plan: BuildPlan, progress: Progress, *, nocache: bool,
                  keep_record: bool) -> Built:
    """Pull the base, build, check the architecture and the gate's report; tag nothing."""
    if plan.geometry_verdict != "pass":
        progress.note(f"the host-side gate says the drafter does not fit ({plan.geometry_summary}); "
                      "the in-image gate decides")
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
        progress.note(f"wrote {kept} (the image's oracle record)" if kept
                      else f"left {plan.oracle_record} as it is: the gate checked against it")
    return Built(plan, image_id, image, geometry, kept)


def _build(plan: BuildPlan, progress: Progress, *, push: bool, report_path: Optional[Path], nocache: bool,
           keep_record: bool, force: bool) -> dict:
    engine = engine_mod.connect()
    progress.note(engine.describe())
    built = build_checked(engine, plan, progress, nocache=nocache, keep_record=keep_record)
    image_id, image, geometry, kept = built.image_id, built.image, built.geometry, built.kept
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
    with progress.phase("attest", str(plan.image.reference(digest=digest))):
        attestations = attest_image(engine, plan, image_id, digest, progress)
    pushed = report(digest)
    pushed["attestations"] = attestations
    write_report(pushed, report_path)
    return pushed


def platform_plan(plan: BuildPlan) -> BuildPlan:
    """The plan as one platform's image of an index: tagged ``<pinned tag>-<arch>``."""
    return replace(plan, image=plan.image.for_architecture(plan.recipe.architecture))


def _build_platforms(plans: Sequence[BuildPlan], progress: Progress, *, push: bool, report_path: Optional[Path],
                     nocache: bool, keep_record: bool, force: bool) -> dict:
    engine = engine_mod.connect()
    progress.note(engine.describe())
    progress.note(f"{plans[0].recipe.name}: {len(plans)} platforms ({', '.join(p.recipe.platform for p in plans)}), "
                  "each built and gated before anything is tagged")
    built = [build_checked(engine, plan, progress, nocache=nocache, keep_record=keep_record) for plan in plans]
    return _publish_platforms(engine, built, progress, push=push, report_path=report_path, force=force)


def _publish_platforms(engine: engine_mod.DockerEngine, built: Sequence[Built], progress: Progress, *, push: bool,
                       report_path: Optional[Path], force: bool) -> dict:
    """Tag each platform's image; with ``push``, push and attest each, then the index under the recipe's tags."""
    name = built[0].plan.image
    image_ids = {b.plan.recipe.platform: b.image_id for b in built}
    description = engine.describe()
    if push:
        with progress.phase("check-tags", name.repository):
            for b in built:
                check_pinned_tags(engine, platform_plan(b.plan).image, b.image_id, b.plan.recipe.platform, progress, force=force)
            check_index_tags(registry_client(engine, name.repository, progress), name, image_ids, progress, force=force)
    with progress.phase("tag", ", ".join(ref for b in built for ref in platform_plan(b.plan).image.references)):
        for b in built:
            tag_image(engine, b.image_id, platform_plan(b.plan).image)

    def report(digests: dict, index_digest: Optional[str], attestations: dict) -> dict:
        images = {}
        for b in built:
            platform = b.plan.recipe.platform
            images[platform] = build_report(platform_plan(b.plan), image_id=b.image_id, image_config=b.image,
                                            geometry_report=b.geometry, phases={}, pushed_digest=digests.get(platform),
                                            engine=description, kept_record=b.kept)
            if platform in attestations:
                images[platform]["attestations"] = attestations[platform]
        first = built[0].plan
        data = {
            "schema": images[first.recipe.platform]["schema"],
            "status": "pushed" if index_digest else "built",
            "recipe": str(first.recipe.path),
            "recipe_name": first.recipe.name,
            "platforms": list(image_ids),
            "image": name.repository,
            "registry": name.registry,
            "tags": list(name.tags),
            "references": list(name.references),
            "pushed_digest": index_digest,
            "pushed_reference": str(name.reference(digest=index_digest)) if index_digest else None,
            "images": images,
            "geometry_verdict": "pass" if all(i["geometry_verdict"] == "pass" for i in images.values()) else "fail",
            "phase_seconds": dict(progress.phase_seconds),
            "engine": description,
        }
        written = write_report(data, report_path)
        progress.note(f"wrote {written} ({data['status']})", report=str(written))
        return data

    built_report = report({}, None, {})
    if not push:
        return built_report
    digests, attestations = {}, {}
    with progress.phase("push", name.repository):
        for b in built:
            digests[b.plan.recipe.platform] = push_tags(engine, platform_plan(b.plan).image, progress)
    with progress.phase("attest", ", ".join(str(name.reference(digest=d)) for d in digests.values())):
        for b in built:
            attestations[b.plan.recipe.platform] = attest_image(engine, b.plan, b.image_id, digests[b.plan.recipe.platform], progress)
    with progress.phase("index", ", ".join(name.references)):
        index_digest = push_index(registry_client(engine, name.repository, progress), name, digests, progress)
    return report(digests, index_digest, attestations)


def run_push(plans: Sequence[BuildPlan], *, json_progress: bool = False, report_path: Optional[Path] = None,
             force: bool = False) -> dict:
    """Push the local image(s) the plans' tags name; update the build report if it describes that image."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"push {plans[0].image.repository}"):
            if len(plans) == 1:
                return _push(plans[0], progress, report_path, force)
            return _push_platforms(plans, progress, report_path, force)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def _local_image_of_recipe(engine: engine_mod.DockerEngine, plan: BuildPlan) -> dict:
    """The local image the plan's tags name, refused if another recipe built it."""
    image = local_image_of(engine, plan.image)
    recipe_label = f"{LABEL_NS}.recipe.sha256"
    labels = (image.get("Config") or {}).get("Labels") or {}
    if labels.get(recipe_label) != plan.labels[recipe_label]:
        raise PushError(f"{plan.image.references[0]}: the local image was built from another recipe "
                        f"({recipe_label}={labels.get(recipe_label)!r}); rebuild it first")
    return image


def _push_platforms(plans: Sequence[BuildPlan], progress: Progress, report_path: Optional[Path], force: bool) -> dict:
    engine = engine_mod.connect()
    built = []
    for plan in plans:
        image = _local_image_of_recipe(engine, platform_plan(plan))
        report = engine.read_file(image["Id"], payload_path(GATE_REPORT, plan.payload_dir))
        built.append(Built(plan, image["Id"], image, json.loads(report) if report else {}, None))
    return _publish_platforms(engine, built, progress, push=True, report_path=report_path, force=force)


def _push(plan: BuildPlan, progress: Progress, report_path: Optional[Path], force: bool) -> dict:
    engine = engine_mod.connect()
    image = _local_image_of_recipe(engine, plan)
    with progress.phase("check-tags", plan.image.repository):
        check_pinned_tags(engine, plan.image, image["Id"], plan.recipe.platform, progress, force=force)
    with progress.phase("push", plan.image.repository):
        digest = push_tags(engine, plan.image, progress)
    with progress.phase("attest", str(plan.image.reference(digest=digest))):
        attestations = attest_image(engine, plan, image["Id"], digest, progress)
    result = {"image": plan.image.repository, "tags": list(plan.image.tags), "image_id": image["Id"],
              "pushed_digest": digest, "pushed_reference": str(plan.image.reference(digest=digest)),
              "attestations": attestations, "phase_seconds": dict(progress.phase_seconds)}
    report = read_report(report_path)
    if report and report.get("image_id") == image["Id"]:
        report.update(status="pushed", pushed_digest=digest, pushed_reference=result["pushed_reference"],
                      attestations=attestations)
        report.setdefault("phase_seconds", {})["push"] = progress.phase_seconds["push"]
        result["report"] = str(write_report(report, report_path))
    return result


def run_index(plans: Sequence[BuildPlan], *, json_progress: bool = False, force: bool = False) -> dict:
    """Put the index over the platforms' images already in the registry under ``<pinned tag>-<arch>``."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_mod.engine_errors(f"index {plans[0].image.repository}"):
            return _index(plans, progress, force)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def _index(plans: Sequence[BuildPlan], progress: Progress, force: bool) -> dict:
    if len(plans) < 2:
        raise PushError(f"{plans[0].recipe.path}: one platform ({plans[0].recipe.platform}): `build --push` pushes its image "
                        "under the recipe's tags; there is no index to put")
    engine = engine_mod.connect()
    name = plans[0].image
    client = registry_client(engine, name.repository, progress)
    digests, image_ids = {}, {}
    recipe_label = f"{LABEL_NS}.recipe.sha256"
    with progress.phase("check-tags", name.repository):
        for plan in plans:
            tag = platform_plan(plan).image.tags[0]
            remote = client.image(tag, plan.recipe.platform)
            if remote is None:
                raise PushError(f"{name.reference(tag)}: not in the registry; push the {plan.recipe.platform} image "
                                f"first (build --platform {plan.recipe.platform} --push)")
            config = client.blob(remote.image_digest) or b"{}"
            labels = (json.loads(config).get("config") or {}).get("Labels") or {}
            if labels.get(recipe_label) != plan.labels[recipe_label]:
                raise PushError(f"{name.reference(tag)}: the image was built from another recipe "
                                f"({recipe_label}={labels.get(recipe_label)!r})")
            digests[plan.recipe.platform], image_ids[plan.recipe.platform] = remote.manifest_digest, remote.image_digest
        check_index_tags(client, name, image_ids, progress, force=force)
    with progress.phase("index", ", ".join(name.references)):
        digest = push_index(client, name, digests, progress)
    return {"image": name.repository, "tags": list(name.tags), "platforms": list(digests),
            "images": {p: {"pushed_digest": d, "image_id": image_ids[p]} for p, d in digests.items()},
            "pushed_digest": digest, "pushed_reference": str(name.reference(digest=digest)),
            "phase_seconds": dict(progress.phase_seconds)}
