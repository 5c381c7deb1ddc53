"""Recipe (+ command-line overrides) -> compose document -> YAML text -> file.

A compose file is data: the document (``service_document``: one function for the
single-node service and for a node role's, told apart by a ``Service``) and the
comment lines over it (``Header``). ``compose_document`` and ``render_compose`` are
pure: no daemon, no files written, no subprocess. ``write_compose`` adds the checks
(vLLM's serve parser, the Docker Compose binary) and writes the file only when both
pass or are skipped with a notice. The multi-node files (multinode.py) are built from
the same parts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional

from stackbuild.core.errors import ComposeOverrideError
from stackbuild.core.labels import DRAFTER_ID, DRAFTER_LICENSE, DRAFTER_WEIGHTS, IMAGE_PINNED, RECIPE_NAME, TARGET_ID
from stackbuild.core.naming import OWNER_VARIABLE
from stackbuild.core.output import COMPOSE_SUFFIX, LOCAL_COMPOSE_SUFFIX, repository_file
from stackbuild.core.recipe import REPO_ROOT, Recipe
from stackbuild.core.serve_args import baseline_argv, ranks_per_node, serve_argv
from stackbuild.serve.generated import COMPOSE
from stackbuild.serve.health import API_KEY_VARIABLE, readiness_command
from stackbuild.serve.image_pin import ImagePin, resolve_image
from stackbuild.serve.writer import Document, notice, write_documents
from stackbuild.serve.yaml_text import dump_yaml

COMPOSE_DIR = REPO_ROOT / "compose"
SERVICE = "vllm"
# `compose --baseline`: the same model without speculation, a project and service of its own beside the
# recipe's, published on the port after serving.port unless --port says otherwise.
BASELINE = "baseline"
BASELINE_SERVICE = f"{SERVICE}-{BASELINE}"
CACHE_MOUNT = "/root/.cache"
# Where vLLM, torch.compile (Inductor) and Triton keep compiled kernels; all on one named volume.
CACHE_ENV = {
    "VLLM_CACHE_ROOT": f"{CACHE_MOUNT}/vllm",
    "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
    "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
}
# A 1M-context model loads weights, compiles and captures graphs before /health answers.
HEALTH_START_PERIOD = "30m"
LICENCE_NAMES = {"CC-BY-NC-ND-4.0": "CC BY-NC-ND 4.0 (non-commercial, no derivatives)"}
# The licences whose terms forbid commercial use (the header and the labels' comment say so).
NON_COMMERCIAL_LICENCES = frozenset({"CC-BY-NC-ND-4.0"})
GPU_ID_RE = re.compile(r"^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$")


def escape(value: str) -> str:
    """Compose interpolates ``$``: a literal dollar is ``$$``."""
    return value.replace("$", "$$")


def parse_gpu_ids(gpus: str) -> tuple[str, ...]:
    """``--gpus``: distinct GPU indices or UUIDs (GPU-..., MIG-...), comma-separated."""
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids or any(not GPU_ID_RE.match(g) for g in ids):
        raise ComposeOverrideError(f"--gpus: expected comma-separated GPU indices or UUIDs, got {gpus!r}")
    if len(set(ids)) != len(ids):
        raise ComposeOverrideError(f"--gpus: {gpus!r} names a GPU twice")
    return tuple(ids)


def reserve_gpus(recipe: Recipe, gpus: Optional[str]) -> dict:
    """The service's ``deploy``: the GPUs of one machine's ranks, any ``count`` of them or the ``--gpus`` ids."""
    device: dict[str, Any] = {"driver": "nvidia"}
    count = ranks_per_node(recipe)
    if gpus:
        ids = parse_gpu_ids(gpus)
        if len(ids) != count:
            why = (
                f"serving.tensor_parallel_size is {count}"
                if recipe.serving.nodes == 1
                else f"each node runs {count} rank(s) (serving.tensor_parallel_size / serving.nodes)"
            )
            raise ComposeOverrideError(f"--gpus: {len(ids)} GPU(s) given but {why}")
        device["device_ids"] = list(ids)
    else:
        device["count"] = count
    device["capabilities"] = ["gpu"]
    return {"resources": {"reservations": {"devices": [device]}}}


def _host_models_dir(models_dir: Optional[str], mount: str) -> str:
    if models_dir is None:
        return mount
    if not models_dir.strip():
        raise ComposeOverrideError("--models-dir: empty path")
    return os.path.abspath(os.path.expanduser(models_dir))


def project_name(recipe: Recipe) -> str:
    """The compose project name: the recipe's name in the characters Compose allows."""
    name = re.sub(r"[^a-z0-9_-]+", "-", recipe.name.lower()).strip("-_")
    return name or "glm53"


