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
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional

from stackbuild.core.output import COMPOSE_SUFFIX, LOCAL_COMPOSE_SUFFIX, repository_file
from stackbuild.core.errors import ComposeOverrideError, OutputError
from stackbuild.core.labels import DRAFTER_ID, DRAFTER_LICENSE, DRAFTER_WEIGHTS, IMAGE_PINNED, RECIPE_NAME, TARGET_ID
from stackbuild.core.naming import MOVING_TAGS, OWNER_VARIABLE, image_name
from stackbuild.core.output import check_output
from stackbuild.core.recipe import REPO_ROOT, Recipe
from stackbuild.core.reference import DIGEST_RE, ImageReference
from stackbuild.core.build_report import DEFAULT_REPORT, read_report
from stackbuild.core.gate import require_passing

from stackbuild.core.serve_args import ranks_per_node, serve_argv
from stackbuild.serve.health import API_KEY_VARIABLE, readiness_command
from stackbuild.serve.yaml_text import dump_yaml

COMPOSE_DIR = REPO_ROOT / "compose"
SERVICE = "vllm"
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
GPU_ID_RE = re.compile(r"^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$")
# The image owner when none is given or found in a build report: Compose reads IMAGE_OWNER
# when the file is used, and refuses to start without it.
OWNER_FROM_ENV = "${" + OWNER_VARIABLE + ":?set " + OWNER_VARIABLE + " to the registry namespace the image was pushed to}"


@dataclass(frozen=True)
class ImagePin:
    repository: str
    tag: str
    digest: Optional[str]
    digest_source: str  # "--digest", the report path, or "" when unpinned
    unpinned_because: str = ""  # why no digest was taken from the build report
    owner_note: str = ""  # where the owner came from, when not from --owner / IMAGE_OWNER

    @property
    def reference(self) -> str:
        """``repository:tag[@digest]``; the repository may hold Compose's ``${IMAGE_OWNER:?...}``."""
        return str(ImageReference(self.repository, self.tag, self.digest))


def escape(value: str) -> str:
    """Compose interpolates ``$``: a literal dollar is ``$$``."""
    return value.replace("$", "$$")


def _owner_from_report(recipe: Recipe, report: Optional[dict]) -> Optional[str]:
    """The owner a build report of this recipe pushed to, when its repository fits the recipe's template."""
    if not report or report.get("recipe_name") != recipe.name or not isinstance(report.get("image"), str):
        return None
    pattern = re.escape(recipe.image.repository).replace(re.escape("{owner}"), "([a-z0-9]+(?:[._-][a-z0-9]+)*)")
    match = re.fullmatch(pattern, report["image"])
    return match.group(1) if match else None


def _unpinned_because(recipe: Recipe, report: Optional[dict], report_path: Path, repository: str) -> str:
    """Why the build report gives no digest for this file ("" when it does)."""
    if report is None:
        return f"no readable build report at {report_path} (pass --digest, or build and push first)"
    if report.get("recipe_name") not in (None, recipe.name):
        return f"{report_path} is the report of recipe {report.get('recipe_name')!r}, not {recipe.name!r}"
    if not report.get("pushed_digest"):
        return f"{report_path} records no push (status {report.get('status')!r})"
    if report.get("image") not in (None, repository):
        return f"{report_path} pushed {report.get('image')}, not {repository}"
    if not DIGEST_RE.match(str(report["pushed_digest"])):
        return f"{report_path}: pushed_digest {report['pushed_digest']!r} is not a sha256 digest"
    return ""


