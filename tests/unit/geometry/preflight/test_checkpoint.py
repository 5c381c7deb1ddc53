"""The start-time check of the mounted checkpoints (geometry/preflight/checkpoint.py,
safetensors_header.py), in process on synthetic checkpoints whose shards the safetensors library
writes (models_support.py): the synthetic checkpoints pass, an incomplete or broken one is one line
naming the file, and the library's reader is the oracle of which edited shards are broken.

Every case runs the check the image's entrypoint runs (geometry.preflight.check.check) on the
default recipe's record: the argv as built, so the fast path (no vLLM).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from models_support import (
    COMMIT,
    DRAFTER_DIR,
    TARGET_DIR,
    cache_models_dir,
    models_dir,
)
from support.mounted_checks import CHECKED, RECIPE, fake_nvidia_smi, no_gpu, pinned, refused_with, run  # noqa: F401
from support.repo import REPO

from geometry.preflight import outcome
from geometry.preflight.checkpoint import snapshot_of
from geometry.preflight.safetensors_header import ShardUnusable, read_header

SHARD1 = "model-00001-of-00002.safetensors"


# --- the synthetic checkpoints pass -----------------------------------------------------------


def test_plain_directories_pass_on_the_fast_path_and_say_they_have_no_commit(tmp_path):
    result = run(models_dir(tmp_path / "models"))
    assert result.passed, result.lines
    assert len(result.lines) == 1
    line = result.lines[0]
    assert line.startswith("pre-flight: PASS: the geometry the build checked (argv as built")
    assert (
        "weights headers complete (target 2 shards, a plain directory: no commit; drafter 1 shard, "
        "a plain directory: no commit)"
    ) in line
    assert line.endswith(
        "KV budget: the recipe's geometry.kv_cache_memory_gib 150.0 GiB "
        "(nvidia-smi exited 9 (NVIDIA-SMI has failed: no devices))"
    )


def test_a_cache_snapshot_unpinned_gets_one_notice_per_model_with_the_commit(tmp_path):
    result = run(cache_models_dir(tmp_path / "models"))
    assert result.passed, result.lines
    assert "target 2 shards, snapshot 111111111111; drafter 1 shard, snapshot 222222222222" in result.lines[0]
    assert result.lines[1:] == (
        f"pre-flight: notice: the target is snapshot 111111111111 of local-inference-lab/GLM-5.3-Flash-NVFP4, "
        f"refs/main, the recipe pins no target.revision: `build.py pin --recipe R --models-dir DIR` writes "
        f"{COMMIT['target']}",
        f"pre-flight: notice: the drafter is snapshot 222222222222 of incoai/GLM-5.3-Flash-DFlash2, refs/main, "
        f"the recipe pins no drafter.revision: `build.py pin --recipe R --models-dir DIR` writes {COMMIT['drafter']}",
    )


def test_the_pinned_commits_pass_without_a_notice(tmp_path):
    result = run(cache_models_dir(tmp_path / "models"), pinned(target=COMMIT["target"], drafter=COMMIT["drafter"]))
    assert result.passed and len(result.lines) == 1, result.lines
    assert "revision 111111111111" in result.lines[0] and "revision 222222222222" in result.lines[0]


def test_another_revision_than_the_pinned_one_is_refused_exit_19(tmp_path):
    models = cache_models_dir(tmp_path / "models")
    message = refused_with(run(models, pinned(drafter="3" * 40)), 26)
    snapshot = (models / "hub" / "models--incoai--GLM-5.3-Flash-DFlash2" / "snapshots" / COMMIT["drafter"]).resolve()
    assert message == (
        f"the drafter {models}/{DRAFTER_DIR} is snapshot 222222222222 of incoai/GLM-5.3-Flash-DFlash2, "
        f"refs/main, not the recipe's drafter.revision {'3' * 40}"
    )
    assert snapshot_of(str(models / DRAFTER_DIR)).directory == str(snapshot)


def test_a_pinned_recipe_on_a_plain_directory_says_it_cannot_compare(tmp_path):
    result = run(models_dir(tmp_path / "models"), pinned(target=COMMIT["target"]))
    assert result.passed
    assert result.lines[1:] == (
        f"pre-flight: notice: {tmp_path / 'models' / TARGET_DIR} is a plain directory (no Hub "
        "commit in its path): the pinned target.revision 111111111111 cannot be compared",
    )


def test_a_snapshot_of_another_repository_is_named(tmp_path):
    models = tmp_path / "models"
    cache_models_dir(models)
    hub = models / "hub"
    (hub / "models--incoai--GLM-5.3-Flash-DFlash2").rename(hub / "models--someone--Other")
    (models / DRAFTER_DIR).unlink()
    (models / DRAFTER_DIR).symlink_to(Path("hub", "models--someone--Other", "snapshots", COMMIT["drafter"]))
    result = run(models)
    assert result.passed
    assert any(
        "is a snapshot of someone/Other, not of the recipe's incoai/GLM-5.3-Flash-DFlash2" in line
        for line in result.lines
    ), result.lines


# --- completeness -------------------------------------------------------------------------------


def _shard(models: Path) -> Path:
    return models / TARGET_DIR / SHARD1


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "truncated",
        "longer",
        "directory",
        "not-json",
        "header-too-long",
        "header-array",
        "bad-offsets",
        "tensor-absent",
        "outside",
        "absolute",
        "symlink-loop",
        "dangling",
        "short",
        "index-not-json",
        "no-weights",
        "shape-not-offsets",
        "unknown-dtype",
        "overlap",
        "gap",
        "header-length-zero",
        "metadata-not-strings",
    ],
)
def test_a_broken_target_checkpoint_is_one_line_exit_16_naming_the_file(tmp_path, case):
    models = models_dir(tmp_path / "models")
    target = models / TARGET_DIR
    shard = _shard(models)
    index = target / "model.safetensors.index.json"
    data = shard.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    # the tensors in the order the library laid their data out
    first, second, third = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"])
    third_at = header[third]["data_offsets"]
    expected = {
        "missing": f"{shard} is missing (model.safetensors.index.json places 3 tensors there): is the download "
        "complete?",
        "truncated": f"{shard} is {len(data) - 1:,} bytes, the header says {len(data):,} (8 + {length:,} header + "
        f"{len(data) - 8 - length:,} data): truncated",
        "longer": f"{shard} is {len(data) + 4:,} bytes, the header says {len(data):,}",
        "directory": f"{shard} is a directory, not a safetensors file",
        "not-json": f"{shard}: the header is not JSON (line 1: Expecting value)",
        "header-too-long": f"{shard}: the header length 4,096 is longer than the file ({len(data):,} bytes)",
        "header-array": f"{shard}: the header is JSON but not an object",
        "bad-offsets": f"{shard}: header entry 'model.layers.0.mlp.weight' has data_offsets [10, 2]",
        "tensor-absent": f"{shard}: has no tensor 'model.layers.0.extra', which model.safetensors.index.json places "
        "there",
        "outside": f"{index}: weight_map names the shard '../{DRAFTER_DIR}/model.safetensors', which is outside "
        "the checkpoint directory",
        "absolute": f"{index}: weight_map names the shard '/etc/passwd', which is outside the checkpoint directory",
        "symlink-loop": f"{shard} cannot be opened: Too many levels of symbolic links",
        "dangling": f"{shard} does not exist (a dangling symlink)",
        "short": f"{shard} is 3 bytes: truncated (no 8-byte header length)",
        "index-not-json": f"{index} is not JSON (line 1: Expecting value)",
        "no-weights": f"the target checkpoint {target} has neither model.safetensors.index.json nor "
        "model.safetensors: no safetensors weights (is the download complete?)",
        # model.layers.0.mlp.weight is U8 [16, 8]: one more row is 16 * 9 * 1 bytes
        "shape-not-offsets": f"{shard}: header entry 'model.layers.0.mlp.weight' is U8 [16, 9]: 144 bytes, not its "
        f"{128:,}",
        "unknown-dtype": f"{shard}: header entry {first!r} has dtype 'U7', which is not a safetensors dtype",
        "overlap": f"{shard}: header entry {second!r} begins at data byte "
        f"{header[first]['data_offsets'][1] - 1:,}, not at {header[first]['data_offsets'][1]:,} where {first!r} "
        f"ends: overlapping {first!r}",
        "gap": f"{shard}: header entry {third!r} begins at data byte {third_at[0] + 4:,}, not at {third_at[0]:,} "
        f"where {second!r} ends: a gap of 4 bytes",
        "header-length-zero": f"{shard}: the header length 0 is shorter than a JSON object: not a safetensors file",
        "metadata-not-strings": f"{shard}: the header's __metadata__ is not an object of strings",
    }[case]
    weight_map = json.loads(index.read_text())
    if case == "missing":
        shard.unlink()
    elif case == "truncated":
        shard.write_bytes(data[:-1])
    elif case == "longer":
        shard.write_bytes(data + b"\0" * 4)
    elif case == "directory":
        shard.unlink()
        shard.mkdir()
    elif case == "not-json":
        shard.write_bytes(data[:8] + b"x" * length + data[8 + length :])
    elif case == "header-too-long":
        shard.write_bytes(struct.pack("<Q", 4096) + data[8:])
    elif case == "header-array":
        raw = b"[]" + b" " * (length - 2)
        shard.write_bytes(data[:8] + raw + data[8 + length :])
    elif case == "bad-offsets":
        header["model.layers.0.mlp.weight"]["data_offsets"] = [10, 2]
        shard.write_bytes(_with_header(header, data[8 + length :]))
    elif case == "shape-not-offsets":
        header["model.layers.0.mlp.weight"]["shape"] = [16, 9]
        shard.write_bytes(_with_header(header, data[8 + length :]))
    elif case == "unknown-dtype":
        header[first]["dtype"] = "U7"
        shard.write_bytes(_with_header(header, data[8 + length :]))
    elif case == "overlap":
        header[second]["data_offsets"] = [o - 1 for o in header[second]["data_offsets"]]
        shard.write_bytes(_with_header(header, data[8 + length :]))
    elif case == "gap":
        header[third]["data_offsets"] = [o + 4 for o in third_at]
        shard.write_bytes(_with_header(header, data[8 + length :] + bytes(4)))
    elif case == "header-length-zero":
        shard.write_bytes(struct.pack("<Q", 0) + data[8:])
    elif case == "metadata-not-strings":
        header["__metadata__"] = {"format": 1}
        shard.write_bytes(_with_header(header, data[8 + length :]))
    elif case == "tensor-absent":
        weight_map["weight_map"]["model.layers.0.extra"] = SHARD1
        index.write_text(json.dumps(weight_map))
    elif case in ("outside", "absolute"):
        name = f"../{DRAFTER_DIR}/model.safetensors" if case == "outside" else "/etc/passwd"
        weight_map["weight_map"]["model.layers.0.mlp.weight"] = name
        index.write_text(json.dumps(weight_map))
    elif case == "symlink-loop":
        shard.unlink()
        (target / "loop-b").symlink_to(shard)
        shard.symlink_to(target / "loop-b")
    elif case == "dangling":
        shard.unlink()
        shard.symlink_to(target / "blobs-gone")
    elif case == "short":
        shard.write_bytes(b"abc")
    elif case == "index-not-json":
        index.write_text("not json")
    elif case == "no-weights":
        index.unlink()
    message = refused_with(run(models), outcome.EXIT_CONFIG)
    assert message.startswith(expected), message


def _with_header(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_a_truncated_single_file_drafter_is_refused_with_its_name(tmp_path):
    models = models_dir(tmp_path / "models")
    single = models / DRAFTER_DIR / "model.safetensors"
    single.write_bytes(single.read_bytes()[:-10])
    assert refused_with(run(models), 16).startswith(f"{single} is ")


def test_a_cache_snapshot_whose_blob_is_truncated_is_named_by_its_snapshot_path(tmp_path):
    models = cache_models_dir(tmp_path / "models")
    shard = models / TARGET_DIR / SHARD1
    blob = shard.resolve()
    blob.write_bytes(blob.read_bytes()[:-3])
    assert refused_with(run(models), 16).startswith(f"{shard} is ")


def test_a_fifo_is_not_opened(tmp_path):
    models = models_dir(tmp_path / "models")
    shard = _shard(models)
    shard.unlink()
    os.mkfifo(shard)
    assert refused_with(run(models), 16) == f"{shard} is not a regular file"


# --- any corruption of a library-written shard is one line, and the library agrees ----------------


def library_refuses(data: bytes) -> bool:
    """Whether the safetensors library refuses to read ``data`` (as vLLM's loader reads a shard)."""
    import safetensors

    try:
        safetensors.deserialize(data)
    except safetensors.SafetensorError:
        return True
    return False


def _edits():
    """Truncations, byte splices and field edits of a safetensors file's header, as functions of its bytes."""
    from hypothesis import strategies as st

    from geometry.preflight.safetensors_header import DTYPE_BITS

    def truncate(cut):
        return lambda data: data[:cut]

    def splice(at, junk):
        return lambda data: data[:at] + junk + data[at + len(junk) :]

    def field(pick, key, value, length_off):
        def edit(data):
            (length,) = struct.unpack("<Q", data[:8])
            header = json.loads(data[8 : 8 + length])
            names = sorted(header)
            entry = header[names[pick % len(names)]]
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = value
            raw = json.dumps(header).encode()
            return struct.pack("<Q", max(len(raw) + length_off, 0)) + raw + data[8 + length :]

        return edit

    values = {
        "dtype": st.sampled_from([*DTYPE_BITS, "U7", "bf16", ""]) | st.integers(0, 3),
        "shape": st.lists(st.integers(-1, 40), max_size=3) | st.text(max_size=3),
        "data_offsets": st.lists(st.integers(-2, 200), max_size=3) | st.none(),
    }
    fields = st.sampled_from(sorted(values)).flatmap(
        lambda key: st.builds(
            field, st.integers(0, 5), st.just(key), values[key] | st.none(), st.sampled_from([0, 0, 0, -1, 1, 8])
        )
    )
    metadata = st.builds(
        field,
        st.just(0),
        st.just("__metadata__"),
        st.dictionaries(st.text(max_size=3), st.text(max_size=3) | st.integers(), max_size=2),
        st.just(0),
    )
    return (
        st.builds(truncate, st.integers(0, 400))
        | st.builds(splice, st.integers(0, 300), st.binary(min_size=1, max_size=8))
        | fields
        | metadata
    )


def test_edited_library_shards_are_refused_as_the_library_refuses_them_one_line_exit_16(tmp_path):
    from hypothesis import HealthCheck, given, settings

    models = models_dir(tmp_path / "models")
    shard = _shard(models)
    good = shard.read_bytes()
    assert not library_refuses(good) and run(models).passed

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_edits())
    def edited(edit):
        data = edit(good)
        shard.write_bytes(data)
        try:
            read_header(str(shard), str(shard))
        except ShardUnusable:
            ours = True
        else:
            ours = False
        assert ours == library_refuses(data), data[:300]
        result = run(models)
        if ours:
            assert refused_with(result, outcome.EXIT_CONFIG).startswith(f"{shard}"), result.lines
        elif not result.passed:  # a name the splice changed: the index's tensor is not there
            assert refused_with(result, outcome.EXIT_CONFIG).startswith(f"{shard}: has no tensor "), result.lines

    edited()


