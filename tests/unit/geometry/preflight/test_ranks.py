"""The ranks of a multi-node group agree before vLLM starts: the fingerprint, the launch flags, the exchange.

The fingerprint diff is checked property-based (any single field changed is named as that
field; the first of several in the definition's order); the exchange runs for real over
loopback sockets (the leader's offer in a thread, the worker's fetch in the test), with short
timeouts the tests set. The two-container case is tests/e2e/serve/test_multinode_rendezvous.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models_support import COMMIT, cache_models_dir, models_dir
from support.repo import REPO

from geometry.preflight import outcome
from geometry.preflight.check import check
from geometry.preflight.fingerprint import NOT_COMPARED, SCHEMA, Fingerprint, FingerprintUnreadable, first_difference
from geometry.preflight.launch import DEFAULT_MASTER_PORT, Launch, LaunchUnreadable, launch_of
from geometry.preflight.ranks import PORT_ENV, TIMEOUT_ENV, agree, compare, kv_pool_line, offer
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import role_commands

RECIPE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml")
CHECKED = checked_serve(RECIPE, gate_input(RECIPE))
NAMES = [f.name for f in fields(Fingerprint) if f.name not in NOT_COMPARED]
MAPPINGS = ("image_labels", "geometry", "served_flags")

# --- the diff ------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.text(max_size=12))
hexes = st.text("0123456789abcdef", min_size=40, max_size=40)
text_maps = st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=4)
value_maps = st.dictionaries(st.text(min_size=1, max_size=8), scalars, max_size=5)
fingerprints = st.builds(
    Fingerprint,
    image_labels=st.one_of(st.none(), text_maps),
    image_digest=st.one_of(st.none(), hexes),
    series_sha256=st.one_of(st.none(), hexes),
    target_revision=st.one_of(st.none(), hexes),
    target_config_sha256=hexes,
    drafter_revision=st.one_of(st.none(), hexes),
    drafter_config_sha256=st.one_of(st.none(), hexes),
    geometry=value_maps,
    served_flags=value_maps,
    kv_cache_memory_bytes=st.one_of(st.none(), st.integers(0, 2**50)),
)


def changed(fp: Fingerprint, name: str, data) -> tuple[Fingerprint, str]:
    """``fp`` with field ``name`` changed, and the name the diff must give."""
    value = getattr(fp, name)
    if name in MAPPINGS and value:
        key = data.draw(st.sampled_from(sorted(value)))
        new = dict(value)
        new[key] = data.draw(st.text(max_size=8).filter(lambda v: v != value[key]))
        return replace(fp, **{name: new}), f"{name}[{key}]"
    if name in MAPPINGS:  # empty, or no labels at all: one entry more
        named = name if value is None else f"{name}[k]"
        return replace(fp, **{name: {"k": "v"}}), named
    if name == "target_config_sha256":
        new = data.draw(hexes.filter(lambda v: v != value))
    else:
        new = data.draw(st.one_of(st.none(), hexes).filter(lambda v: v != value))
    return replace(fp, **{name: new}), name


@settings(max_examples=200, deadline=None)
@given(fp=fingerprints, name=st.sampled_from(NAMES), data=st.data())
def test_any_single_field_changed_is_named_as_that_field(fp, name, data):
    other, named = changed(fp, name, data)
    diff = first_difference(fp, other)
    assert diff is not None and diff.field == named
    assert first_difference(other, fp).field == named
    assert first_difference(fp, fp) is None


@settings(max_examples=100, deadline=None)
@given(fp=fingerprints, two=st.lists(st.sampled_from(NAMES), min_size=2, max_size=2, unique=True), data=st.data())
def test_of_several_fields_changed_the_first_in_the_definitions_order_is_named(fp, two, data):
    first, second = sorted(two, key=NAMES.index)
    other, named = changed(fp, first, data)
    other, _ = changed(other, second, data)
    assert first_difference(fp, other).field == named


@settings(max_examples=100, deadline=None)
@given(fp=fingerprints, budget=st.one_of(st.none(), st.integers(0, 2**50)))
def test_the_kv_budget_is_sent_but_never_a_difference(fp, budget):
    """Each rank's KV budget follows its GPU's memory; vLLM plans every rank with the smallest."""
    other = replace(fp, kv_cache_memory_bytes=budget)
    assert first_difference(fp, other) is None
    assert Fingerprint.from_json(json.loads(other.to_bytes())).kv_cache_memory_bytes == budget


def test_the_leader_says_which_ranks_budget_vllm_plans_with():
    gib = 2**30
    assert kv_pool_line(40 * gib, {1: 40 * gib}) == (
        "pre-flight: KV budget: 40.00 GiB on every rank that sent one (node rank(s) 0, 1)"
    )
    assert kv_pool_line(40 * gib, {1: 38 * gib, 2: 39 * gib, 3: None}) == (
        "pre-flight: KV budget: the ranks' differ; vLLM plans every rank with the smallest, 38.00 GiB "
        f"({38 * gib:,} B, node rank 1); this rank has 40.00 GiB"
    )
    assert kv_pool_line(None, {1: None}) is None


@settings(max_examples=100, deadline=None)
@given(fp=fingerprints)
def test_it_survives_the_wire(fp):
    assert Fingerprint.from_json(json.loads(fp.to_bytes())) == fp


def test_the_line_shows_both_values():
    base = Fingerprint(None, None, None, "1" * 40, "a" * 64, "2" * 40, "b" * 64, {"block_size": 64}, {})
    diff = first_difference(base, replace(base, drafter_revision=None))
    assert (diff.field, diff.here, diff.there) == ("drafter_revision", "2" * 40, "none")
    diff = first_difference(base, replace(base, geometry={}))
    assert (diff.field, diff.here, diff.there) == ("geometry[block_size]", "64", "(absent)")


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda d: d.update(schema="glm53-rank-fingerprint/0"), "this image reads"),
        (lambda d: d.pop("geometry"), "missing key 'geometry'"),
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d.update(image_labels={"a": 1}), "image_labels: not an object of strings"),
        (lambda d: d.update(drafter_revision=7), "drafter_revision: not a string"),
        (lambda d: d.update(served_flags=[]), "served_flags: not a JSON object"),
        (lambda d: d.update(kv_cache_memory_bytes=-1), "kv_cache_memory_bytes: not a number of bytes"),
        (lambda d: d.update(kv_cache_memory_bytes=True), "kv_cache_memory_bytes: not a number of bytes"),
        (lambda d: d.pop("kv_cache_memory_bytes"), "missing key 'kv_cache_memory_bytes'"),
    ],
)
def test_a_fingerprint_of_another_shape_is_named(edit, named):
    data = Fingerprint(None, None, None, None, "a" * 64, None, None, {}, {}).to_json()
    assert data["schema"] == SCHEMA
    edit(data)
    with pytest.raises(FingerprintUnreadable, match=named):
        Fingerprint.from_json(data)


# --- what the check puts in it ------------------------------------------------------------


def role_argv(role: str, leader: str = "127.0.0.1") -> list[str]:
    from stackbuild.core.serve_args import SlotValues

    command = next(c for c in role_commands(RECIPE) if c.role == role)
    return command.filled(SlotValues(host="0.0.0.0", master_addr=leader, node_rank="1"))


def checked_fingerprint(models: Path, role: str = "worker") -> Fingerprint:
    result = check(
        role_argv(role), CHECKED, locate=lambda p: p.replace("/models", str(models), 1), overlay_manifest=None
    )
    assert result.passed, result.lines
    return result.fingerprint


def test_the_check_fingerprints_the_mounted_commits_configs_geometry_and_flags(tmp_path):
    cache = checked_fingerprint(cache_models_dir(tmp_path / "cache"))
    assert (cache.target_revision, cache.drafter_revision) == (COMMIT["target"], COMMIT["drafter"])
    assert cache.target_config_sha256 == CHECKED.target.config_sha256
    assert cache.drafter_config_sha256 == CHECKED.drafter.config_sha256
    assert cache.geometry["tensor_parallel_size"] == RECIPE.serving.tensor_parallel_size
    assert "target_config" not in cache.geometry
    # Each rank's KV budget is its own (its GPU's memory; vLLM plans with the smallest): not compared.
    assert "kv_cache_memory_bytes" not in cache.geometry
    assert cache.kv_cache_memory_bytes == RECIPE.geometry.kv_cache_memory_gib * 2**30  # no GPU here: the recipe's
    assert cache.served_flags["max_model_len"] == RECIPE.serving.max_model_len
    assert cache.image_labels is None  # the image's part is run.py's
    # The leader's and the worker's argv differ only in launch flags: the same fingerprint.
    assert checked_fingerprint(cache_models_dir(tmp_path / "cache2"), "leader") == cache
    plain = checked_fingerprint(models_dir(tmp_path / "plain"))
    assert (plain.target_revision, plain.drafter_revision) == (None, None)
    other = checked_fingerprint(cache_models_dir(tmp_path / "other", {"drafter": "3" * 40}))
    diff = first_difference(other, cache)
    assert (diff.field, diff.here, diff.there) == ("drafter_revision", "3" * 40, COMMIT["drafter"])


# --- the launch flags ---------------------------------------------------------------------


def test_the_launch_flags_as_vllm_spells_them():
    assert launch_of(role_argv("worker", "10.0.0.1")) == Launch(2, 1, "10.0.0.1", DEFAULT_MASTER_PORT)
    assert launch_of(["/m", "-n=3", "--node_rank=2", "--master_addr", "h", "--master_port=1"]) == Launch(3, 2, "h", 1)
    assert launch_of(["/m", "--speculative-config", '{"x": 1}', "--max-model-len", "-1"]) is None
    assert launch_of(list(CHECKED.argv)) is None
    with pytest.raises(LaunchUnreadable, match="--nnodes"):
        launch_of(["/m", "--nnodes", "two"])


# --- the exchange over loopback -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FP = Fingerprint(
    {"a": "1"}, None, "c" * 64, "1" * 40, "a" * 64, "2" * 40, "b" * 64, {"block_size": 64}, {"max_model_len": 8}
)


def rank(
    fp: Fingerprint, port: int, node_rank: int, nnodes: int, timeout: float, tmp: Path, say=lambda line: None
) -> outcome.Outcome:
    """One rank's part as the entrypoint runs it (the image's part from files under ``tmp``: none)."""
    env = {PORT_ENV: str(port), TIMEOUT_ENV: str(timeout)}
    return agree(
        fp,
        Launch(nnodes, node_rank, "127.0.0.1", port - 1),
        labels_path=str(tmp / "none.json"),
        overlay_manifest=None,
        environ=env,
        say=say,
    )


def leader_thread(fp: Fingerprint, nnodes: int, port: int, window: float, tmp: Path):
    result, said = {}, []
    thread = threading.Thread(
        target=lambda: result.update(out=rank(fp, port, 0, nnodes, window, tmp, said.append)), daemon=True
    )
    thread.start()
    return thread, result, said


def worker(
    fp: Fingerprint, port: int, node_rank: int = 1, timeout: float = 5, nnodes: int = 2, tmp=None
) -> outcome.Outcome:
    return rank(fp, port, node_rank, nnodes, timeout, tmp)


def test_a_worker_with_the_leaders_fingerprint_passes_and_the_leader_stops_once_all_fetched(tmp_path):
    port = free_port()
    thread, result, said = leader_thread(FP, 3, port, 10, tmp_path)
    assert worker(FP, port, 1, nnodes=3, tmp=tmp_path).passed
    assert thread.is_alive()  # rank 2 has not fetched yet
    start = time.monotonic()
    second = worker(FP, port, 2, nnodes=3, tmp=tmp_path)
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - start < 3
    assert second.passed and "ranks agree: node rank 2" in second.lines[0]
    assert result["out"].passed and "every worker (node rank(s) 1, 2) fetched" in result["out"].lines[0]
    assert f"on port {port}" in said[0]
    # Nothing listens on the port any more (a server of vLLM's could bind it: SO_REUSEADDR, as servers do,
    # past the TIME_WAIT of the answered connections).
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))


def test_a_worker_that_differs_is_refused_naming_the_field_and_both_values(tmp_path):
    port = free_port()
    thread, result, _said = leader_thread(FP, 2, port, 10, tmp_path)
    mine = replace(FP, drafter_revision="3" * 40)
    refused = worker(mine, port, tmp=tmp_path)
    thread.join(5)
    assert refused.code == outcome.EXIT_RANKS_DIFFER == 27
    assert refused.lines == (
        f"pre-flight: FAIL: node rank 1 differs from its leader (127.0.0.1:{port}) at "
        f"drafter_revision: here {'3' * 40}, leader {'2' * 40}",
    )
    # The leader refuses too: it does not go on into vLLM's rendezvous to wait for a rank that stopped.
    assert not thread.is_alive() and result["out"].code == 27
    assert result["out"].lines == (
        "pre-flight: FAIL: node rank 1 differs from this leader at drafter_revision: "
        f"leader {'2' * 40}, node rank 1 {'3' * 40}",
    )


def test_a_worker_with_a_smaller_kv_budget_agrees_and_the_leader_names_the_pool(tmp_path):
    port = free_port()
    leader_fp = replace(FP, kv_cache_memory_bytes=40 * 2**30)
    thread, result, _said = leader_thread(leader_fp, 2, port, 10, tmp_path)
    assert worker(replace(FP, kv_cache_memory_bytes=38 * 2**30), port, tmp=tmp_path).passed
    thread.join(5)
    assert result["out"].passed
    assert result["out"].lines[1] == (
        "pre-flight: KV budget: the ranks' differ; vLLM plans every rank with the "
        f"smallest, 38.00 GiB ({38 * 2**30:,} B, node rank 1); this rank has 40.00 GiB"
    )


def test_the_leader_names_the_first_differing_rank_of_several(tmp_path):
    port = free_port()
    thread, result, _said = leader_thread(FP, 4, port, 10, tmp_path)
    assert worker(replace(FP, target_revision="4" * 40), port, 3, nnodes=4, tmp=tmp_path).code == 27
    assert worker(FP, port, 1, nnodes=4, tmp=tmp_path).passed
    assert worker(replace(FP, target_config_sha256="d" * 64), port, 2, nnodes=4, tmp=tmp_path).code == 27
    thread.join(5)
    assert result["out"].lines == (
        "pre-flight: FAIL: node rank 2 differs from this leader at target_config_sha256: "
        f"leader {'a' * 64}, node rank 2 {'d' * 64} (and 1 more node rank(s))",
    )


def listening(said: list[str]) -> None:
    """Until the leader's thread has bound its port (it says so right after)."""
    deadline = time.monotonic() + 5
    while not said and time.monotonic() < deadline:
        time.sleep(0.01)
    assert said


