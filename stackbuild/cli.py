"""The command line: build, pin, check, push and serve a vLLM overlay image from a stack recipe.

Run as ``python build.py COMMAND`` from the checkout. Every command, option and exit code is in
docs/cli.md, which tests/cli_reference.py writes from this module's help texts and
stackbuild/command_exits.py.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from geometry.errors import one_line
from geometry.fit_keys import KEEPABLE
from stackbuild.command_exits import COMMAND_EXITS
from stackbuild.core.errors import InternalError, StackBuildError
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

recipe_option = click.option(
    "--recipe",
    "recipe_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_RECIPE,
    show_default=str(DEFAULT_RECIPE.relative_to(DEFAULT_RECIPE.parents[2])),
    help="Stack recipe (YAML) to work from.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")


def _checked_owner(ctx, param, value):
    """--owner or IMAGE_OWNER, refused (exit 2) naming which one gave it, with the namespace it probably means."""
    if value is None:
        return None
    from click.core import ParameterSource

    from stackbuild.core.naming import OWNER_FROM_ENVIRONMENT, check_owner

    from_env = ctx.get_parameter_source(param.name) == ParameterSource.ENVIRONMENT
    return check_owner(value, OWNER_FROM_ENVIRONMENT if from_env else "--owner")


owner_option = click.option(
    "--owner",
    envvar="IMAGE_OWNER",
    callback=_checked_owner,
    help="Registry namespace for {owner} in image.repository and image.source (env IMAGE_OWNER).",
)


def repository_option(what: str):
    """--repository, its help saying what this command does with it."""
    return click.option(
        "--repository",
        help=f"{what} this repository instead of the recipe's image.repository (e.g. 127.0.0.1:5000/me/glm).",
    )


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


JSON_PRINTED = "json_printed"  # ctx.meta: the command has printed its one JSON object
WANTS_JSON = "wants_json"  # ctx.meta: --json is among the command's own arguments


class Cli(click.Group):
    """Turns every failure into one line on stderr and its exit code (stackbuild/core/errors.py);
    verify's findings follow its line, one per line.

    Usage errors (click's) exit 2; an exception nobody expected is an internal error (exit 70)
    asking for a report, never a traceback.
    """

    def make_context(self, info_name, args, parent=None, **extra):
        wants_json = "--json" in _before_separator(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
            ctx.meta[WANTS_JSON] = wants_json
            return ctx
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare `build.py`: its help, not an error
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:  # an option of build.py itself
            click.echo(f"error: {info_name}: {one_line(exc.format_message())} (see {info_name} --help)", err=True)
            sys.exit(exc.exit_code)

    def invoke(self, ctx):
        wants_json = ctx.meta.get(WANTS_JSON, False)
        try:
            return super().invoke(ctx)
        except StackBuildError as exc:
            if exc.lists_findings:
                head, *findings = str(exc).splitlines() or [""]
                click.echo("\n".join([f"error: {one_line(head)}", *(f"  {one_line(f)}" for f in findings)]), err=True)
            else:
                click.echo(f"error: {one_line(exc)}", err=True)
            _json_failure(ctx, wants_json, exc.exit_code, str(exc).splitlines()[0] if str(exc) else "")
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:
            sub = exc.ctx.command_path if exc.ctx else ctx.command_path
            click.echo(f"error: {sub}: {one_line(exc.format_message())} (see {sub} --help)", err=True)
            _json_failure(ctx, wants_json, exc.exit_code, f"{sub}: {exc.format_message()}")
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
            error = InternalError(
                f"internal error: {type(exc).__name__}: {one_line(exc)[:300]}; please report it with the command line"
            )
            click.echo(f"error: {error}", err=True)
            _json_failure(ctx, wants_json, error.exit_code, str(error))
            ctx.exit(error.exit_code)


def _before_separator(args) -> list[str]:
    """The arguments before ``--`` (what follows is passed on, e.g. preflight's serve args)."""
    args = list(args)
    return args[: args.index("--")] if "--" in args else args


def _json_failure(ctx, wants_json: bool, exit_code: int, error: str) -> None:
    """With ``--json``, a failure is still one object on stdout: ``{ok, exit_code, error}``, unless
    the command printed its own (the geometry table, the pre-flight's checks) before failing."""
    if wants_json and not ctx.meta.get(JSON_PRINTED):
        click.echo(
            json.dumps({"ok": False, "exit_code": exit_code, "error": one_line(error)}, indent=2, sort_keys=True)
        )


def _print_version(ctx, _param, value) -> None:
    if not value or ctx.resilient_parsing:
        return
    from stackbuild.core.version import versions

    click.echo(versions().text())
    ctx.exit(0)


def owner_notice(plan) -> None:
    """Say when the image name carries the stand-in owner (such an image is never pushed), and when the
    source label still holds a placeholder (a push refuses it)."""
    from stackbuild.core import labels
    from stackbuild.core.naming import SOURCE_PLACEHOLDER_RE

    if plan.image.owner_missing:
        click.echo(
            f"notice: no image owner (--owner, IMAGE_OWNER): naming the image {plan.image.repository}; "
            "it stays in this engine (a push needs an owner)",
            err=True,
        )
    source = plan.labels.get(labels.OCI_SOURCE, "")
    found = SOURCE_PLACEHOLDER_RE.search(source)
    if found:
        fill = "--owner or IMAGE_OWNER fills it" if found.group(0) == "{owner}" else "write the repository's URL"
        click.echo(
            f"warning: label {labels.OCI_SOURCE} is {source}, the placeholder {found.group(0)} unfilled "
            f"(image.source; {fill}; a push refuses it)",
            err=True,
        )


def print_json(data: dict) -> None:
    """A command's one JSON object on stdout (a failure after it adds no second one)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True))
    click.get_current_context().meta[JSON_PRINTED] = True


def emit(as_json: bool, data: dict, text: str) -> None:
    if as_json:
        print_json(data)
    else:
        click.echo(text)


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="This project's version, the checkout's commit and the vLLM release the gate models.",
)
def cli() -> None:
    """Build the GLM-5.3-Flash + DFlash2 vLLM image from a stack recipe, check its KV geometry,
    push it, and generate and check what serves it.

    It reads the recipes, Dockerfile.j2 and the git revision from this checkout (`make install`
    installs it into the venv, editable). A bare `build.py` prints this help.

    `--json` writes one machine-readable object on stdout (progress stays on stderr), on failure
    too: `{"ok": false, "exit_code": N, "error": "..."}` unless the command printed its own object
    first (geometry's report, preflight's checks, which carry the verdict).

    An error is one line on stderr (`error: ...`) naming the file, key, flag, step or patch at
    fault, never a traceback, with a distinct exit code per kind; a value given by a flag or the
    environment is blamed on that flag or variable, with the fix when there is one (`--owner
    'Acme'`: use 'acme'). A step that takes more than a second says so on stderr before it starts
    (compose and deploy import vLLM for the serve-parser check: 10-20 s); gate reasons that repeat
    for layers alike are one reason with their count (`[5x: also ... to ...]`).

    Nothing is written when a command fails (outputs go through a temporary file in the target
    directory), and nothing is tagged or pushed after a failed step. Generated files
    (`*.compose.yaml`, `*.k8s.yaml`) are never build inputs: nothing these commands write into a clean
    tree changes its pinned tag. The image's start-time pre-flight exits with the same codes as
    `build.py preflight` for the same faults.
    """


@cli.command()
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
    from stackbuild.core.output import check_output, write_text
    from stackbuild.image.plan import make_plan
    from stackbuild.image.render import render as render_dockerfile

    plan = make_plan(load_recipe(recipe_path), owner=owner, repository=repository, allow_unpinned=allow_unpinned)
    text = render_dockerfile(plan)
    if output:
        # A file render wrote for this recipe starts with the same first line ("# <recipe name>: vLLM ...").
        check_output(output, "-o", ours=lambda old: old.splitlines()[:1] == text.splitlines()[:1])
        write_text(output, text, "-o")
        owner_notice(plan)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command()
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


@cli.command()
@recipe_option
@owner_option
@repository_option("Read the built image from")
@unpinned_option(UNPINNED_IMAGE)
@click.option("--image", help="Take the record from this image (default: the recipe's pinned tag in the local engine).")
@json_option
def record(recipe_path, owner, repository, allow_unpinned, image, as_json):
    """Copy the oracle record (vLLM's geometry answer) from a built image to recipe.oracle.json.

    Later builds ship it to the in-image gate, which then checks the simulator
    against it instead of importing vLLM, as long as the image's vLLM tree and
    packages are the ones it was recorded on.
    """
    from stackbuild.image.engine import connect, engine_errors
    from stackbuild.image.oracle_record import save_from_image
    from stackbuild.image.plan import make_plan
    from stackbuild.image.platform_plans import recorded_image

    plan = make_plan(
        load_recipe(recipe_path),
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        read_oracle_record=False,
    )
    image = image or recorded_image(plan)
    with engine_errors(f"record from {image}"):
        path, kept = save_from_image(connect(), image, plan.recipe, plan.gate_input, plan.payload_dir)
    key = kept["key"]
    emit(
        as_json,
        {"record": str(path), "image": image, "key": key},
        f"{image}: vLLM tree {key['vllm_tree'][:16]}, Python {key['python']}, "
        f"{len(key['distributions'])} packages\nwrote {path}",
    )


def _contexts(_ctx, _param, value):
    """``--context 8192,32K,1M`` -> token counts (K = 1,024 tokens, M = 1,048,576)."""
    if value is None:
        return None
    out = []
    for item in value.split(","):
        text = item.strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text[:-1] if scale != 1 else text
        if not digits.isdigit() or int(digits) < 1:
            raise click.BadParameter(f"{item.strip()!r} is not a positive token count (e.g. 8192, 32K, 1M)")
        out.append(int(digits) * scale)
    return out


@cli.command()
@recipe_option
@json_option
@click.option("--stock", is_flag=True, help="Model stock vLLM 0.33.0 (no overlay) instead of the patched tree.")
@click.option(
    "--context",
    "contexts",
    callback=_contexts,
    default=None,
    metavar="N[,N...]",
    help="Request lengths for 'requests at once' (e.g. 8192,32K,1M); default 32K, 128K, 1M up to "
    "max_model_len, and max_model_len.",
)
def geometry(recipe_path, as_json, stock, contexts):
    """Run the KV-geometry simulator and gate for a recipe on the host."""
    from geometry.behaviours import compare, comparison_lines, figures
    from geometry.concurrency import ContextTooLong, concurrency
    from geometry.table import render_text, to_json
    from stackbuild.core.gate import recipe_geometry, refuse_failed

    recipe = load_recipe(recipe_path)
    runs = {b: recipe_geometry(recipe, vllm_behaviour=b) for b in ("stock", "overlay")}
    try:
        at_once = {b: concurrency(r.report, r.inputs, contexts) for b, r in runs.items()}
    except ContextTooLong as exc:
        raise click.BadParameter(str(exc), param_hint="--context") from None
    judged = "stock" if stock else "overlay"
    run = runs[judged]
    versus = compare(*(figures(runs[b].report, runs[b].verdict, at_once[b]) for b in ("stock", "overlay")))
    if as_json:
        print_json({**to_json(run.report, run.verdict, at_once[judged]), "stock_vs_overlay": asdict(versus)})
    else:
        click.echo("\n".join([render_text(run.report, run.verdict, at_once[judged]), *comparison_lines(versus)]))
    refuse_failed(recipe, run, rest="the verdict above lists all" if not as_json else "the report's reasons list all")


@cli.command()
@recipe_option
@json_option
@click.option("--stock", is_flag=True, help="Model stock vLLM 0.33.0 (no overlay) instead of the patched tree.")
@click.option(
    "--keep",
    "keep",
    multiple=True,
    type=click.Choice(KEEPABLE),
    help="Hold this recipe key at the recipe's value (repeatable), e.g. serving.drafter_kv_cache_dtype "
    "to see only settings that keep the drafter's KV precision.",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    type=click.Choice(KEEPABLE),
    help="Search this recipe key too (repeatable); serving.enable_prefix_caching is held at the recipe's "
    "value unless allowed, since turning prefix caching off loses every cache hit.",
)
def fit(recipe_path, as_json, stock, keep, allow):
    """Search block size, drafter KV dtype, prefix caching and num_speculative_tokens for settings that
    pass the geometry gate; print the best few and the recipe lines to change.

    Settings rank by the requests of max_model_len tokens that fit at once, then the KV capacity,
    then the prefix-cache hit alignment; a setting another one beats or matches on every measure
    shown (requests, capacity, hit alignment, drafter KV precision, lines to change) is left out.
    Prefix caching stays as the recipe has it unless --allow serving.enable_prefix_caching."""
    from geometry.fit import render_text, to_json
    from stackbuild.core.fit import fit_recipe, refuse_unfit

    recipe = load_recipe(recipe_path)
    result = fit_recipe(recipe, stock=stock, keep=frozenset(keep), allow=frozenset(allow))
    if as_json:
        print_json(to_json(result))
    else:
        click.echo(render_text(result))
    refuse_unfit(recipe, result)


@cli.command()
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
        "Unless the gate checked against the recipe's recipe.oracle.json, write the image's oracle record there "
        "(before tagging)."
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
    from stackbuild.image.platform_plans import build_plans

    recipe = load_recipe(recipe_path)
    plans = build_plans(
        recipe,
        platform,
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        push=push,
        stock=stock,
        gate_failure_allowed=allow_gate_failure,
    )
    plan = plans[0]
    owner_notice(plan)
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
    )
    built = report.get("images") or {plan.recipe.platform: report}
    emit(
        as_json,
        report,
        "\n".join(f"built {image['image_id']} ({platform})" for platform, image in built.items())
        + (f"\npushed {report['pushed_digest']}" if report.get("pushed_digest") else ""),
    )


@cli.command()
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
def push(recipe_path, owner, repository, allow_unpinned, as_json, report_path, force):
    """Push the tags of an image built from this recipe and attach its SBOM and provenance
    (credentials from `docker login`)."""
    from stackbuild.image.pipeline import run_push
    from stackbuild.image.platform_plans import publish_plans

    plans = publish_plans(load_recipe(recipe_path), owner=owner, repository=repository, allow_unpinned=allow_unpinned)
    result = run_push(plans, json_progress=as_json, report_path=report_path, force=force)
    emit(as_json, result, f"pushed {', '.join(plans[0].image.references)} -> {result['pushed_digest']}")


@cli.command()
@recipe_option
@owner_option
@repository_option("Push the index to")
@unpinned_option(UNPINNED_IMAGE)
@json_option
@force_option
def index(recipe_path, owner, repository, allow_unpinned, as_json, force):
    """Put the OCI image index over a multi-platform recipe's pushed images under its tags.

    Each platform's image must be in the registry under `<pinned tag>-<arch>`
    (`build --platform P --push` on a machine of that platform); `build --push`
    of all platforms does this itself.
    """
    from stackbuild.image.pipeline import run_index
    from stackbuild.image.platform_plans import publish_plans

    plans = publish_plans(load_recipe(recipe_path), owner=owner, repository=repository, allow_unpinned=allow_unpinned)
    result = run_index(plans, json_progress=as_json, force=force)
    emit(as_json, result, f"pushed {', '.join(plans[0].image.references)} -> {result['pushed_digest']}")


@cli.command()
@recipe_option
@owner_option
@repository_option("Serve the image from")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Compose file to write, in an existing directory; a file git tracks is replaced only when it is "
    "compose's own output for this recipe. Default: compose/<recipe name>.compose.yaml for a recipe git tracks "
    "in this checkout, else next to the recipe; with --models-dir, --port or --gpus, the git-ignored "
    "<recipe name>.local.compose.yaml instead, never the committed file. For a multi-node recipe, the existing "
    "directory to write one file per node role into (default: compose/).",
)
@click.option(
    "--models-dir",
    help="Host directory holding the model snapshots, mounted read-only at the recipe's mount point (default: "
    "the mount point itself, e.g. /models, which must exist on the host: the file never creates it).",
)
@click.option(
    "--port", type=int, help="Host port to publish on serving.host_ip (single-node recipes; default: serving.port)."
)
@click.option("--gpus", help="Comma-separated GPU ids to reserve (default: any, count = TP size / nodes).")
@click.option("--digest", help="Image digest to pin in the compose file (default: from the last build report).")
@click.option(
    "--baseline",
    is_flag=True,
    help="Write the baseline's file instead: the same image, model and flags without --speculative-config, "
    "service vllm-baseline of project <recipe name>-baseline, published on serving.port + 1 (--port to choose), "
    "for `qualify --baseline-url`; <recipe name>.baseline.compose.yaml (.baseline.local.compose.yaml). "
    "One-node recipes.",
)
@json_option
def compose(recipe_path, owner, repository, output, models_dir, port, gpus, digest, baseline, as_json):
    """Write the compose file that serves the image with `docker compose up` (one per node role
    when the recipe spans several machines), or with --baseline the same model without speculation."""
    recipe = load_recipe(recipe_path)
    if baseline and recipe.serving.nodes > 1:
        raise click.UsageError(
            f"--baseline: recipe {recipe.name} serves on {recipe.serving.nodes} nodes; the baseline is one "
            "machine's file (a one-node recipe)"
        )
    if recipe.serving.nodes > 1:
        from stackbuild.serve.multinode import write_role_files

        result = write_role_files(
            recipe,
            output_dir=output,
            owner=owner,
            repository=repository,
            models_dir=models_dir,
            port=port,
            gpus=gpus,
            digest=digest,
        )
        emit(as_json, result, "wrote " + ", ".join(result["paths"].values()))
        return
    if output is not None and output.is_dir():  # an output path (exit 15), not a usage error
        from stackbuild.core.errors import OutputError

        raise OutputError(f"-o {output}: is a directory; a one-node recipe writes one compose file: give its file name")
    from stackbuild.serve.compose import write_compose

    result = write_compose(
        recipe,
        output=output,
        owner=owner,
        repository=repository,
        models_dir=models_dir,
        port=port,
        gpus=gpus,
        digest=digest,
        baseline=baseline,
    )
    emit(as_json, result, f"wrote {result['path']}")


@cli.command()
@click.option(
    "--target", "target", type=click.Choice(["k8s"]), required=True, help="What to deploy on (k8s: Kubernetes)."
)
@recipe_option
@owner_option
@repository_option("Deploy the image from")
@click.option(
    "-o",
    "--output",
    "output_dir",
    type=click.Path(path_type=Path),
    help="Existing directory to write <recipe name>.k8s.yaml into (default: compose/ for a recipe git tracks "
    "in this checkout, else the recipe's directory).",
)
@click.option(
    "--models-host-path",
    help="Node directory holding the model snapshots, mounted read-only (default: the recipe's models directory).",
)
@click.option("--models-pvc", help="PersistentVolumeClaim holding the model snapshots instead of a host path.")
@click.option(
    "--ifname", default="eth0", show_default=True, help="NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME in multi-node pods."
)
@click.option("--namespace", help="metadata.namespace of every object (default: none, kubectl's current).")
@click.option(
    "--api-key-secret",
    help="Secret whose key 'api-key' becomes the API server's VLLM_API_KEY "
    "(optional: no Secret, no key; default: <recipe name>-api-key).",
)
@click.option(
    "--image-pull-secret",
    "image_pull_secrets",
    multiple=True,
    help="imagePullSecrets entry (repeatable) for a private registry, e.g. a GHCR package (default: none).",
)
@click.option("--digest", help="Image digest to pin (default: from the last build report).")
@json_option
def deploy(
    target,
    recipe_path,
    owner,
    repository,
    output_dir,
    models_host_path,
    models_pvc,
    ifname,
    namespace,
    api_key_secret,
    image_pull_secrets,
    digest,
    as_json,
):
    """Write Kubernetes manifests: a Deployment (one machine) or a LeaderWorkerSet (serving.nodes > 1),
    and a Service."""
    from stackbuild.serve.k8s import write_manifests

    result = write_manifests(
        load_recipe(recipe_path),
        output_dir=output_dir,
        owner=owner,
        repository=repository,
        digest=digest,
        models_host_path=models_host_path,
        models_pvc=models_pvc,
        ifname=ifname,
        namespace=namespace,
        api_key_secret=api_key_secret,
        image_pull_secrets=image_pull_secrets,
    )
    emit(as_json, result, f"wrote {result['path']} ({', '.join(result['kinds'])})")


@cli.command(context_settings={"ignore_unknown_options": True})
@recipe_option
@click.option(
    "--models-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Host directory holding the checkpoints, laid out as `compose --models-dir` mounts it.",
)
@click.option(
    "--role",
    type=click.Choice(["leader", "worker"]),
    default=None,
    help="Multi-node recipe: check this role's command only (default: the leader's and a worker's).",
)
@click.option(
    "--leader-address",
    default="127.0.0.1",
    show_default=True,
    help="Multi-node recipe: the leader's address as the role commands receive it.",
)
@click.option(
    "--node-rank",
    type=int,
    default=1,
    show_default=True,
    help="Multi-node recipe: the worker's node rank (1 to serving.nodes - 1).",
)
@json_option
@click.argument("extra_args", nargs=-1, type=click.UNPROCESSED)
def preflight(recipe_path, models_dir, role, leader_address, node_rank, as_json, extra_args):
    """Run the image's start-time pre-flight on the host: the compose command (plus any
    serve args after `--`) against the configs under --models-dir.

    The same code the container's entrypoint runs: the fast path when nothing differs
    from what the build checked, otherwise vLLM's serve parser, the simulator, the gate
    and the cross-check against this interpreter's vLLM. A multi-node recipe's leader and
    worker commands are checked as the generated compose files start them.
    """
    from stackbuild.serve.preflight_host import check_on_host

    recipe = load_recipe(recipe_path)
    given = click.get_current_context().get_parameter_source
    explicit = [
        f"--{name.replace('_', '-')}"
        for name in ("role", "leader_address", "node_rank")
        if given(name) is click.core.ParameterSource.COMMANDLINE
    ]
    result = check_on_host(
        recipe,
        models_dir,
        role=role,
        leader_address=leader_address,
        node_rank=node_rank,
        explicit_role_options=tuple(explicit),
        extra_args=tuple(extra_args),
    )
    if as_json:
        print_json(result.to_json())
    else:
        for line in result.report_lines():
            click.echo(line)
    result.raise_if_failed()


@cli.command()
@recipe_option
@click.option(
    "--models-dir",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Host directory holding the checkpoints, laid out as `compose --models-dir` mounts it.",
)
@json_option
def pin(recipe_path, models_dir, as_json):
    """Write the snapshot commits and config sha256s of the checkpoints under --models-dir into the recipe
    (target/drafter revision and config_sha256), editing only those lines."""
    from stackbuild.serve.pin import pin as pin_recipe

    result = pin_recipe(recipe_path, models_dir)
    text = "; ".join(f"{p['role']}.revision {p['revision']}" for p in result["pins"])
    emit(as_json, result, f"{'pinned' if result['changed'] else 'already pinned'} in {result['recipe']}: {text}")


@cli.command()
@click.argument("image")
@recipe_option
@json_option
def verify(image, recipe_path, as_json):
    """Pull IMAGE@DIGEST, compare its labels with the recipe, re-run the gate inside it,
    check its SBOM and provenance."""
    from stackbuild.image.verify import image_by_digest, verify_image

    image_by_digest(image)
    result = verify_image(image, load_recipe(recipe_path), json_progress=as_json)
    emit(as_json, result, "\n".join([f"{image}: {result['verdict']}", *qualification_lines(result)]))


def qualification_lines(result: dict) -> list[str]:
    """verify's text lines for the qualifications it found (the image's, or the index's and each platform's)."""
    from stackbuild.core.qualification_record import summary_line

    scopes = [("", result.get("qualifications") or [])]
    scopes += [
        (f"{platform}: ", entry.get("qualifications") or [])
        for platform, entry in (result.get("platforms") or {}).items()
    ]
    lines = [prefix + summary_line(q) for prefix, found in scopes for q in found]
    return lines or ["no qualifications (`build.py qualify --attach IMAGE@DIGEST` adds one)"]


@cli.command()
@click.option("--url", required=True, help="The running vLLM OpenAI server (e.g. http://127.0.0.1:8000).")
@recipe_option
@click.option(
    "--model",
    help="Model name to request (default: the recipe's serving.served_model_name, or the one the server lists).",
)
@click.option(
    "--stock",
    is_flag=True,
    help="The server runs stock vLLM (no overlay): hold its KV cache to the gate's stock figures "
    "(default: the overlay, which every image `build.py build` makes applies).",
)
@click.option(
    "--server-log",
    metavar="FILE",
    help="The server's log (`-`: standard input, e.g. `docker compose logs vllm | ... --server-log -`): its "
    "`kv cache group sizes` and `KV cache size: N tokens` are held to the gate's too.",
)
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Environment variable holding the server's API key (never on the command line; default: VLLM_API_KEY "
    "when it is set, as the compose env file names it; else no key).",
)
@click.option("--baseline-url", help="The same model served without speculation, for the speed-up.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for qualify.json and the figure qualify.png (made when missing).",
)
@click.option(
    "--max-tokens", type=click.IntRange(1, 1 << 16), default=256, show_default=True, help="Output tokens per request."
)
@click.option("--runs", type=click.IntRange(1, 1000), default=3, show_default=True, help="Measured runs per prompt.")
@click.option("--warmup", type=click.IntRange(0, 100), default=1, show_default=True, help="Warm-up runs per prompt.")
@click.option(
    "--ready-timeout",
    type=click.FloatRange(0, 86400),
    default=300,
    show_default=True,
    help="Seconds to wait for the first streamed token of a generation.",
)
@click.option(
    "--prefix-blocks",
    type=click.IntRange(1, 1024),
    default=2,
    show_default=True,
    help="k: the prefix-cache probe's shared prefix is k x the hit alignment.",
)
@click.option(
    "--allow-degenerate",
    is_flag=True,
    help="Untrained (dummy or random) weights: report output that repeats one short cycle of tokens, and drafts "
    "that are almost never accepted, as warnings, not failures (the recipe's min_acceptance still applies).",
)
@click.option(
    "--attach",
    "attach_to",
    metavar="IMAGE@DIGEST",
    help="Push the result, pass or fail (its verdict inside), as an in-toto statement referring to this "
    "image (REPOSITORY@sha256:...), as the SBOM and provenance are; credentials from `docker login`.",
)
@json_option
def qualify(
    url,
    recipe_path,
    model,
    stock,
    server_log,
    api_key_env,
    baseline_url,
    out_dir,
    max_tokens,
    runs,
    warmup,
    ready_timeout,
    prefix_blocks,
    allow_degenerate,
    attach_to,
    as_json,
):
    """Measure a running deployment as the published numbers were measured: its KV cache against the
    gate's, readiness, end-to-end output tok/s (stream false) and TTFT/TPOT/ITL (streamed), speculative
    decoding and prefix caching from /metrics, output sanity.

    Exit 0 when everything holds, 30 when the server's KV cache is not the gate's for the recipe, 24
    when the deployment misbehaves, 25 when a figure is below the recipe's qualify.min_* expectations
    (20-23: the server cannot be measured). With --attach,
    the image's manifest is looked up before anything is measured (2: not a digest reference;
    7-9: the registry), and the record is attached whatever the verdict."""
    from stackbuild.serve.qualify.cli_support import run_qualify
    from stackbuild.serve.qualify.run import raise_if_failed

    target = None
    if attach_to is not None:
        from stackbuild.image.qualification import target_of

        target = target_of(attach_to)
    result, text, written = run_qualify(
        url=url,
        recipe_path=recipe_path,
        model=model,
        stock=stock,
        server_log=server_log,
        api_key_env=api_key_env,
        baseline_url=baseline_url,
        out_dir=out_dir,
        max_tokens=max_tokens,
        runs=runs,
        warmup=warmup,
        ready_timeout=ready_timeout,
        prefix_blocks=prefix_blocks,
        allow_degenerate=allow_degenerate,
    )
    click.echo(text, err=True)
    for path in written:
        click.echo(f"wrote {path}", err=True)
    data = result.to_json()
    if target is not None:
        from stackbuild.image.qualification import attach_record, attached_json
        from stackbuild.serve.qualify.record import qualification_record

        record = qualification_record(result, recipe_path, target.reference)
        attached = attach_record(target, record)
        click.echo(
            f"attached qualification {attached.digest} ({record.verdict}) to {target.reference} ({attached.via})",
            err=True,
        )
        data["attached"] = attached_json(target, attached, record)
    if as_json:
        print_json(data)
    raise_if_failed(result)


# Each command's help ends with the exit codes it returns (stackbuild/command_exits.py); a command
# without an entry there stops the import.
for _name, _command in cli.commands.items():
    _command.epilog = COMMAND_EXITS[_name].epilog()
cli.epilog = "Each command's --help lists the exit codes it returns; all of them: docs/cli.md."


def main() -> None:
    """Entry point of ``build.py``."""
    cli()
