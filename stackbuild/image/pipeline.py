"""Build, check, tag and push a recipe's images, in that order; nothing is tagged if anything fails.

One path for N platforms (a single-platform recipe is N = 1): each
platform's plan is pulled, built, checked and gated in turn (arm64 through
qemu on an x86-64 host) before anything is tagged, then every image is
tagged and, with ``--push``, pushed and attested. One platform's image takes
the recipe's tags; several platforms' images each take ``<pinned
tag>-<arch>`` and an OCI image index over them takes the recipe's tags
(stackbuild/image/index.py).

Phases (each timed in the report): those of one platform's build (``pull``, ``build``,
``verify-arch``, ``geometry-report``, ``keep-record``: stackbuild/image/platform_build.py),
then, with ``--push``, ``check-tags`` (no pinned tag in the registry
names another image, unless ``--force``), ``tag`` (``latest`` and the pinned
tag), ``push``, ``attest`` (SBOM and provenance pushed as artifacts
referring to each pushed digest), ``sign`` (with a signing key: each image's
attestations and digest signed with cosign, stackbuild/image/signing.py;
without one the push says once that it is unsigned) and, for several
platforms, ``index`` (the index signed too).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from stackbuild.core.build_report import REPORT_SCHEMA, read_report
from stackbuild.core.errors import PushError, StackBuildError
from stackbuild.core.labels import RECIPE_SHA256
from stackbuild.core.naming import ImageName
from stackbuild.image.attest import attest_image
from stackbuild.image.connect import connect
from stackbuild.image.cosign import Signer
from stackbuild.image.engine_api import ContainerEngine
from stackbuild.image.engine_errors import engine_errors
from stackbuild.image.index import check_index_tags, push_index
from stackbuild.image.plan import BuildPlan
from stackbuild.image.platform_build import build_checked, local_built
from stackbuild.image.progress import Progress
from stackbuild.image.publish import check_pinned_tags, push_tags, tag_image
from stackbuild.image.registry import registry_client
from stackbuild.image.report import PlatformImage, build_report, write_report
from stackbuild.image.signing import UNSIGNED_NOTE, sign_image, sign_index, signature_record


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
    signer: Optional[Signer] = None,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Build each platform's image and check it, then tag (and push) them all: one image, or an index over several.

    ``engine``: the engine to use (default: the one at DOCKER_HOST or the default socket).
    """
    progress = Progress(json_lines=json_progress)
    try:
        with engine_errors(f"build {plans[0].recipe.name}"):
            engine = engine or connect()
            progress.note(engine.about().line)
            index = index_name(plans)
            if index is not None:
                progress.note(
                    f"{plans[0].recipe.name}: {len(plans)} platforms ({', '.join(p.recipe.platform for p in plans)}), "
                    "each built and gated before anything is tagged"
                )
            built = [build_checked(engine, plan, progress, nocache=nocache, keep_record=keep_record) for plan in plans]
            built = [replace(b, plan=tagged_plan(b.plan, index)) for b in built]
            return publish(
                engine, built, index, progress, push=push, report_path=report_path, force=force, signer=signer
            )
    except StackBuildError as exc:
        progress.failure(exc)
        raise


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
    engine: ContainerEngine,
    built: Sequence[PlatformImage],
    index: Optional[ImageName],
    progress: Progress,
    signer: Optional[Signer] = None,
) -> tuple[list[PlatformImage], Optional[str], dict]:
    """Push each image's tags, attest (and with ``signer``, sign) it by its digest, then put the index (if any,
    signed too); the images pushed, the index's digest, the index's signature record.

    What each push put in the registry is read back from it (:func:`push_tags`).
    """
    repository = built[0].plan.image.repository
    client = registry_client(engine, repository, progress)
    with progress.phase("push", repository):
        built = [replace(b, pushed=push_tags(engine, b.plan.image, b.image, b.platform, progress)) for b in built]
    with progress.phase("attest", ", ".join(str(b.plan.image.reference(digest=b.pushed_digest)) for b in built)):
        built = [
            replace(b, attestations=attest_image(engine, b.plan, b.image.id, b.pushed_digest, progress)) for b in built
        ]
    if signer is None:
        progress.note(UNSIGNED_NOTE, signed=False)
        built = [replace(b, signature=signature_record(None, [], [])) for b in built]
    else:
        with progress.phase("sign", ", ".join(str(b.pushed_digest) for b in built)):
            built = [
                replace(
                    b,
                    signature=signature_record(
                        signer, [b.pushed_digest], sign_image(signer, client, b.pushed_digest, progress)
                    ),
                )
                for b in built
            ]
    if index is None:
        return built, None, {}
    with progress.phase("index", ", ".join(index.references)):
        digest = push_index(client, index, {b.platform: b.pushed.platform_manifest for b in built}, progress)
        if signer is not None:
            sign_index(signer, client, digest, progress)
    return built, digest, signature_record(signer, [digest], [])