def test_what_a_worker_sends_that_is_no_fingerprint_refuses_the_leader(tmp_path):
    port = free_port()
    thread, result, said = leader_thread(FP, 2, port, 10, tmp_path)
    listening(said)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/fingerprint?node_rank=1", data=b"<html>", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert Fingerprint.from_json(json.loads(response.read()), "answer").geometry == FP.geometry
    thread.join(5)
    assert result["out"].lines == ("pre-flight: FAIL: node rank 1 sent no JSON fingerprint",)


def test_a_worker_that_only_fetches_is_compared_on_its_side_only(tmp_path):
    port = free_port()
    thread, result, said = leader_thread(FP, 2, port, 10, tmp_path)
    listening(said)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/fingerprint?node_rank=1", timeout=5) as response:
        assert Fingerprint.from_json(json.loads(response.read()), "answer").geometry == FP.geometry
    thread.join(5)
    assert result["out"].passed and "node rank(s) 1 sent none (compared on their side only)" in result["out"].lines[0]


def test_a_leader_that_never_answers_is_a_timeout_line(tmp_path):
    start = time.monotonic()
    result = worker(FP, free_port(), timeout=0.5, tmp=tmp_path)
    assert time.monotonic() - start < 3
    assert result.code == outcome.EXIT_RANK_MISSING == 28
    assert len(result.lines) == 1 and "the leader's fingerprint did not come from 127.0.0.1:" in result.lines[0]
    assert "within 0.5 s" in result.lines[0] and TIMEOUT_ENV in result.lines[0]