def resolve_image(recipe: Recipe, *, owner: Optional[str] = None, repository: Optional[str] = None,
                  digest: Optional[str] = None, report_path: Optional[Path] = None) -> ImagePin:
    """The image by digest from --digest (with this tree's pinned tag) or the last build report
    (with the tag that build pushed).

    Without either, the build that made the image is unknown, and so is its pinned tag (it
    names the commit, ``{rev}``): the file then names the recipe's moving tag (``latest``),
    marked UNPINNED, rather than a pinned tag of a build that may not exist.

    The owner is ``owner`` (--owner / IMAGE_OWNER), else the one a build report of this recipe
    pushed to, else Compose's ``${IMAGE_OWNER:?...}`` (the file asks for it when used).
    """
    report_path = Path(report_path) if report_path else DEFAULT_REPORT
    report = read_report(report_path)
    if not isinstance(report, dict):
        report = None
    name = image_name(recipe, owner=owner, repository=repository, owner_fallback=OWNER_FROM_ENV)
    owner_note = ""
    if name.owner_missing:
        reported = _owner_from_report(recipe, report)
        if reported:
            name = image_name(recipe, owner=reported, repository=repository)
            owner_note = f"image owner {reported!r} taken from {report_path}"
        else:
            owner_note = (f"no image owner given (--owner, {OWNER_VARIABLE}) or found in {report_path}: "
                          f"the compose file reads {OWNER_VARIABLE} when it is used")
    if digest is not None:
        if not DIGEST_RE.match(digest):
            raise ComposeOverrideError(f"--digest: expected 'sha256:' followed by 64 lowercase hex digits, got {digest!r}")
        pinned = next(iter(name.pinned_tags), name.tags[0])
        return ImagePin(name.repository, pinned, digest, "--digest", owner_note=owner_note)
    tag = next((t for t in name.tags if t in MOVING_TAGS), name.tags[0])
    # Only a report of this recipe, pushed to this repository, pins this file.
    why = _unpinned_because(recipe, report, report_path, name.repository)
    if why:
        return ImagePin(name.repository, tag, None, "", unpinned_because=why, owner_note=owner_note)
    tags = [t for t in report.get("tags") or () if isinstance(t, str)]
    tag = next((t for t in tags if t not in MOVING_TAGS), tag)
    return ImagePin(name.repository, tag, str(report["pushed_digest"]), str(report_path), owner_note=owner_note)


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
            why = (f"serving.tensor_parallel_size is {count}" if recipe.serving.nodes == 1 else
                   f"each node runs {count} rank(s) (serving.tensor_parallel_size / serving.nodes)")
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
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # Compose text, after the recipe's
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # after the recipe's


def single_node_service(recipe: Recipe, *, port: Optional[int] = None) -> Service:
    """The one service of a single-node recipe: the serve argv, its port published on serving.host_ip."""
    if port is not None and not 0 < int(port) < 65536:
        raise ComposeOverrideError(f"--port: must be a TCP port, got {port}")
    return Service(name=SERVICE, project=project_name(recipe), command=tuple(escape(a) for a in serve_argv(recipe)),
                   published_port=int(port) if port is not None else recipe.serving.port, probe_host=LOOPBACK)


def service_document(recipe: Recipe, service: Service, *, image: ImagePin, models_dir: Optional[str] = None,
                     gpus: Optional[str] = None, gpu_reservation: bool = True) -> dict:
    """One compose document (one service) as plain data (pure)."""
    s = recipe.serving
    mount = recipe.model_mount_point
    host_models = _host_models_dir(models_dir, mount)

    environment = {**CACHE_ENV, "HF_HUB_OFFLINE": "1", **dict(s.env)}
    cache_key = (image.digest.split(":", 1)[1][:12] if image.digest else image.tag)
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
            {"type": "bind", "source": escape(host_models), "target": mount, "read_only": True,
             "bind": {"create_host_path": False}},
            {"type": "volume", "source": "kernel-cache", "target": CACHE_MOUNT},
    ]
    if service.published_port is not None:
        spec["ports"] = [{"target": s.port, "published": str(service.published_port), "host_ip": s.host_ip,
                          "protocol": "tcp"}]
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
    drafter = recipe.drafter
    spec["labels"] = {
        RECIPE_NAME: recipe.name,
        TARGET_ID: recipe.target.id,
        **({DRAFTER_ID: drafter.id, DRAFTER_LICENSE: drafter.license,
            DRAFTER_WEIGHTS: "mounted from the host, never baked into the image"} if drafter else {}),
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
        "volumes": {"kernel-cache": {"name": f"{project_name(recipe)}-kernels-{re.sub(r'[^A-Za-z0-9_.-]', '-', cache_key)}"}},
    }