def test_a_header_nested_too_deep_for_json_is_one_line(tmp_path):
    path = tmp_path / "deep.safetensors"
    raw = b"[" * 100_000 + b"]" * 100_000
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    assert library_refuses(path.read_bytes())
    with pytest.raises(ShardUnusable) as info:
        read_header(str(path), "deep.safetensors")
    assert str(info.value) == "deep.safetensors: the header is not a safetensors header (JSON nested too deep)"


# --- the host command, the same code ---------------------------------------------------------------
def test_build_py_preflight_refuses_a_missing_shard_with_its_name(tmp_path):
    models = models_dir(tmp_path / "models")
    _shard(models).unlink()
    run_ = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "preflight", "--models-dir", str(models)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert run_.returncode == 16, run_.stderr
    assert run_.stderr == (
        f"error: pre-flight: FAIL: {_shard(models)} is missing (model.safetensors.index.json "
        "places 3 tensors there): is the download complete?\n"
    )


def test_build_py_preflight_refuses_a_shard_whose_shape_is_not_its_data_with_one_line(tmp_path):
    models = models_dir(tmp_path / "models")
    shard = _shard(models)
    data = shard.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["model.layers.0.input_layernorm.weight"]["shape"] = [8]  # BF16 [16] in the file: 32 bytes
    shard.write_bytes(_with_header(header, data[8 + length :]))
    assert library_refuses(shard.read_bytes())
    run_ = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "preflight", "--models-dir", str(models)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert run_.returncode == 16, run_.stderr
    assert run_.stderr.startswith(
        f"error: pre-flight: FAIL: {shard}: header entry 'model.layers.0.input_layernorm.weight' is BF16 [8]: "
        "16 bytes, not its 32 (data_offsets "
    )
    assert run_.stderr.count("\n") == 1 and "Traceback" not in run_.stderr