def env_file_name(recipe: Recipe) -> str:
    return f"{recipe.name}.env"


# Where the health check asks /health when the API server binds every address.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Service:
    """What one compose file runs: the single-node service, or one node role's (multinode.py)."""

    name: str  # the service's key: SERVICE, or the node role
    project: str  # the compose project name
    command: tuple[str, ...]  # as Compose reads it: literals escaped, a slot may hold a Compose variable
    published_port: Optional[int]  # the host port published on serving.host_ip; None: host networking
    probe_host: Optional[str]  # the address the health check asks /health at; None: no check (no API server)
    environment: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({})
    )  # Compose text, after the recipe's
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # after the recipe's


def single_node_service(recipe: Recipe, *, port: Optional[int] = None, baseline: bool = False) -> Service:
    """The one service of a single-node recipe: the serve argv, its port published on serving.host_ip.
    ``baseline``: the argv without speculation, as service BASELINE_SERVICE of project `<name>-baseline`,
    published on serving.port + 1 by default."""
    if port is not None and not 0 < int(port) < 65536:
        raise ComposeOverrideError(f"--port: must be a TCP port, got {port}")
    default_port = recipe.serving.port + 1 if baseline else recipe.serving.port
    return Service(
        name=BASELINE_SERVICE if baseline else SERVICE,
        project=f"{project_name(recipe)}-{BASELINE}" if baseline else project_name(recipe),
        command=tuple(escape(a) for a in (baseline_argv(recipe) if baseline else serve_argv(recipe))),
        published_port=int(port) if port is not None else default_port,
        probe_host=LOOPBACK,
    )


def service_document(
    recipe: Recipe,
    service: Service,
    *,
    image: ImagePin,
    models_dir: Optional[str] = None,
    gpus: Optional[str] = None,
    gpu_reservation: bool = True,
) -> dict:
    """One compose document (one service) as plain data (pure)."""
    s = recipe.serving
    mount = recipe.model_mount_point
    host_models = _host_models_dir(models_dir, mount)

    environment = {**CACHE_ENV, "HF_HUB_OFFLINE": "1", **dict(s.env)}
    cache_key = image.digest.split(":", 1)[1][:12] if image.digest else image.tag
    gpu = recipe.hardware.has_gpu
    if gpus is not None and not gpu:
        raise ComposeOverrideError(f"--gpus: {recipe.path.name} runs on a host without a GPU (hardware.gpu: none)")
    spec: dict[str, Any] = {
        "image": image.reference,
        "command": list(service.command),
        "ipc": "host",
    }
    if gpu:  # pinned memory for the GPU's DMA, deep stacks for its compiler threads
        spec["ulimits"] = {"memlock": -1, "stack": 67108864}
    spec["volumes"] = [
        {
            "type": "bind",
            "source": escape(host_models),
            "target": mount,
            "read_only": True,
            "bind": {"create_host_path": False},
        },
        {"type": "volume", "source": "kernel-cache", "target": CACHE_MOUNT},
    ]
    if service.published_port is not None:
        spec["ports"] = [
            {"target": s.port, "published": str(service.published_port), "host_ip": s.host_ip, "protocol": "tcp"}
        ]
    spec["environment"] = {**{k: escape(str(v)) for k, v in environment.items()}, **service.environment}
    # Secrets (HF_TOKEN, VLLM_API_KEY, ...) go in this file next to the compose file; never inlined here,
    # never in the command. Optional (`required: false`: Compose >= validate.MIN_COMPOSE_VERSION).
    spec["env_file"] = [{"path": env_file_name(recipe), "required": False}]
    if service.probe_host is None:
        spec["healthcheck"] = {"disable": True}
    else:
        # /health (the engine) then /v1/models with the env file's VLLM_API_KEY, read inside the
        # container when the check runs (health.py says why not a generation).
        spec["healthcheck"] = {
            "test": ["CMD", *(escape(a) for a in readiness_command(service.probe_host, s.port))],
            "interval": "30s",
            "timeout": "10s",
            "retries": 3,
            "start_period": HEALTH_START_PERIOD,
        }
    spec["restart"] = "unless-stopped"
    spec["logging"] = {"driver": "json-file", "options": {"max-size": "100m", "max-file": "5"}}
    drafter = recipe.drafter if service.name != BASELINE_SERVICE else None  # the baseline serves no drafter
    spec["labels"] = {
        RECIPE_NAME: recipe.name,
        TARGET_ID: recipe.target.id,
        **(
            {
                DRAFTER_ID: drafter.id,
                DRAFTER_LICENSE: drafter.license,
                DRAFTER_WEIGHTS: "mounted from the host, never baked into the image",
            }
            if drafter
            else {}
        ),
        IMAGE_PINNED: "digest" if image.digest else "tag-only",
        **service.labels,
    }
    if service.published_port is None:
        spec["network_mode"] = "host"
    if gpu_reservation and gpu:
        spec["deploy"] = reserve_gpus(recipe, gpus)
    return {
        "name": service.project,
        "services": {service.name: spec},
        "volumes": {
            "kernel-cache": {"name": f"{project_name(recipe)}-kernels-{re.sub(r'[^A-Za-z0-9_.-]', '-', cache_key)}"}
        },
    }


