"""Recipe -> Kubernetes manifests (plain data) -> YAML text -> file.

One machine: a Deployment. Several (serving.nodes > 1): a LeaderWorkerSet whose group
is the tensor-parallel group, one pod per node; the leader (LWS_WORKER_INDEX 0) runs the
API server, workers join headless; every pod's address of the leader comes from
LWS_LEADER_ADDRESS, its node rank from LWS_WORKER_INDEX (Kubernetes expands $(VAR) in
args). The container's args are the serve argv only: the image's entrypoint (the
start-time pre-flight) stays, so the pre-flight runs in every pod. The manifests are written for the
command's :class:`ServeTarget` (the recipe and the image) with its :class:`DeployOptions` (k8s_options.py).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Optional, Sequence

from geometry import IMAGE_DIGEST_ENV
from stackbuild.core.errors import OwnerMissing
from stackbuild.core.labels import NODE_ROLE, RECIPE_NAME
from stackbuild.core.naming import OWNER_VARIABLE
from stackbuild.core.output import K8S_SUFFIX
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import (
    CONTAINER_HOST,
    FINGERPRINT_PORT,
    LEADER,
    SlotValues,
    ranks_per_node,
    role_commands,
    serve_argv,
)
from stackbuild.serve.compose import output_dir as default_output_dir
from stackbuild.serve.compose_service import CACHE_ENV, CACHE_MOUNT, LOOPBACK
from stackbuild.serve.generated import DEPLOY
from stackbuild.serve.health import API_KEY_VARIABLE, HEALTH_PATH, readiness_command
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.k8s_options import DEFAULT_IFNAME, DeployOptions, ModelVolume, default_api_key_secret, object_name
from stackbuild.serve.signature_policy import header_lines, policy_documents
from stackbuild.serve.signature_trust import require_pinned
from stackbuild.serve.target import ServeTarget
from stackbuild.serve.writer import Document, write_documents
from stackbuild.serve.yaml_text import dump_yaml

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_ADDRESS_ENV, WORKER_INDEX_ENV = "LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX"
GPU_RESOURCE = "nvidia.com/gpu"
APP_LABEL = "app.kubernetes.io/name"
# Weights, compile and graph capture before /health answers (compose allows 30 min): 60 x 30 s.
STARTUP_PERIOD_S, STARTUP_FAILURES = 30, 60
SHM = "/dev/shm"
SERVICE_SUFFIX = "-api"
# The key of the API-key Secret that holds the key (kubectl create secret generic NAME --from-literal=api-key=...).
API_KEY_SECRET_KEY = "api-key"
ARCH_LABEL = "kubernetes.io/arch"


def architectures(recipe: Recipe) -> tuple[str, ...]:
    """The node architectures (kubernetes.io/arch values) the recipe's image is built for."""
    return tuple(p.split("/", 1)[1] for p in (recipe.platforms or (recipe.platform,)))


def node_placement(recipe: Recipe) -> dict:
    """Pod-spec keys that keep the pod off nodes of an architecture the image has no build for:
    a nodeSelector for one platform, a required node affinity (In) for several."""
    arches = architectures(recipe)
    if len(arches) == 1:
        return {"nodeSelector": {ARCH_LABEL: arches[0]}}
    term = {"matchExpressions": [{"key": ARCH_LABEL, "operator": "In", "values": list(arches)}]}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    }


def _k8s_escape(value: str) -> str:
    """Kubernetes expands $(VAR) in args: a literal one is $$(VAR)."""
    return value.replace("$(", "$$(")


def _container(
    recipe: Recipe,
    image: str,
    args: list[str],
    *,
    serves_api: bool,
    multinode: bool,
    ifname: str,
    api_key_secret: str,
    image_digest: Optional[str] = None,
) -> dict:
    s = recipe.serving
    mount = recipe.model_mount_point
    env = {**CACHE_ENV, "HF_HUB_OFFLINE": "1", **dict(s.env)}
    if multinode:
        env.update({"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname})
        if image_digest:  # the ranks' pre-flight fingerprints compare it (the pod cannot read it from the image)
            env[IMAGE_DIGEST_ENV] = image_digest
    gpus = ranks_per_node(recipe)
    container = {
        "name": "vllm",
        "image": image,
        "args": args,  # no command: the image's entrypoint (the pre-flight) starts vLLM
        "env": [{"name": k, "value": str(v)} for k, v in env.items()],
        "volumeMounts": [
            {"name": "models", "mountPath": mount, "readOnly": True},
            {"name": "dshm", "mountPath": SHM},
            {"name": "kernel-cache", "mountPath": CACHE_MOUNT},
        ],
    }
    if recipe.hardware.has_gpu:  # a CPU recipe (hardware.gpu: none) asks the scheduler for no GPU
        container["resources"] = {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}}
    if serves_api:
        # vLLM reads VLLM_API_KEY: from the Secret when it exists (optional: no Secret, no key), never in args.
        container["env"].append(
            {
                "name": API_KEY_VARIABLE,
                "valueFrom": {"secretKeyRef": {"name": api_key_secret, "key": API_KEY_SECRET_KEY, "optional": True}},
            }
        )
        port = {"port": s.port}
        container["ports"] = [{"name": "http", "containerPort": s.port, "protocol": "TCP"}]
        # Startup and liveness: /health, the engine's own health (no key needed). Readiness: /health, then
        # /v1/models with the key from the container's environment (health.py says why not a generation).
        container["startupProbe"] = {
            "httpGet": {"path": HEALTH_PATH, **port},
            "periodSeconds": STARTUP_PERIOD_S,
            "failureThreshold": STARTUP_FAILURES,
            "timeoutSeconds": 5,
        }
        container["readinessProbe"] = {
            "exec": {"command": readiness_command(LOOPBACK, s.port)},
            "periodSeconds": 10,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        }
        container["livenessProbe"] = {
            "httpGet": {"path": HEALTH_PATH, **port},
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        }
    return container


def _pod_spec(recipe: Recipe, container: dict, volume: ModelVolume, pull_secrets: tuple[str, ...]) -> dict:
    return {
        **node_placement(recipe),
        **({"imagePullSecrets": [{"name": n} for n in pull_secrets]} if pull_secrets else {}),
        "containers": [container],
        "volumes": [
            volume.volume(),
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "kernel-cache", "emptyDir": {}},
        ],
    }


