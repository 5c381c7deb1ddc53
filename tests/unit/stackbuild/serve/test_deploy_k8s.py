"""`build.py deploy --target k8s`: manifests checked offline by the real schemas.

Expectations from the recipes (2x GB10: TP 2 over 2 nodes, one GPU per pod; GB300: one
machine), from vLLM's multi-node launch (rank 0 serves, others --headless) and from the
LWS API (LWS_LEADER_ADDRESS, LWS_WORKER_INDEX, the leader's worker-index label 0).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.repo import REPO

from stackbuild.core.errors import ManifestInvalid
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv
from stackbuild.serve.health import readiness_command
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.k8s import _expand, manifests, render
from stackbuild.serve.k8s_options import ModelVolume
from stackbuild.serve.k8s_validate import validate

MULTI = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
SINGLE = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
TWO_PLATFORMS = REPO / "recipes" / "glm53-flash-dflash2-sm100" / "recipe.yaml"
CPU = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"
IMAGE = "ghcr.io/someone/x:tag"


def build(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True, cwd=REPO, timeout=900, env=env
    )


def objects(recipe_path: Path, **kw):
    return manifests(load_recipe(recipe_path), image=IMAGE, volume=ModelVolume(host_path="/models"), **kw)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_leaderworkerset_for_two_nodes():
    lws, service = objects(MULTI)
    assert (lws["kind"], service["kind"]) == ("LeaderWorkerSet", "Service")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    worker = group["workerTemplate"]["spec"]["containers"][0]
    for c in (leader, worker):
        assert "command" not in c  # the image's entrypoint (the pre-flight) stays
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1  # TP 2 / 2 nodes
        assert flag(c["args"], "--master-addr") == "$(LWS_LEADER_ADDRESS)"
        assert (flag(c["args"], "--nnodes"), flag(c["args"], "--master-port")) == ("2", "29501")
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert flag(leader["args"], "--node-rank") == "0" and "--headless" not in leader["args"]
    assert flag(worker["args"], "--node-rank") == "$(LWS_WORKER_INDEX)" and "--headless" in worker["args"]
    # readiness: /health (the engine), then /v1/models with the key from the pod's environment
    assert leader["readinessProbe"]["exec"]["command"] == readiness_command("127.0.0.1", 8000)
    assert leader["livenessProbe"]["httpGet"]["path"] == "/health"
    assert leader["startupProbe"]["httpGet"]["path"] == "/health"
    assert _api_key_env(leader) == {
        "secretKeyRef": {"name": "glm53-flash-dflash2-2x-gb10-api-key", "key": "api-key", "optional": True}
    }
    assert _api_key_env(worker) is None  # headless: no API, no key
    startup = leader["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60  # weights load for minutes
    assert not any(k.endswith("Probe") for k in worker)  # headless: no HTTP server
    shm = [v for v in group["workerTemplate"]["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/name"] == lws["metadata"]["name"]
    # the LWS controller creates a headless Service named like the set: ours must not take that name
    assert service["metadata"]["name"] != lws["metadata"]["name"]
    assert validate([lws, service], "test")


def test_deployment_for_one_machine():
    deployment, service = objects(SINGLE)
    recipe = load_recipe(SINGLE)
    assert deployment["kind"] == "Deployment"
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == serve_argv(recipe) and "command" not in c
    assert c["resources"]["limits"]["nvidia.com/gpu"] == recipe.serving.tensor_parallel_size
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert validate([deployment, service], "test")


def test_a_cpu_recipe_asks_for_no_gpu():
    """hardware.gpu: none: no nvidia.com/gpu request (a GPU-less node could never schedule the pod)."""
    deployment, service = objects(CPU)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "resources" not in container
    assert validate([deployment, service], "test")
    text = render(load_recipe(CPU), [deployment, service], ImagePin("ghcr.io/someone/x", "tag", None, ""))
    assert "nvidia.com/gpu" not in text and "on a host without a GPU (vLLM's CPU platform)" in text


def _api_key_env(container):
    entries = [e for e in container["env"] if e["name"] == "VLLM_API_KEY"]
    assert len(entries) <= 1 and all("value" not in e for e in entries)  # from a Secret, never a literal
    return entries[0]["valueFrom"] if entries else None


def _pod_specs(workload):
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]["spec"]]
    group = workload["spec"]["leaderWorkerTemplate"]
    return [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]


@pytest.mark.parametrize("recipe_path", [SINGLE, MULTI], ids=["deployment", "leaderworkerset"])
def test_api_key_secret_pull_secrets_and_architecture(recipe_path):
    default = objects(recipe_path)
    for spec in _pod_specs(default[0]):
        assert "imagePullSecrets" not in spec  # default: none (a public image, or the node's own credentials)
        assert spec["nodeSelector"] == {"kubernetes.io/arch": "arm64"}  # the recipe's one platform
        assert "affinity" not in spec
    workload, service = objects(recipe_path, api_key_secret="vllm-key", image_pull_secrets=("ghcr-pull", "other"))
    specs = _pod_specs(workload)
    for spec in specs:
        assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}, {"name": "other"}]
    assert _api_key_env(specs[0]["containers"][0])["secretKeyRef"] == {
        "name": "vllm-key",
        "key": "api-key",
        "optional": True,
    }
    assert validate([workload, service], "test")


def test_two_platforms_schedule_on_either_architecture():
    deployment, service = objects(TWO_PLATFORMS)
    spec = deployment["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}
    ]
    assert validate([deployment, service], "test")


@pytest.mark.parametrize(
    "recipe_path", [SINGLE, MULTI, TWO_PLATFORMS], ids=["deployment", "leaderworkerset", "two-platforms"]
)
def test_rendered_manifests_have_no_anchors_or_aliases(recipe_path):
    """The objects share dicts (the labels in metadata and the pod template, the probes' port): each is
    written out where it is used, never as an anchor (&) and an alias (*)."""
    recipe = load_recipe(recipe_path)
    objs = objects(recipe_path, image_pull_secrets=("ghcr-pull",))
    text = render(recipe, objs, ImagePin("ghcr.io/someone/x", "tag", None, ""))
    events = list(yaml.parse(text))
    assert not [e for e in events if isinstance(e, yaml.AliasEvent)]
    assert not [e for e in events if getattr(e, "anchor", None)]
    assert [d for d in yaml.safe_load_all(text) if d] == objs


def _lws_edit(obj, key, value):
    obj["spec"]["leaderWorkerTemplate"][key] = value


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda o: _lws_edit(o, "restartPolicy", "Always"),
            "LeaderWorkerSet schema: spec.leaderWorkerTemplate.restartPolicy",
        ),
        (lambda o: _lws_edit(o, "size", 0), "LeaderWorkerSet schema: spec.leaderWorkerTemplate.size"),
        (lambda o: _lws_edit(o, "groupSize", 2), "LeaderWorkerSet schema"),
        (
            lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(gpus=1),
            "Kubernetes 1.33.0 schema",
        ),
        (
            lambda o: o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["volumes"][1]["emptyDir"].update(
                medium=3
            ),
            "Kubernetes 1.33.0 schema",
        ),
    ],
    ids=["restart-policy", "size-0", "unknown-field", "unknown-container-field", "medium-not-string"],
)
def test_schemas_refuse_a_broken_leaderworkerset(edit, message):
    lws, _service = objects(MULTI)
    broken = copy.deepcopy(lws)
    edit(broken)
    with pytest.raises(ManifestInvalid) as info:
        validate([broken], "test")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_schemas_refuse_a_broken_deployment():
    deployment, _service = objects(SINGLE)
    deployment["spec"]["replicas"] = "one"
    with pytest.raises(ManifestInvalid, match="Kubernetes 1.33.0 schema: spec.replicas"):
        validate([deployment], "test")


def test_preflight_fast_path_knows_the_pods_args():
    recipe = load_recipe(MULTI)
    checked = checked_serve(recipe, gate_input(recipe))
    lws, _ = objects(MULTI)
    group = lws["spec"]["leaderWorkerTemplate"]
    for key, index in (("leaderTemplate", 0), ("workerTemplate", 1)):
        env = {"LWS_LEADER_ADDRESS": "glm53-0.glm53.ns", "LWS_WORKER_INDEX": str(index)}
        args = [_expand(a, env) for a in group[key]["spec"]["containers"][0]["args"]]
        assert checked.as_built(tuple(args)), key


def test_cli_writes_and_refuses(tmp_path):
    run = build(
        "deploy",
        "--target",
        "k8s",
        "--recipe",
        str(MULTI),
        "-o",
        str(tmp_path),
        "--owner",
        "someone",
        "--models-pvc",
        "glm-models",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["serve_args"] == {
        "leaderTemplate (LWS_WORKER_INDEX 0)": "passed",
        "workerTemplate (LWS_WORKER_INDEX 1)": "passed",
    }
    docs = [d for d in yaml.safe_load_all(Path(result["path"]).read_text()) if d]
    assert [d["kind"] for d in docs] == ["LeaderWorkerSet", "Service"]
    volumes = docs[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"]
    assert volumes[0] == {"name": "models", "persistentVolumeClaim": {"claimName": "glm-models", "readOnly": True}}
    both = build(
        "deploy",
        "--target",
        "k8s",
        "--recipe",
        str(MULTI),
        "-o",
        str(tmp_path),
        "--owner",
        "someone",
        "--models-pvc",
        "m",
        "--models-host-path",
        "/models",
    )
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "give one, not both" in both.stderr
    env = {k: v for k, v in os.environ.items() if k != "IMAGE_OWNER"}
    no_owner = build("deploy", "--target", "k8s", "--recipe", str(MULTI), "-o", str(tmp_path), env=env)
    assert no_owner.returncode == 2 and "no image owner" in no_owner.stderr
    for option in ("--api-key-secret", "--image-pull-secret"):
        bad = build(
            "deploy",
            "--target",
            "k8s",
            "--recipe",
            str(MULTI),
            "-o",
            str(tmp_path),
            "--owner",
            "someone",
            option,
            "Not_A_Name",
        )
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and f"{option}: 'Not_A_Name'" in bad.stderr


def test_cli_wires_the_api_key_secret_and_pull_secret(tmp_path):
    run = build(
        "deploy",
        "--target",
        "k8s",
        "--recipe",
        str(SINGLE),
        "-o",
        str(tmp_path),
        "--owner",
        "someone",
        "--api-key-secret",
        "glm-key",
        "--image-pull-secret",
        "ghcr-pull",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    text = Path(json.loads(run.stdout)["path"]).read_text()
    deployment = [d for d in yaml.safe_load_all(text) if d][0]
    spec = deployment["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}]
    assert _api_key_env(spec["containers"][0])["secretKeyRef"]["name"] == "glm-key"
    assert "&" not in text.replace("&&", "") and "*id" not in text


def test_every_pod_of_a_pinned_group_knows_the_image_digest_for_the_ranks_fingerprint():
    """The pre-flight cannot read its own image's digest: the LeaderWorkerSet passes it when it pins one."""
    from geometry.preflight.fingerprint import IMAGE_DIGEST_ENV

    digest = "sha256:" + "e" * 64
    pinned, _service = objects(MULTI, image_digest=digest)
    unpinned, _service = objects(MULTI)
    for lws, want in ((pinned, digest), (unpinned, None)):
        group = lws["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            env = {e["name"]: e.get("value") for e in group[key]["spec"]["containers"][0]["env"]}
            assert env.get(IMAGE_DIGEST_ENV) == want
    assert validate([pinned], "lws.yaml")
