"""The image's commands: render the Dockerfile, lock the base, copy the oracle record, build, push, index.

Each parses its options, hands them to stackbuild/image/ (the plans, then the step that works on them)
and prints what comes back; push and index share one body.
"""

from __future__ import annotations

from pathlib import Path

import click

from stackbuild.cli.options import json_option, owner_option, recipe_option, repository_option
from stackbuild.cli.output import emit
from stackbuild.cli.signing_options import signer_of, signing_options
from stackbuild.core.recipe import load_recipe

force_option = click.option(
    "--force",
    is_flag=True,
    help="Re-point a pinned tag the registry already has for another image (logged); without it that push is refused.",
)


def unpinned_option(what: str):
    """--allow-unpinned, its help saying what this command does with it."""
    return click.option("--allow-unpinned", is_flag=True, help=f"When no base digest is pinned: {what}.")


UNPINNED_IMAGE = (
    "name the image as `build --allow-unpinned` named it (the tags computed without a base digest) instead of refusing"
)


platform_option = click.option(
    "--platform",
    help="Only this one of the recipe's platforms; for a multi-platform recipe, its image alone, "
    "tagged `<pinned tag>-<arch>` (`build.py index` then puts the index over them).",
)


@click.command()
@recipe_option
@owner_option
@repository_option("Name the image in")
@unpinned_option("render `FROM` the base tag instead of refusing (not reproducible)")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write the Dockerfile here instead of stdout: into an existing directory, over a file git tracks only "
    "when it is render's own output for this recipe (`-o README.md` stops).",
)
def render(recipe_path, owner, repository, allow_unpinned, output):
    """Print (or write) the Dockerfile rendered from the recipe."""
    from stackbuild.image.plan import make_plan
    from stackbuild.image.render import render as render_dockerfile
    from stackbuild.image.render import write_dockerfile

    plan = make_plan(load_recipe(recipe_path), owner=owner, repository=repository, allow_unpinned=allow_unpinned)
    text = render_dockerfile(plan)
    if output:
        write_dockerfile(output, text)
        echo_notices(plan)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


@click.command()
@recipe_option
@json_option
def lock(recipe_path, as_json):
    """Resolve the base tag to a digest (offering every platform of the recipe) and write the lock."""
    from stackbuild.image.base_lock import lock_base

    recipe = load_recipe(recipe_path)
    locked = lock_base(recipe, json_progress=as_json)
    listed = ", ".join(recipe.platforms)
    emit(
        as_json,
        {
            "lock": str(locked.path),
            "base": str(recipe.base.reference),
            "digest": locked.digest,
            "platform": recipe.platform,
            "platforms": list(recipe.platforms),
        },
        f"{recipe.base.reference} ({listed}) -> {locked.digest}\nwrote {locked.path}",
    )


@click.command()
@recipe_option
@owner_option
@repository_option("Read the built image from")
@unpinned_option(UNPINNED_IMAGE)
@click.option("--image", help="Take the record from this image (default: the recipe's pinned tag in the local engine).")
@click.option(
    "--platform",
    help="The platform whose record to copy (to recipe.oracle.<os>-<arch>.json): required for a multi-platform "
    "recipe, which keeps one record per platform.",
)
@json_option
def record(recipe_path, owner, repository, allow_unpinned, image, platform, as_json):
    """Copy the oracle record (vLLM's geometry answer) from a built image to recipe.oracle.json.

    Later builds ship it to the in-image gate, which then checks the simulator
    against it instead of importing vLLM, as long as the image's vLLM tree and
    packages are the ones it was recorded on. A multi-platform recipe keeps one
    record per platform, recipe.oracle.linux-arm64.json and so on.
    """
    from stackbuild.image.record_copy import copy_record

    copied = copy_record(
        load_recipe(recipe_path),
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        image=image,
        platform=platform,
    )
    key = copied.key
    emit(
        as_json,
        {"record": str(copied.path), "image": copied.image, "key": key},
        f"{copied.image}: vLLM tree {key['vllm_tree'][:16]}, Python {key['python']}, "
        f"{len(key['distributions'])} packages\nwrote {copied.path}",
    )