def manifests(
    recipe: Recipe,
    *,
    image: str,
    volume: ModelVolume,
    ifname: str = DEFAULT_IFNAME,
    namespace: Optional[str] = None,
    api_key_secret: Optional[str] = None,
    image_pull_secrets: tuple[str, ...] = (),
    image_digest: Optional[str] = None,
) -> list[dict]:
    """The manifests as plain data (pure); ``image_digest``: the digest ``image`` pins, if any."""
    s = recipe.serving
    api_key_secret = api_key_secret or default_api_key_secret(recipe)
    pull = tuple(image_pull_secrets)
    name = object_name(recipe)
    labels = {APP_LABEL: name, RECIPE_NAME: recipe.name}
    meta = {"name": name, "labels": labels, **({"namespace": namespace} if namespace else {})}
    if s.nodes == 1:
        args = [_k8s_escape(a) for a in serve_argv(recipe)]
        workload = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # the GPUs are held until the old pod is gone
                "selector": {"matchLabels": {APP_LABEL: name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": _pod_spec(
                        recipe,
                        _container(
                            recipe,
                            image,
                            args,
                            serves_api=True,
                            multinode=False,
                            ifname=ifname,
                            api_key_secret=api_key_secret,
                        ),
                        volume,
                        pull,
                    ),
                },
            },
        }
        selector = {APP_LABEL: name}
    else:
        # Kubernetes expands the slots' $(VAR) in every pod (the LWS controller sets both variables).
        values = SlotValues(
            host=CONTAINER_HOST, master_addr=f"$({LEADER_ADDRESS_ENV})", node_rank=f"$({WORKER_INDEX_ENV})"
        )
        templates = {}
        for command in role_commands(recipe):
            args = command.filled(values, literal=_k8s_escape)
            leader = command.role == LEADER
            templates["leaderTemplate" if leader else "workerTemplate"] = {
                "metadata": {"labels": {**labels, NODE_ROLE: command.role}},
                "spec": _pod_spec(
                    recipe,
                    _container(
                        recipe,
                        image,
                        args,
                        serves_api=leader,
                        multinode=True,
                        ifname=ifname,
                        api_key_secret=api_key_secret,
                        image_digest=image_digest,
                    ),
                    volume,
                    pull,
                ),
            }
        workload = {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {"size": s.nodes, "restartPolicy": "RecreateGroupOnPodRestart", **templates},
            },
        }
        selector = {LWS_NAME_LABEL: name, LWS_INDEX_LABEL: "0"}  # the leader pods serve the API
    # Not the workload's own name: the LWS controller makes a headless Service of that name for the group.
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**meta, "name": f"{name}{SERVICE_SUFFIX}"},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": s.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [workload, service]


def _header(recipe: Recipe, image: ImagePin) -> list[str]:
    s = recipe.serving
    lines = [
        DEPLOY.first_line(recipe, "--target k8s"),
        *(
            (
                f"# Serves {recipe.target.id} with the {recipe.drafter.id} drafter on {recipe.hardware.serves_on}.",
                f"# The drafter is {recipe.drafter.license}: its weights come from the models volume, never the image.",
            )
            if recipe.drafter is not None
            else (
                f"# Serves {recipe.target.id} with {recipe.speculation.method} speculation (no drafter) "
                f"on {recipe.hardware.serves_on}.",
            )
        ),
        "# The image's entrypoint (the start-time pre-flight, GLM53_PREFLIGHT) runs in every pod before vLLM.",
    ]
    if s.nodes > 1:
        lines += [
            f"# A LeaderWorkerSet group of {s.nodes} pods (one per node, {ranks_per_node(recipe)} GPU(s) each)"
            " needs the LWS controller (leaderworkerset.x-k8s.io/v1) installed;",
            f"#   the leader serves the API, workers join headless via $({LEADER_ADDRESS_ENV}), "
            f"rank $({WORKER_INDEX_ENV});",
            "#   before vLLM starts, each worker's pre-flight fetches the leader's fingerprint "
            f"on port {FINGERPRINT_PORT}.",
        ]
    if not image.digest:
        lines.append("# UNPINNED: no digest was given (--digest) or found in out/build-report.json; the tag can move.")
    return lines