def test_an_answer_that_is_not_a_fingerprint_is_refused():
    out = compare(FP, b"<html>", "h:1", 1)
    assert out.code == 27 and "is not JSON" in out.lines[0]
    out = compare(FP, json.dumps({"schema": "x"}).encode(), "h:1", 1)
    assert out.code == 27 and "this image reads" in out.lines[0]


def test_a_leader_whose_workers_never_come_refuses_after_its_window_naming_the_missing_rank():
    start = time.monotonic()
    port = free_port()
    out = offer(FP, Launch(3, 0, "127.0.0.1", 1), port, 0.5, lambda line: None)
    assert out.code == outcome.EXIT_RANK_MISSING == 28 and time.monotonic() - start < 3
    assert out.lines == (
        f"pre-flight: FAIL: node rank(s) 1, 2 did not fetch the leader's fingerprint from port {port} within 0.5 s "
        f"({TIMEOUT_ENV}): not started, not reaching this leader, or started with GLM53_PREFLIGHT=off "
        "(vLLM's own rendezvous would wait far longer)",
    )


def test_a_leader_that_cannot_bind_its_port_says_so():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        out = offer(FP, Launch(2, 0, "127.0.0.1", 1), busy.getsockname()[1], 1, lambda line: None)
    assert out.code == 28 and "cannot offer its fingerprint on port" in out.lines[0] and PORT_ENV in out.lines[0]