def compose_document(
    recipe: Recipe,
    *,
    image: ImagePin,
    models_dir: Optional[str] = None,
    port: Optional[int] = None,
    gpus: Optional[str] = None,
    gpu_reservation: bool = True,
    baseline: bool = False,
) -> dict:
    """The single-node compose document as plain data (pure); ``baseline``: the one without speculation."""
    return service_document(
        recipe,
        single_node_service(recipe, port=port, baseline=baseline),
        image=image,
        models_dir=models_dir,
        gpus=gpus,
        gpu_reservation=gpu_reservation,
    )


@dataclass(frozen=True)
class Header:
    """The comment lines over a compose file, part by part (each line with its ``#``)."""

    about: tuple[str, ...]  # how it was generated, what it serves, the licence, the secrets
    reach: str  # where the API server can be reached
    start: str  # how to start it
    role: tuple[str, ...]  # a node role's own lines (multi-node files)
    image: tuple[str, ...]  # how the image is named: the owner, the pin

    def lines(self) -> list[str]:
        return [*self.about, self.reach, "#", self.start, *self.role, *self.image]


def header(recipe: Recipe, image: ImagePin, *, baseline: bool = False) -> Header:
    """The single-node file's header; a node role's file replaces ``reach``, ``start`` and ``role``."""
    drafter = recipe.drafter
    if baseline:
        serves = (
            f"# Serves {recipe.target.id} WITHOUT speculation on {recipe.hardware.serves_on}: the baseline of",
            "#   `build.py qualify --baseline-url` (the recipe's command minus --speculative-config, same image).",
            "#",
            "# The model's weights are mounted read-only from the host models directory.",
        )
    elif drafter is not None:
        licence = LICENCE_NAMES.get(drafter.license, drafter.license)
        serves = (
            f"# Serves {recipe.target.id} with the {drafter.id} drafter ({drafter.method}) "
            f"on {recipe.hardware.serves_on}.",
            "#",
            f"# LICENCE: the drafter {drafter.id} is {licence}.",
            "#   Its weights are mounted read-only from the host models directory, never baked into",
            "#   the image; respect its terms"
            + (" (non-commercial use only)." if drafter.license in NON_COMMERCIAL_LICENCES else "."),
        )
    else:
        serves = (
            f"# Serves {recipe.target.id} with {recipe.speculation.method} speculation (no drafter) "
            f"on {recipe.hardware.serves_on}.",
            "#",
            "# The model's weights are mounted read-only from the host models directory.",
        )
    about = (
        COMPOSE.first_line(recipe, "--baseline" if baseline else ""),
        *serves,
        f"# Secrets such as HF_TOKEN go in ./{env_file_name(recipe)} (optional, never inlined here);",
        f"#   {API_KEY_VARIABLE}=... there makes vLLM require that key (Authorization: Bearer) on /v1.",
    )
    pin = []
    if image.owner_from_env:
        pin.append(f"# The image owner is read from {OWNER_VARIABLE} when this file is used (none was given).")
    if image.digest:
        pin.append(f"# Image pinned by digest (from {image.digest_source}).")
    else:
        pin.append("# UNPINNED: no digest was given (--digest) or found in out/build-report.json;")
        pin.append("#   the tag alone can move. Regenerate after `make image` to pin by digest.")
    return Header(
        about=about,
        reach=f"# The port is published on {recipe.serving.host_ip} only (serving.host_ip in the recipe).",
        start="# Start: docker compose -f <this file> up -d"
        + ("   (needs the NVIDIA container toolkit)" if recipe.hardware.has_gpu else ""),
        role=(),
        image=tuple(pin),
    )


