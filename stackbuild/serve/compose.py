"""Recipe (+ command-line overrides) -> compose document -> YAML text -> file: a one-node recipe's file.

A compose file is data: the document (compose_service.py: one function for the single-node
service and for a node role's, told apart by a ``Service``) and the comment lines over it
(compose_header.py). Both are pure: no daemon, no files written, no subprocess.
``write_compose`` adds the checks (vLLM's serve parser, the Docker Compose binary) and writes the
file only when both pass or are skipped with a notice. The file is rendered and written for the
:class:`ServeTarget` the command built (``compose_document`` and ``render_compose`` build one from
:func:`serve_target`'s options). The multi-node files (multinode.py) are built from the same parts.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Optional

from stackbuild.core.output import COMPOSE_SUFFIX, LOCAL_COMPOSE_SUFFIX, repository_file
from stackbuild.core.recipe import REPO_ROOT, Recipe
from stackbuild.core.serve_args import baseline_argv, serve_argv
from stackbuild.serve.compose_header import compose_text, header, signed
from stackbuild.serve.compose_service import BASELINE, escape, service_document, single_node_service
from stackbuild.serve.generated import COMPOSE
from stackbuild.serve.target import ServeTarget, serve_target
from stackbuild.serve.writer import Document, notice, write_documents

COMPOSE_DIR = REPO_ROOT / "compose"


def target_document(target: ServeTarget, *, gpu_reservation: bool = True, baseline: bool = False) -> dict:
    """The single-node compose document as plain data (pure); ``baseline``: the one without speculation."""
    return service_document(target, single_node_service(target, baseline=baseline), gpu_reservation=gpu_reservation)


def target_text(target: ServeTarget, *, gpu_reservation: bool = True, baseline: bool = False) -> str:
    """The single-node compose file's text (pure)."""
    document = target_document(target, gpu_reservation=gpu_reservation, baseline=baseline)
    head = header(target.recipe, target.image, baseline=baseline, engine_api=target.written_for_api)
    head = signed(head, target.signature)
    return compose_text(target.recipe, target.image, head, document)


def compose_document(recipe: Recipe, *, gpu_reservation: bool = True, baseline: bool = False, **options: Any) -> dict:
    """:func:`target_document` of the target :func:`serve_target` builds from ``options`` (pure given ``image``)."""
    return target_document(serve_target(recipe, **options), gpu_reservation=gpu_reservation, baseline=baseline)


def render_compose(recipe: Recipe, *, gpu_reservation: bool = True, baseline: bool = False, **options: Any) -> str:
    """The compose file's text for :func:`serve_target`'s ``options`` (pure apart from reading the build report)."""
    return target_text(serve_target(recipe, **options), gpu_reservation=gpu_reservation, baseline=baseline)


def output_dir(recipe: Recipe) -> Path:
    """Where compose and deploy write without -o: compose/ for the repository's own recipes, the recipe's
    directory for any other (a copy elsewhere never overwrites the repository's files)."""
    return COMPOSE_DIR if repository_file(recipe.path, REPO_ROOT) else recipe.directory


def default_output(recipe: Recipe, *, local: bool = False, baseline: bool = False) -> Path:
    """The compose file without -o; ``local``: it holds this machine's values, so in compose/ it is the
    git-ignored ``<name>.local.compose.yaml``, never the committed file; ``baseline``:
    ``<name>.baseline.compose.yaml`` (``.baseline.local.compose.yaml``)."""
    directory = output_dir(recipe)
    suffix = LOCAL_COMPOSE_SUFFIX if local and directory == COMPOSE_DIR else COMPOSE_SUFFIX
    return directory / f"{recipe.name}{'.' + BASELINE if baseline else ''}{suffix}"


def write_compose(
    target: ServeTarget,
    *,
    output: Optional[Path] = None,
    validate: bool = True,
    gpu_reservation: bool = True,
    baseline: bool = False,
) -> dict:
    """Render, check with vLLM's parser and Docker Compose, then write. Nothing is written on failure.
    ``baseline``: the file of the same model without speculation (`compose --baseline`)."""
    from stackbuild.serve.validate import ComposeInvalid, check_compose_file, check_serve_args

    recipe, image = target.recipe, target.image
    text = target_text(target, gpu_reservation=gpu_reservation, baseline=baseline)
    service = single_node_service(target, baseline=baseline)
    argv = baseline_argv(recipe) if baseline else serve_argv(recipe)
    flag = "-o" if output else "compose"
    local = target.machine_values
    output = Path(output) if output else default_output(recipe, local=bool(local), baseline=baseline)

    def check(temps) -> dict[str, dict]:
        """Docker Compose's and vLLM's serve parser's verdicts (none without ``validate``)."""
        checks: dict[str, dict] = {}
        if not validate:
            return checks
        config = check_compose_file(temps[output], where=str(output))
        checks["compose_config"] = {"status": config.status, "detail": config.detail}
        if config.status == "skipped":
            notice(f"docker compose config check skipped: {config.detail}")
        else:
            # Compose's own reading of the command after interpolation; `config` prints a
            # literal dollar re-escaped as `$$`, so it must read back as the escaped argv.
            resolved = config.parsed["services"][service.name]["command"]
            if resolved != [escape(a) for a in argv]:
                raise ComposeInvalid(f"{output}: docker compose reads the command as {resolved!r}, not {argv!r}")
        serve = check_serve_args(argv, where=str(recipe.path))
        checks["serve_args"] = serve.as_dict()
        if serve.status == "skipped":
            notice(f"vLLM serve-parser check skipped: {serve.detail}")
        else:
            notice(f"checked: {serve.detail} accepts the command")
        if config.status != "skipped":
            notice(f"checked: docker compose config reads {output.name} and its command as written")
        return checks

    notices = list(image.notices)
    if flag == "compose" and output.name.endswith(LOCAL_COMPOSE_SUFFIX):
        committed = "" if baseline else f", not the committed {default_output(recipe).name}"
        notices.append(
            f"{', '.join(local)} hold(s) this machine's values: wrote {output.name} (git-ignored){committed}"
        )
    if baseline:
        notices.append(
            f"the baseline: {recipe.target.id} without speculation, service {service.name} of project "
            f"{service.project}, on {recipe.serving.host_ip}:{service.published_port} (`qualify --baseline-url`)"
        )
    checks = write_documents(
        recipe, [Document(output, text, partial(COMPOSE.wrote, recipe=recipe))], flag, check=check, notices=notices
    )
    return {
        "path": str(output),
        **image.summary(),
        "service": service.name,
        "project": service.project,
        "published_port": service.published_port,
        "command": argv,
        "checks": checks,
    }