def compose_document(recipe: Recipe, *, image: ImagePin, models_dir: Optional[str] = None,
                     port: Optional[int] = None, gpus: Optional[str] = None,
                     gpu_reservation: bool = True) -> dict:
    """The single-node compose document as plain data (pure)."""
    return service_document(recipe, single_node_service(recipe, port=port), image=image, models_dir=models_dir,
                            gpus=gpus, gpu_reservation=gpu_reservation)


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


def header(recipe: Recipe, image: ImagePin) -> Header:
    """The single-node file's header; a node role's file replaces ``reach``, ``start`` and ``role``."""
    try:
        recipe_rel = recipe.path.relative_to(REPO_ROOT)
    except ValueError:
        recipe_rel = recipe.path
    drafter = recipe.drafter
    if drafter is not None:
        licence = LICENCE_NAMES.get(drafter.license, drafter.license)
        serves = (f"# Serves {recipe.target.id} with the {drafter.id} drafter ({drafter.method}) on {recipe.hardware.serves_on}.",
                  "#",
                  f"# LICENCE: the drafter {drafter.id} is {licence}.",
                  "#   Its weights are mounted read-only from the host models directory, never baked into",
                  "#   the image; respect its terms (non-commercial use only).")
    else:
        serves = (f"# Serves {recipe.target.id} with {recipe.speculation.method} speculation (no drafter) "
                  f"on {recipe.hardware.serves_on}.",
                  "#",
                  "# The model's weights are mounted read-only from the host models directory.")
    about = (
        f"# Generated by `python build.py compose --recipe {recipe_rel}`: edit the recipe, not this file.",
        *serves,
        f"# Secrets such as HF_TOKEN go in ./{env_file_name(recipe)} (optional, never inlined here);",
        f"#   {API_KEY_VARIABLE}=... there makes vLLM require that key (Authorization: Bearer) on /v1.",
    )
    pin = []
    if OWNER_FROM_ENV in image.repository:
        pin.append(f"# The image owner is read from {OWNER_VARIABLE} when this file is used (none was given).")
    if image.digest:
        pin.append(f"# Image pinned by digest (from {image.digest_source}).")
    else:
        pin.append("# UNPINNED: no digest was given (--digest) or found in out/build-report.json;")
        pin.append("#   the tag alone can move. Regenerate after `make image` to pin by digest.")
    return Header(
        about=about,
        reach=f"# The port is published on {recipe.serving.host_ip} only (serving.host_ip in the recipe).",
        start="# Start: docker compose -f <this file> up -d" + ("   (needs the NVIDIA container toolkit)"
                                                              if recipe.hardware.has_gpu else ""),
        role=(),
        image=tuple(pin),
    )


def compose_text(recipe: Recipe, image: ImagePin, head: Header, document: dict) -> str:
    """A compose file's text: the header, then the document with a comment above the keys that need one."""
    comments = {}
    if recipe.drafter is not None:
        comments["labels"] = f"    # The drafter is {recipe.drafter.license} (non-commercial): mounted, never baked in."
    if not image.digest:
        comments["image"] = "    # UNPINNED: tag only, no digest; this tag can be moved to another image."
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


def render_compose(recipe: Recipe, *, owner: Optional[str] = None, repository: Optional[str] = None,
                   models_dir: Optional[str] = None, port: Optional[int] = None, gpus: Optional[str] = None,
                   digest: Optional[str] = None, report_path: Optional[Path] = None,
                   gpu_reservation: bool = True, image: Optional[ImagePin] = None) -> str:
    """The compose file's text (pure apart from reading the build report)."""
    image = image or resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    doc = compose_document(recipe, image=image, models_dir=models_dir, port=port, gpus=gpus,
                           gpu_reservation=gpu_reservation)
    return compose_text(recipe, image, header(recipe, image), doc)


def generated_for(recipe: Recipe, text: str) -> bool:
    """Whether ``text`` is a compose file this generator wrote for ``recipe`` (single-node or a node role's)."""
    return (text.startswith("# Generated by `python build.py compose")
            and f"{RECIPE_NAME}: {recipe.name}\n" in text)