def render(recipe: Recipe, objects: list[dict], image: ImagePin, policy_lines: Sequence[str] = ()) -> str:
    docs = [dump_yaml(o) for o in objects]
    return "\n".join([*_header(recipe, image), *policy_lines]) + "\n---\n" + "---\n".join(docs)


def output_path(recipe: Recipe, directory: Optional[Path]) -> Path:
    """-o's directory, else where :func:`compose.output_dir` says (compose/ for the repository's own recipes)."""
    return Path(directory or default_output_dir(recipe)) / f"{recipe.name}{K8S_SUFFIX}"


def write_manifests(target: ServeTarget, options: DeployOptions) -> dict:
    """Build, check (Kubernetes schemas, LWS schema, vLLM's serve parser), then write one file.

    ``options`` were checked when they were made (:func:`k8s_options.deploy_options`); the models volume is
    checked here, once the image names its owner."""
    from stackbuild.serve.k8s_validate import validate
    from stackbuild.serve.validate import check_serve_args, run_serve_parser_cases

    recipe, image = target.recipe, target.image
    if image.owner_from_env:
        raise OwnerMissing(
            f"deploy: no image owner given (--owner, {OWNER_VARIABLE}) or found in a build report; "
            "Kubernetes manifests name the image in full"
        )
    volume = options.volume(recipe)
    objects = manifests(
        recipe,
        image=image.reference,
        volume=volume,
        ifname=options.ifname,
        namespace=options.namespace,
        api_key_secret=options.api_key_secret,
        image_pull_secrets=options.image_pull_secrets,
        image_digest=image.digest,
    )
    policy_objects, policy_lines = [], []
    if options.signature is not None:
        require_pinned(image, "deploy")
        policy_objects = policy_documents(recipe, object_name(recipe), image, options.signature, options.namespace)
        policy_lines = header_lines(options.signature, options.namespace)
    output_dir = options.output_dir
    path = output_path(recipe, output_dir)
    # The policy first: `kubectl apply -f` creates it before the pods it admits.
    text = render(recipe, [*policy_objects, *objects], image, policy_lines)

    def check(_temps) -> tuple[list[str], dict[str, str]]:
        """The schemas checked, and each pod's serve-parser verdict."""
        checked = validate([o for o in policy_objects if o["kind"] == "Namespace"] + objects, str(path))
        checked += [
            f"{o['kind']}: {o['apiVersion']}, not checked when written (the tests hold it to its CRD's schema)"
            for o in policy_objects
            if o["kind"] != "Namespace"
        ]
        # Every pod's argv as Kubernetes expands it, through vLLM's serve parser (multi-node checks included).
        cases = []
        for obj in objects[:1]:
            if obj["kind"] == "Deployment":
                cases.append(("pod", obj["spec"]["template"]["spec"]["containers"][0]["args"], {}))
            else:
                templates = obj["spec"]["leaderWorkerTemplate"]
                for key, indices in (("leaderTemplate", [0]), ("workerTemplate", range(1, recipe.serving.nodes))):
                    for index in indices:
                        env = {LEADER_ADDRESS_ENV: "glm53-0.glm53.default", WORKER_INDEX_ENV: str(index)}
                        args = [_expand(a, env) for a in templates[key]["spec"]["containers"][0]["args"]]
                        cases.append((f"{key} (LWS_WORKER_INDEX {index})", args, env))
        verdicts = run_serve_parser_cases([args for _w, args, _e in cases])
        serve_checks = {
            where: check_serve_args(args, where=f"{recipe.path} ({where})", result=verdict).status
            for (where, args, _env), verdict in zip(cases, verdicts)
        }
        return checked, serve_checks

    ours = partial(DEPLOY.wrote, recipe=recipe)
    checked, serve_checks = write_documents(
        recipe, [Document(path, text, ours)], "-o" if output_dir else "deploy", check=check
    )
    return {
        "path": str(path),
        "image": image.reference,
        "pinned": bool(image.digest),
        "kinds": [o["kind"] for o in [*policy_objects, *objects]],
        "signature_policy": options.signature.engine.value if options.signature else None,
        "schemas": checked,
        "serve_args": serve_checks,
    }


def _expand(value: str, env: dict) -> str:
    """Kubernetes' $(VAR) expansion of container args ($$ is a literal $)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )
