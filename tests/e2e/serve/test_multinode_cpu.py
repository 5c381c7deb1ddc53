"""Beyond one machine, for real: the role files `build.py compose` writes for a multi-node recipe start a
vLLM tensor-parallel group across two containers, which serves with the ranks' check on.

The recipe (tests/recipes/cpu-multinode): the hybrid DFlash pair of tests/recipes/cpu-hybrid-dflash at
TP 2 over two nodes, one rank per node, on vLLM's CPU build 0.32.0. `build.py build --push` makes its
image (the overlay applied, gated in the image); `build.py compose` writes the leader's and the worker's
files exactly as for recipes/glm53-flash-dflash2-2x-gb10; each file is started with `docker compose up`
from its own directory, as on its own machine, both on this host's network (the files use host
networking), the leader's address 127.0.0.1 and the interface `lo`. vLLM forms the group (gloo over TCP),
the leader's health check turns healthy and `build.py qualify` passes against it.

What only this host needs, in each role's env file (`cpu-multinode.env`, which the files read): both
"nodes" share two cores, so each rank is bound to its own (VLLM_CPU_OMP_THREADS_BIND, ``BIND``); and
each container gets its own IPC namespace over the files' ``ipc: host`` (``ONE_HOST``). Two real
machines need neither. What the CPU build needs on any host is in the recipe
(`--distributed-executor-backend mp`, eager, VLLM_CPU_KVCACHE_SPACE).

Faults, each with its exit code and the servers it needs: a worker that never starts (no vLLM: the
leader's pre-flight waits its window, ``MISSING_WINDOW_S``, and exits 28 naming node rank 1); a worker
on another drafter snapshot (no vLLM: both refuse, exit 27); a worker killed mid-serve (the one group
this module starts, last: the leader's health check turns unhealthy, `qualify` exits 20). Every
`compose down` leaves no container or volume of its project.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from compose_support import require_compose_binary
from cpu_hybrid_cases import RECIPE_DIR as HYBRID_RECIPE_DIR
from hybrid_checkpoints import write_checkpoints
from models_support import cache_snapshot
from stack_e2e import TEST_RECIPES, cli, docker_login, qualify_live, recipe_copy, unique_repository

from geometry.preflight.checked import MASTER_ADDR_SLOT
from geometry.preflight.outcome import EXIT_RANK_MISSING, EXIT_RANKS_DIFFER
from geometry.preflight.ranks import TIMEOUT_ENV
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import LEADER, WORKER, role_commands
from stackbuild.serve.multinode import LEADER_ADDRESS_VARIABLE

pytestmark = pytest.mark.docker

RECIPE = "cpu-multinode"
KEY = "multinode-test-key"
# This host's values of the variables the files require (the user's ./.env on each machine).
VARIABLES = {LEADER_ADDRESS_VARIABLE: "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
# Both ranks on one 2-core host: each its own core. vLLM's CPU worker reads it (cpu_worker.py).
BIND = {LEADER: {"VLLM_CPU_OMP_THREADS_BIND": "0"}, WORKER: {"VLLM_CPU_OMP_THREADS_BIND": "1"}}
GROUP_WINDOW_S = 600  # the fingerprint window while both start (the default)
MISSING_WINDOW_S = 15  # the window of the leader whose worker never starts
HEALTHY_WITHIN_S = 1200  # two ranks import, load and plan on two busy cores, + the check interval
# Each "node" its own IPC namespace, as on two machines. The files say `ipc: host`; two containers with the
# host's shared memory on one host look like one node to vLLM (its same-node test opens the other rank's
# shared memory), which then waits on ZeroMQ sockets under the other container's /tmp: the group never forms.
ONE_HOST = {"ipc": "private", "shm_size": "1gb"}
# The leader's probe, faster than the file's (30 s x 3) so that the test sees it turn within minutes.
PROBE = {"interval": "5s", "timeout": "4s", "retries": 2}
READINESS_EXIT = 20  # qualify: nothing answers, or no generation streamed its first token (stackbuild/core/errors.py)


@dataclass(frozen=True)
class Setup:
    recipe: Path
    docker_config: Path
    repository: str
    models: Path
    work: Path
    port: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def test_the_recipes_configs_are_the_hybrid_recipes():
    # The checkpoints (tests/hybrid_checkpoints.py) are written from cpu-hybrid-dflash's configs.
    for name in ("target", "drafter"):
        mine = TEST_RECIPES / RECIPE / "configs" / f"{name}.config.json"
        assert mine.read_bytes() == (HYBRID_RECIPE_DIR / "configs" / f"{name}.config.json").read_bytes(), name


@pytest.fixture(scope="module")
def setup(tmp_path_factory, cpu_serving_base_pushed, registry) -> Setup:
    work = tmp_path_factory.mktemp("multinode")
    base = cpu_serving_base_pushed
    port = _free_port()  # host networking: the leader's API binds serving.port on this host

    def edit(data: dict) -> None:
        data["serving"]["port"] = port

    recipe = recipe_copy(work, RECIPE, base=base.image, tag=base.tag, digest=base.digest, edit=edit)
    models = work / "models"
    write_checkpoints(models)
    for path in [models, *models.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    repository = unique_repository(registry.address, RECIPE)
    return Setup(recipe, docker_login(work, registry), repository, models, work, port)


@pytest.fixture(scope="module")
def image(setup) -> dict:
    report = setup.work / "build-report.json"
    r = cli(
        "build", "--recipe", str(setup.recipe), "--repository", setup.repository, "--push", "--report", str(report),
        docker_config_dir=setup.docker_config,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(report.read_text())


def role_files(setup: Setup, image: dict, name: str, models: dict[str, Path] | None = None) -> dict[str, Path]:
    """`build.py compose` for the pushed image, each role's file moved into a directory of its own (its
    "machine", with its ./.env of the variables and its env file)."""
    models = models or {}
    files = {}
    for role in (LEADER, WORKER):
        if role in files:
            continue
        out = setup.work / name / f"written-{role}"
        out.mkdir(parents=True)
        where = models.get(role, setup.models)
        wrote = cli(
            "compose", "--recipe", str(setup.recipe), "-o", str(out), "--repository", setup.repository,
            "--digest", image["pushed_digest"], "--models-dir", str(where), "--json",
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr
        for each, path in json.loads(wrote.stdout)["paths"].items():
            if each not in files and models.get(each, setup.models) == where:
                machine = setup.work / name / each
                machine.mkdir()
                files[each] = machine / Path(path).name
                shutil.move(path, files[each])
    return files


@dataclass
class Role:
    role: str
    base: list[str]  # the docker compose command line of this role's project
    project: str

    def container(self) -> str:
        out = subprocess.run([*self.base, "ps", "-a", "-q", self.role], capture_output=True, text=True).stdout
        return out.strip()

    def state(self) -> dict:
        c = self.container()
        return json.loads(docker("inspect", "--format", "{{json .State}}", c).stdout) if c else {}

    def logs(self) -> str:
        r = docker("logs", self.container())
        return r.stdout + r.stderr


def start(path: Path, role: str, env: dict[str, str], *, probe: bool = False) -> Role:
    """`docker compose up -d` of one role's file from its directory, with ``env`` in its env file."""
    binary = require_compose_binary()
    machine = path.parent
    (machine / ".env").write_text("".join(f"{k}={v}\n" for k, v in VARIABLES.items()))
    (machine / f"{RECIPE}.env").write_text("".join(f"{k}={v}\n" for k, v in {**BIND[role], **env}.items()))
    project = f"glm53-mn-{role}-{uuid.uuid4().hex[:8]}"
    override = {"volumes": {"kernel-cache": {"name": f"{project}-kernels"}}, "services": {role: ONE_HOST}}
    if probe:
        override["services"][role] = {**ONE_HOST, "healthcheck": PROBE}
    (machine / "test.override.yaml").write_text(json.dumps(override))
    base = [binary, "--project-directory", str(machine), "-f", str(path), "-f", str(machine / "test.override.yaml")]
    base += ["-p", project]
    up = subprocess.run([*base, "up", "-d", "--pull", "never"], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    return Role(role, base, project)


def down(role: Role) -> None:
    """`compose down`, which must leave no container or volume of the project."""
    r = subprocess.run(
        [*role.base, "down", "--volumes", "--remove-orphans", "--timeout", "10"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    label = f"label=com.docker.compose.project={role.project}"
    assert not docker("ps", "-a", "-q", "--filter", label).stdout.strip()
    assert not docker("volume", "ls", "-q", "--filter", label).stdout.strip()


@contextlib.contextmanager
def roles(*started):
    try:
        yield started
    finally:
        for r in started:
            down(r)


def wait_for(role: Role, done, within_s: float, every_s: float = 2.0) -> dict:
    """Poll the container's state until ``done(state)`` or the time is up; the last state."""
    deadline = time.monotonic() + within_s
    state = role.state()
    while not done(state) and time.monotonic() < deadline:
        time.sleep(every_s)
        state = role.state()
    return state


def exit_codes(role: Role, since: float) -> list[int]:
    """The exit codes the role's container died with since ``since`` (the restart policy starts it again,
    so its state shows only the run it is in): the engine's `die` events."""
    r = docker(
        "events", "--since", str(int(since) - 1), "--until", str(int(time.time()) + 1),
        "--filter", f"container={role.container()}", "--filter", "event=die",
        "--format", '{{index .Actor.Attributes "exitCode"}}',
    )  # fmt: skip
    return [int(code) for code in r.stdout.split()]


def wait_for_exit(role: Role, since: float, within_s: float) -> list[int]:
    """Until the role's container has died at least once; the exit codes."""
    deadline = time.monotonic() + within_s
    codes = exit_codes(role, since)
    while not codes and time.monotonic() < deadline:
        time.sleep(2)
        codes = exit_codes(role, since)
    return codes


def fail_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith("pre-flight: FAIL")]


def test_a_worker_that_never_starts_is_a_missing_rank_on_the_leader(setup, image):
    files = role_files(setup, image, "missing")
    since, started = time.time(), time.monotonic()
    with roles(start(files[LEADER], LEADER, {TIMEOUT_ENV: str(MISSING_WINDOW_S)})) as (leader,):
        codes = wait_for_exit(leader, since, 300)
        took = time.monotonic() - started
        log = leader.logs()
    assert codes and codes[0] == EXIT_RANK_MISSING, (codes, log[-3000:])
    assert fail_lines(log)[0] == (
        f"pre-flight: FAIL: node rank(s) 1 did not fetch the leader's fingerprint from port 29502 within "
        f"{MISSING_WINDOW_S} s ({TIMEOUT_ENV}): not started, not reaching this leader, or started with "
        "GLM53_PREFLIGHT=off (vLLM's own rendezvous would wait far longer)"
    ), log[-3000:]
    assert "offering this rank's fingerprint to node rank(s) 1" in log
    assert "Initializing a V1 LLM engine" not in log  # vLLM never started
    assert took < 300  # the window and the start, not vLLM's own rendezvous timeout
    assert "a worker never fetched it (the line names the node rank)" in EXIT_RANK_MISSING.meaning


def snapshot_models(setup: Setup, name: str, drafter_commit: str) -> Path:
    """A models directory whose drafter is a Hugging Face cache snapshot of ``drafter_commit`` (the same files);
    the target a plain copy."""
    root = setup.work / name
    root.mkdir()
    shutil.copytree(setup.models / "target", root / "target")
    files = {p.name: p.read_bytes() for p in (setup.models / "drafter").iterdir() if p.is_file()}
    snapshot = cache_snapshot(root / "hub", "glm53-test/tiny-qwen3-next-dflash", drafter_commit, files)
    (root / "drafter").symlink_to(snapshot.relative_to(root))
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return root


def test_a_worker_on_another_drafter_snapshot_is_refused_by_both(setup, image):
    here, there = "a" * 40, "b" * 40
    models = {
        LEADER: snapshot_models(setup, "leader-models", here),
        WORKER: snapshot_models(setup, "worker-models", there),
    }
    files = role_files(setup, image, "differ", models=models)
    env = {TIMEOUT_ENV: "300"}
    since = time.time()
    with roles(start(files[LEADER], LEADER, env), start(files[WORKER], WORKER, env)) as (leader, worker):
        codes = {r.role: wait_for_exit(r, since, 600) for r in (worker, leader)}
        logs = {r.role: r.logs() for r in (leader, worker)}
    for role in (LEADER, WORKER):
        assert codes[role] and codes[role][0] == EXIT_RANKS_DIFFER, (role, codes[role], logs[role][-3000:])
        assert "Initializing a V1 LLM engine" not in logs[role]
    (worker_line,) = set(fail_lines(logs[WORKER]))
    assert worker_line.endswith(
        f"node rank 1 differs from its leader (127.0.0.1:29502) at drafter_revision: here {there}, leader {here}"
    ), worker_line
    (leader_line,) = set(fail_lines(logs[LEADER]))
    assert leader_line.endswith(
        f"node rank 1 differs from this leader at drafter_revision: leader {here}, node rank 1 {there}"
    ), leader_line


@dataclass(frozen=True)
class Group:
    leader: Role
    worker: Role
    url: str
    leader_log: str


@pytest.fixture(scope="module")
def group(setup, image):
    files = role_files(setup, image, "group")
    env = {TIMEOUT_ENV: str(GROUP_WINDOW_S), "VLLM_API_KEY": KEY}
    with roles(start(files[LEADER], LEADER, env, probe=True), start(files[WORKER], WORKER, env)) as (leader, worker):
        state = wait_for(
            leader,
            lambda s: s.get("Health", {}).get("Status") == "healthy" or s.get("Status") != "running",
            HEALTHY_WITHIN_S,
            5,
        )
        assert state.get("Health", {}).get("Status") == "healthy", (
            state.get("Status"),
            leader.logs()[-4000:],
            worker.logs()[-4000:],
        )
        yield Group(leader, worker, f"http://127.0.0.1:{setup.port}", leader.logs())


def qualify(setup: Setup, group: Group, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    return qualify_live(setup.recipe, group.url, group.leader.logs(), out, KEY, *args)


def test_the_group_forms_with_both_ranks_checked_and_agreeing(group):
    leader, worker = group.leader_log, group.worker.logs()
    for log in (leader, worker):
        first = next(line for line in log.splitlines() if line.startswith("pre-flight:"))
        assert first.startswith("pre-flight: PASS"), log[:3000]
    assert "ranks agree: node rank 1's fingerprint is its leader's (127.0.0.1:29502)" in worker
    assert "every worker (node rank(s) 1) fetched the leader's fingerprint and sent its own, the same" in leader
    # vLLM's own word: rank 0 (the leader) and rank 1 (the worker) of one group of two, over gloo.
    for log, rank in ((leader, 0), (worker, 1)):
        assert re.search(
            rf"world_size=2 rank={rank} .*distributed_init_method=tcp://127\.0\.0\.1:29501 backend=gloo", log
        )
    assert "world_size=2, local_world_size=1" in leader  # the executor: one rank here, one on the other node


def test_qualify_passes_against_the_leader(setup, group, tmp_path):
    r, result = qualify(setup, group, tmp_path / "group")
    assert r.returncode == 0, (r.stderr[-3000:], group.leader.logs()[-6000:], group.worker.logs()[-3000:])
    kv = result["kv_cache"]
    assert kv["behaviour"] == "overlay" and kv["differences"] == []
    assert all(f["matches"] for f in kv["figures"])
    spec = result["spec_decode"]
    assert spec["configured"] and spec["drafts"] > 0


def test_the_containers_run_the_commands_of_the_leaderworkerset(setup, image, group, tmp_path):
    """One source: the LeaderWorkerSet's leader and worker args are the argv the containers ran, but for
    the slots (the leader's address, a worker's rank, the bind address) each deploy target fills its way."""
    from stackbuild.serve.k8s_validate import validate

    r = cli(
        "deploy", "--target", "k8s", "--recipe", str(setup.recipe), "--repository", setup.repository,
        "--digest", image["pushed_digest"], "-o", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr  # the command checks its manifests (exit 18 otherwise)
    (path,) = tmp_path.glob("*.k8s.yaml")
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert validate(
        documents, str(path)
    )  # the Kubernetes and LeaderWorkerSet schemas, as tests/unit/stackbuild/serve/test_deploy_k8s.py
    (lws,) = [d for d in documents if d["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    pods = {LEADER: template["leaderTemplate"], WORKER: template["workerTemplate"]}
    commands = {c.role: c for c in role_commands(load_recipe(setup.recipe))}
    for role, running in ((LEADER, group.leader), (WORKER, group.worker)):
        ran = json.loads(docker("inspect", "--format", "{{json .Config.Cmd}}", running.container()).stdout)
        (container,) = pods[role]["spec"]["containers"]
        args = container["args"]
        assert len(ran) == len(args) == len(commands[role].argv), role
        slots = set(commands[role].slots.values())
        assert [a for i, a in enumerate(ran) if i not in slots] == [a for i, a in enumerate(args) if i not in slots]
        assert ran[commands[role].slots[MASTER_ADDR_SLOT]] == VARIABLES[LEADER_ADDRESS_VARIABLE]


def test_a_worker_killed_mid_serve_turns_the_leader_unhealthy_and_qualify_fails(setup, group, tmp_path):
    # Last in the module: it ends the group. The leader's engine dies at the next generation, its API server
    # exits and the restart policy starts it again (health `starting`, the pre-flight waiting for rank 1).
    assert docker("kill", group.worker.container()).returncode == 0
    r, _ = qualify(setup, group, tmp_path / "killed", "--ready-timeout", "20")
    assert r.returncode == READINESS_EXIT, (r.returncode, r.stderr[-3000:])
    # 20 is also "nothing answers": the message says which. The leader answered (the model and the counters were
    # read before any generation); its readiness generation is what failed, first with the engine's own error.
    said = r.stderr.strip().splitlines()[-1]
    assert said.endswith("(still, after the readiness timeout: --ready-timeout)"), said
    first = said.split("; then ")[0]
    assert "the server ended the stream with an error" in first or "HTTP 500" in first, said
    state = wait_for(group.leader, lambda s: s.get("Health", {}).get("Status") != "healthy", 300, 2)
    assert state.get("Health", {}).get("Status") != "healthy", state