def output_dir(recipe: Recipe) -> Path:
    """Where compose and deploy write without -o: compose/ for the repository's own recipes, the recipe's
    directory for any other (a copy elsewhere never overwrites the repository's files)."""
    return COMPOSE_DIR if repository_file(recipe.path, REPO_ROOT) else recipe.directory


def default_output(recipe: Recipe, *, local: bool = False) -> Path:
    """The compose file without -o; ``local``: it holds this machine's values, so in compose/ it is the
    git-ignored ``<name>.local.compose.yaml``, never the committed file."""
    directory = output_dir(recipe)
    suffix = LOCAL_COMPOSE_SUFFIX if local and directory == COMPOSE_DIR else COMPOSE_SUFFIX
    return directory / f"{recipe.name}{suffix}"


def machine_values(models_dir: Optional[str], port: Optional[int], gpus: Optional[str]) -> tuple[str, ...]:
    """The flags given that write this machine's values into a compose file."""
    given = (("--models-dir", models_dir), ("--port", port), ("--gpus", gpus))
    return tuple(flag for flag, value in given if value is not None)


def notice(message: str) -> None:
    """One notice line on stderr (stdout may carry --json)."""
    print(f"notice: {message}", file=sys.stderr)


def image_notices(image: ImagePin) -> None:
    """Say where the owner came from, and why the image is not pinned by digest (when it is not)."""
    for note in (image.owner_note, image.unpinned_because and f"unpinned: {image.unpinned_because}"):
        if note:
            notice(note)


def write_compose(recipe: Recipe, *, output: Optional[Path] = None, owner: Optional[str] = None,
                  repository: Optional[str] = None, models_dir: Optional[str] = None, port: Optional[int] = None,
                  gpus: Optional[str] = None, digest: Optional[str] = None, report_path: Optional[Path] = None,
                  validate: bool = True, gpu_reservation: bool = True) -> dict:
    """Render, check with vLLM's parser and Docker Compose, then write. Nothing is written on failure."""
    from stackbuild.serve.validate import ComposeInvalid, check_compose_file, check_serve_args

    image = resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    text = render_compose(recipe, models_dir=models_dir, port=port, gpus=gpus,
                          gpu_reservation=gpu_reservation, image=image)
    argv = serve_argv(recipe)
    require_passing(recipe)
    flag = "-o" if output else "compose"
    local = machine_values(models_dir, port, gpus)
    output = Path(output) if output else default_output(recipe, local=bool(local))
    check_output(output, flag, ours=lambda old: generated_for(recipe, old))
    checks: dict[str, dict] = {}
    # Checked under its final directory (relative paths resolve as they will), then moved in place.
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    except OSError as exc:
        raise OutputError(f"{flag} {output}: cannot write in {output.parent}: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if validate:
            config = check_compose_file(tmp, where=str(output))
            checks["compose_config"] = {"status": config.status, "detail": config.detail}
            if config.status == "skipped":
                notice(f"docker compose config check skipped: {config.detail}")
            else:
                # Compose's own reading of the command after interpolation; `config` prints a
                # literal dollar re-escaped as `$$`, so it must read back as the escaped argv.
                resolved = config.parsed["services"][SERVICE]["command"]
                if resolved != [escape(a) for a in argv]:
                    raise ComposeInvalid(f"{output}: docker compose reads the command as {resolved!r}, not {argv!r}")
            serve = check_serve_args(argv, where=str(recipe.path))
            checks["serve_args"] = serve.as_dict()
            if serve.status == "skipped":
                notice(f"vLLM serve-parser check skipped: {serve.detail}")
        os.chmod(tmp, 0o644)
        try:
            tmp.replace(output)
        except OSError as exc:
            raise OutputError(f"{flag} {output}: cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    image_notices(image)
    if flag == "compose" and output.name.endswith(LOCAL_COMPOSE_SUFFIX):
        notice(f"{', '.join(local)} hold(s) this machine's values: wrote {output.name} (git-ignored), "
               f"not the committed {default_output(recipe).name}")
    return {
        "path": str(output),
        "image": image.reference,
        "pinned": bool(image.digest),
        "digest_source": image.digest_source or None,
        "unpinned_because": image.unpinned_because or None,
        "owner_note": image.owner_note or None,
        "command": argv,
        "checks": checks,
    }
