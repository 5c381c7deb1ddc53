"""A compose file's one service as plain data: the single-node service or a node role's (multinode.py),
told apart by a :class:`Service`, with the image, the models directory and the GPUs of a
:class:`ServeTarget` (pure: no daemon, no files, no subprocess)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from stackbuild.core.engines import START_INTERVAL_API, api_at_least
from stackbuild.core.errors import ComposeOverrideError
from stackbuild.core.labels import DRAFTER_ID, DRAFTER_LICENSE, DRAFTER_WEIGHTS, IMAGE_PINNED, RECIPE_NAME, TARGET_ID
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import baseline_argv, ranks_per_node, serve_argv
from stackbuild.serve.compose_signature import EXTENSION, extension
from stackbuild.serve.compose_signature import labels as signature_labels
from stackbuild.serve.health import readiness_command
from stackbuild.serve.target import ServeTarget

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
# How often the check runs: once the server is up, and while it starts on an engine without start_interval
# (API < engines.START_INTERVAL_API), where the first check comes one interval after the start and the
# server shows healthy up to an interval after /health answers. Each check is one short python3 in the
# container; three failed in a row (30 s) turn it unhealthy. Where the engine takes start_interval, the
# check runs that often during the start period: healthy within seconds of /health answering.
HEALTH_INTERVAL = "10s"
HEALTH_START_INTERVAL = "5s"
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


def single_node_service(target: ServeTarget, *, baseline: bool = False) -> Service:
    """The one service of a single-node recipe: the serve argv, its port published on serving.host_ip.
    ``baseline``: the argv without speculation, as service BASELINE_SERVICE of project `<name>-baseline`,
    published on serving.port + 1 by default (the target's port when it has one)."""
    recipe, port = target.recipe, target.port
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


def service_document(target: ServeTarget, service: Service, *, gpu_reservation: bool = True) -> dict:
    """One compose document (one service) as plain data (pure)."""
    recipe, image, models_dir, gpus = target.recipe, target.image, target.models_dir, target.gpus
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
            "interval": HEALTH_INTERVAL,
            "timeout": "10s",
            "retries": 3,
            "start_period": HEALTH_START_PERIOD,
        }
        if api_at_least(target.written_for_api, START_INTERVAL_API):
            spec["healthcheck"]["start_interval"] = HEALTH_START_INTERVAL
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
        **(signature_labels(target.signature) if target.signature else {}),
        **service.labels,
    }
    if service.published_port is None:
        spec["network_mode"] = "host"
    if gpu_reservation and gpu:
        spec["deploy"] = reserve_gpus(recipe, gpus)
    return {
        "name": service.project,
        **({EXTENSION: extension(target.signature)} if target.signature else {}),
        "services": {service.name: spec},
        "volumes": {
            "kernel-cache": {"name": f"{project_name(recipe)}-kernels-{re.sub(r'[^A-Za-z0-9_.-]', '-', cache_key)}"}
        },
    }