def compose_text(recipe: Recipe, image: ImagePin, head: Header, document: dict) -> str:
    """A compose file's text: the header, then the document with a comment above the keys that need one."""
    comments = {}
    if recipe.drafter is not None:
        kind = " (non-commercial)" if recipe.drafter.license in NON_COMMERCIAL_LICENCES else ""
        comments["labels"] = f"    # The drafter is {recipe.drafter.license}{kind}: mounted, never baked in."
    if not image.digest:
        comments["image"] = "    # UNPINNED: tag only, no digest; this tag can be moved to another image."
    if BASELINE_SERVICE in document["services"]:
        comments.pop("labels", None)  # no drafter served
    out = []
    in_services = False
    for line in dump_yaml(document).splitlines():
        if not line.startswith(" "):
            in_services = line == "services:"
        # The service's keys (one service per file): the lines under services: indented by four spaces.
        elif in_services and line.startswith("    ") and not line.startswith("     "):
            comment = comments.get(line[4:].split(":", 1)[0])
            if comment:
                out.append(comment)
        out.append(line)
    return "\n".join(head.lines() + out) + "\n"


def render_compose(
    recipe: Recipe,
    *,
    owner: Optional[str] = None,
    repository: Optional[str] = None,
    models_dir: Optional[str] = None,
    port: Optional[int] = None,
    gpus: Optional[str] = None,
    digest: Optional[str] = None,
    report_path: Optional[Path] = None,
    gpu_reservation: bool = True,
    image: Optional[ImagePin] = None,
    baseline: bool = False,
) -> str:
    """The compose file's text (pure apart from reading the build report)."""
    image = image or resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    doc = compose_document(
        recipe,
        image=image,
        models_dir=models_dir,
        port=port,
        gpus=gpus,
        gpu_reservation=gpu_reservation,
        baseline=baseline,
    )
    return compose_text(recipe, image, header(recipe, image, baseline=baseline), doc)


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


def machine_values(models_dir: Optional[str], port: Optional[int], gpus: Optional[str]) -> tuple[str, ...]:
    """The flags given that write this machine's values into a compose file."""
    given = (("--models-dir", models_dir), ("--port", port), ("--gpus", gpus))
    return tuple(flag for flag, value in given if value is not None)


def write_compose(
    recipe: Recipe,
    *,
    output: Optional[Path] = None,
    owner: Optional[str] = None,
    repository: Optional[str] = None,
    models_dir: Optional[str] = None,
    port: Optional[int] = None,
    gpus: Optional[str] = None,
    digest: Optional[str] = None,
    report_path: Optional[Path] = None,
    validate: bool = True,
    gpu_reservation: bool = True,
    baseline: bool = False,
) -> dict:
    """Render, check with vLLM's parser and Docker Compose, then write. Nothing is written on failure.
    ``baseline``: the file of the same model without speculation (`compose --baseline`)."""
    from stackbuild.serve.validate import ComposeInvalid, check_compose_file, check_serve_args

    image = resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    text = render_compose(
        recipe,
        models_dir=models_dir,
        port=port,
        gpus=gpus,
        gpu_reservation=gpu_reservation,
        image=image,
        baseline=baseline,
    )
    service = single_node_service(recipe, port=port, baseline=baseline)
    argv = baseline_argv(recipe) if baseline else serve_argv(recipe)
    flag = "-o" if output else "compose"
    local = machine_values(models_dir, port, gpus)
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