@click.command()
@recipe_option
@owner_option
@repository_option("Tag (and with --push, push to)")
@unpinned_option("build `FROM` the base tag instead of refusing (not reproducible)")
@json_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan (Dockerfile, tags, registry); no daemon needed. Exits as the build would where the host "
    "knows: 5 when the host-side gate fails.",
)
@click.option("--push/--no-push", default=False, help="Push the tags after a successful build.")
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the build report (JSON) here.",
)
@click.option(
    "--no-cache",
    "no_cache",
    is_flag=True,
    help="Run every step again, the gate included, instead of reusing the engine's cached layers.",
)
@click.option(
    "--keep-record",
    is_flag=True,
    help=(
        "Unless the gate checked against the recipe's recipe.oracle.json (a multi-platform recipe: that "
        "platform's, recipe.oracle.<os>-<arch>.json), write the image's oracle record there (before tagging)."
    ),
)
@click.option(
    "--stock",
    is_flag=True,
    help="Build FROM the base without the patch series (stock vLLM), gated as stock: the image to compare "
    "the patched one with. Its gate fails wherever the drafter does not fit; see --allow-gate-failure.",
)
@click.option(
    "--allow-gate-failure",
    is_flag=True,
    help="Keep and tag the image although the in-image gate's verdict is fail (its report and labels say so): "
    "for a comparison image, never with --push. A disagreement with vLLM still fails the build.",
)
@force_option
@platform_option
@signing_options
def build(
    recipe_path,
    owner,
    repository,
    allow_unpinned,
    as_json,
    dry_run,
    push,
    report_path,
    no_cache,
    keep_record,
    stock,
    allow_gate_failure,
    force,
    platform,
    signing_key,
    signing_key_env,
    signing_passphrase_file,
    sign_keyless,
    cosign_path,
):
    """Build (and optionally push) the image; nothing is tagged if any step fails.

    A recipe with several platforms builds and gates each in turn, tags each
    image `<pinned tag>-<arch>`, and with --push pushes them and puts an OCI
    image index over them under the recipe's tags.

    --dry-run prints the plan (base, tags, labels, Dockerfile) with the host-side
    gate's verdict; the build itself leaves the decision to the gate in the image,
    against the vLLM installed there. The check a CI runs on the host is
    `build.py geometry`.
    """
    from geometry import Behaviour
    from stackbuild.image.platform_plans import build_plans

    recipe = load_recipe(recipe_path)
    signer = signer_of(signing_key, signing_key_env, signing_passphrase_file, sign_keyless, cosign_path, push)
    plans = build_plans(
        recipe,
        platform,
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        push=push,
        behaviour=Behaviour.of_stock_flag(stock),
        gate_failure_allowed=allow_gate_failure,
    )
    plan = plans[0]
    echo_notices(plan)
    if dry_run:
        from stackbuild.image.dry_run import dry_run as dry_run_summary

        summary = dry_run_summary(plans)
        emit(as_json, summary.data, summary.text)
        if summary.refusal is not None:  # the plan shown, the dry run ends as the build would
            raise summary.refusal
        return
    from stackbuild.image.pipeline import run_build

    report = run_build(
        plans,
        push=push,
        report_path=report_path,
        json_progress=as_json,
        nocache=no_cache,
        keep_record=keep_record,
        force=force,
        signer=signer,
    )
    built = report.get("images") or {plan.recipe.platform: report}
    emit(
        as_json,
        report,
        "\n".join(f"built {image['image_id']} ({platform})" for platform, image in built.items())
        + (f"\npushed {report['pushed_digest']}" if report.get("pushed_digest") else ""),
    )


@click.command()
@recipe_option
@owner_option
@repository_option("Push to")
@unpinned_option(UNPINNED_IMAGE)
@json_option
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Build report to complete with the pushed digest (default out/build-report.json).",
)
@force_option
@signing_options
def push(
    recipe_path,
    owner,
    repository,
    allow_unpinned,
    as_json,
    report_path,
    force,
    signing_key,
    signing_key_env,
    signing_passphrase_file,
    sign_keyless,
    cosign_path,
):
    """Push the tags of an image built from this recipe and attach its SBOM and provenance
    (credentials from `docker login`); with a signing key, sign them (cosign, sigstore format)."""
    from stackbuild.image.pipeline import run_push

    signer = signer_of(signing_key, signing_key_env, signing_passphrase_file, sign_keyless, cosign_path, True)
    _publish(
        run_push,
        recipe_path,
        owner,
        repository,
        allow_unpinned,
        as_json,
        report_path=report_path,
        force=force,
        signer=signer,
    )


@click.command()
@recipe_option
@owner_option
@repository_option("Push the index to")
@unpinned_option(UNPINNED_IMAGE)
@json_option
@force_option
@signing_options
def index(
    recipe_path,
    owner,
    repository,
    allow_unpinned,
    as_json,
    force,
    signing_key,
    signing_key_env,
    signing_passphrase_file,
    sign_keyless,
    cosign_path,
):
    """Put the OCI image index over a multi-platform recipe's pushed images under its tags.

    Each platform's image must be in the registry under `<pinned tag>-<arch>`
    (`build --platform P --push` on a machine of that platform); `build --push`
    of all platforms does this itself. With a signing key (or --sign-keyless) the index's
    digest is signed.
    """
    from stackbuild.image.pipeline import run_index

    signer = signer_of(signing_key, signing_key_env, signing_passphrase_file, sign_keyless, cosign_path, True)
    _publish(run_index, recipe_path, owner, repository, allow_unpinned, as_json, force=force, signer=signer)


def _publish(run, recipe_path, owner, repository, allow_unpinned, as_json, **options) -> None:
    """push's and index's one body: every platform's plan of the built image, published by ``run``."""
    from stackbuild.image.platform_plans import publish_plans

    plans = publish_plans(load_recipe(recipe_path), owner=owner, repository=repository, allow_unpinned=allow_unpinned)
    result = run(plans, json_progress=as_json, **options)
    emit(as_json, result, f"pushed {', '.join(plans[0].image.references)} -> {result['pushed_digest']}")


def echo_notices(plan) -> None:
    """The plan's notices (stand-in owner, placeholder in the source label) on stderr."""
    for line in plan.notices():
        click.echo(line, err=True)