def publish(
    engine: ContainerEngine,
    built: Sequence[PlatformImage],
    index: Optional[ImageName],
    progress: Progress,
    *,
    push: bool,
    report_path: Optional[Path],
    force: bool,
    signer: Optional[Signer] = None,
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

    def report(
        images: Sequence[PlatformImage], index_digest: Optional[str] = None, signature: Optional[dict] = None
    ) -> dict:
        data = build_report(
            images,
            phases=progress.phase_seconds,
            engine=about,
            index=index,
            index_digest=index_digest,
            index_signature=signature,
        )
        written = write_report(data, report_path)
        progress.note(f"wrote {written} ({data['status']})", report=str(written))
        return data

    built_report = report(built)
    if not push:
        return built_report
    pushed, index_digest, signature = push_attested(engine, built, index, progress, signer)
    return report(pushed, index_digest, signature)


def run_push(
    plans: Sequence[BuildPlan],
    *,
    json_progress: bool = False,
    report_path: Optional[Path] = None,
    force: bool = False,
    signer: Optional[Signer] = None,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Push the local image(s) the plans' tags name, attested; several platforms get their index too.

    One platform's push completes the build report if it describes that
    image; several platforms' push writes the index's report.
    """
    progress = Progress(json_lines=json_progress)
    try:
        with engine_errors(f"push {plans[0].image.repository}"):
            engine = engine or connect()
            index = index_name(plans)
            built = [local_built(engine, tagged_plan(plan, index)) for plan in plans]
            if index is not None:
                return publish(
                    engine, built, index, progress, push=True, report_path=report_path, force=force, signer=signer
                )
            check_tags(engine, built, None, progress, force=force)
            (pushed,), _, _ = push_attested(engine, built, None, progress, signer)
            return _complete_report(pushed, progress, report_path)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


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
        "signature": pushed.signature,
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
            signature=pushed.signature,
        )
        report.setdefault("phase_seconds", {})["push"] = progress.phase_seconds["push"]
        result["report"] = str(write_report(report, report_path))
    return result


def run_index(
    plans: Sequence[BuildPlan],
    *,
    json_progress: bool = False,
    force: bool = False,
    signer: Optional[Signer] = None,
    engine: Optional[ContainerEngine] = None,
) -> dict:
    """Put the index over the platforms' images already in the registry under ``<pinned tag>-<arch>``
    (signed with ``signer``)."""
    progress = Progress(json_lines=json_progress)
    try:
        with engine_errors(f"index {plans[0].image.repository}"):
            return _index(plans, progress, force, engine, signer)
    except StackBuildError as exc:
        progress.failure(exc)
        raise


def _index(
    plans: Sequence[BuildPlan],
    progress: Progress,
    force: bool,
    engine: Optional[ContainerEngine],
    signer: Optional[Signer],
) -> dict:
    if len(plans) < 2:
        raise PushError(
            f"{plans[0].recipe.path}: one platform ({plans[0].recipe.platform}): `build --push` pushes its image "
            "under the recipe's tags; there is no index to put"
        )
    engine = engine or connect()
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
        if signer is not None:
            sign_index(signer, client, digest, progress)
    return {
        "image": name.repository,
        "tags": list(name.tags),
        "platforms": list(digests),
        "images": {p: {"pushed_digest": d, "config_digest": configs[p].id} for p, d in digests.items()},
        "pushed_digest": digest,
        "pushed_reference": str(name.reference(digest=digest)),
        "signature": signature_record(signer, [digest], []),
        "phase_seconds": dict(progress.phase_seconds),
    }