@pytest.mark.parametrize(
    "env, named",
    [
        ({PORT_ENV: "0"}, PORT_ENV),
        ({PORT_ENV: "http"}, PORT_ENV),
        ({TIMEOUT_ENV: "-1"}, TIMEOUT_ENV),
        ({TIMEOUT_ENV: "nan"}, TIMEOUT_ENV),
        ({TIMEOUT_ENV: "soon"}, TIMEOUT_ENV),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path, env, named):
    out = agree(
        FP,
        Launch(2, 1, "127.0.0.1", 1),
        labels_path=str(tmp_path / "x"),
        overlay_manifest=None,
        environ=env,
        say=lambda line: None,
    )
    assert out.code == outcome.EXIT_BAD_MODE and len(out.lines) == 1 and named in out.lines[0]


def test_no_fingerprint_no_comparison(tmp_path):
    out = agree(
        None,
        Launch(2, 1, "127.0.0.1", 1),
        labels_path=str(tmp_path / "x"),
        overlay_manifest=None,
        environ={},
        say=lambda line: None,
    )
    assert out.code == outcome.EXIT_UNCHECKED and "no fingerprint" in out.lines[0]


def test_the_image_labels_and_digest_join_the_fingerprint(tmp_path):
    from geometry.preflight.fingerprint import IMAGE_DIGEST_ENV
    from geometry.preflight.ranks import with_image

    labels = tmp_path / "image-labels.json"
    labels.write_text(json.dumps({"labels": {"io.github.glm53.recipe.name": "r"}}))
    fp = with_image(
        replace(FP, image_labels=None),
        labels_path=str(labels),
        overlay_manifest=str(tmp_path / "no"),
        environ={IMAGE_DIGEST_ENV: "sha256:" + "d" * 64},
    )
    assert fp.image_labels == {"io.github.glm53.recipe.name": "r"} and fp.image_digest == "sha256:" + "d" * 64
    assert fp.series_sha256 is None  # no overlay manifest: the patch step did not run
    labels.write_text("{")
    out = agree(
        FP,
        Launch(2, 1, "127.0.0.1", 1),
        labels_path=str(labels),
        overlay_manifest=None,
        environ={},
        say=lambda line: None,
    )
    assert out.code == outcome.EXIT_UNCHECKED and "labels file is unusable" in out.lines[0]
