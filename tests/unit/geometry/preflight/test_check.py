"""`build.py preflight` on the host: the code the image's entrypoint runs, on a models directory.

The fast path (argv and configs as the build checked them) needs no vLLM; the
rest import the venv's vLLM on the CPU for its serve parser and its planner
(marked ``oracle``). They run forked from a process that imported the serve parser once
(tests/support/warm_preflight.py); the test of what vLLM prints while it imports runs a
fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cli_reference  # noqa: E402
import doc_sections  # noqa: E402
import pytest
from models_support import CONFIGS, DRAFTER_DIR, TARGET_DIR, misfit_drafter, models_dir  # noqa: E402,F401
from support import warm_preflight
from support.repo import REPO

from geometry.preflight import outcome
from geometry.preflight.checked import CheckedServe, CheckedUnreadable
from geometry.verdict.gate_run import run_gate
from stackbuild.core.errors import (
    GeometryGateFailed,
    MountedCheckpointMismatch,
    MountedConfigUnusable,
    PreflightUnchecked,
    ServeArgsRejected,
)
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe


def preflight(*args: str, models: Path, fresh: bool = False) -> subprocess.CompletedProcess:
    """`build.py preflight --models-dir MODELS ARGS`: forked from a process that imported vLLM's serve parser
    (tests/support/warm_preflight.py), or with ``fresh`` in a fresh interpreter, which imports it itself."""
    if not fresh:
        return warm_preflight.build_py_preflight("--models-dir", str(models), *args)
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "preflight", "--models-dir", str(models), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )


# --- fast path and bad configs: no vLLM ------------------------------------------


def test_snapshot_configs_pass_on_the_fast_path_without_importing_vllm(tmp_path):
    models = models_dir(tmp_path / "models")
    run = preflight(models=models)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("pre-flight: PASS: the geometry the build checked (argv as built")
    assert "revision not pinned" in lines[0]  # the default recipe leaves the commit to the user
    # The same call in a fresh interpreter: vLLM (and torch) never imported.
    code = (
        "import sys;"
        "from geometry.preflight.run import preflight;"
        "from stackbuild.core.recipe import load_recipe, DEFAULT_RECIPE;"
        "from stackbuild.core.gate import gate_input;"
        "from stackbuild.core.preflight_record import checked_serve;"
        "r = load_recipe(DEFAULT_RECIPE); c = checked_serve(r, gate_input(r));"
        "o = preflight(c.argv, checked=c, checked_path='-', overlay_manifest=None,"
        " locate=lambda p: p.replace('/models', sys.argv[1], 1));"
        "print(o.code, sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    )
    probe = subprocess.run([sys.executable, "-c", code, str(models)], capture_output=True, text=True, timeout=120)
    assert probe.stdout.split("\n")[0] == "0 []", probe.stderr


@pytest.mark.parametrize("case", ["missing", "directory", "not-json", "not-utf8", "json-array"])
def test_unusable_drafter_config_is_one_line_and_exit_15(tmp_path, case):
    models = models_dir(tmp_path / "models")
    config = models / DRAFTER_DIR / "config.json"
    config.unlink()
    expected = {
        "missing": "does not exist: is the checkpoint mounted there?",
        "directory": "is a directory, not a file",
        "not-json": "is not JSON (line 1: Expecting property name enclosed in double quotes)",
        "not-utf8": "is not JSON (not UTF-8 text)",
        "json-array": "holds JSON but not an object",
    }[case]
    if case == "directory":
        config.mkdir()
    elif case == "not-json":
        config.write_text("{'num_key_value_heads': 8}")
    elif case == "not-utf8":
        config.write_bytes(b"\xff\xfe{")
    elif case == "json-array":
        config.write_text("[1, 2]")
    run = preflight(models=models)
    assert run.returncode == MountedConfigUnusable.exit_code == 16
    assert run.stdout == ""
    assert run.stderr == (
        f"error: pre-flight: FAIL: the drafter config {config} (argv: /models/{DRAFTER_DIR}) {expected}\n"
    )


def test_exit_codes_are_the_drivers(tmp_path):
    """One table: the image's pre-flight exits with the codes the driver documents for the same faults."""
    assert outcome.EXIT_GEOMETRY == GeometryGateFailed.exit_code == 5
    assert outcome.EXIT_SERVE_FLAGS == ServeArgsRejected.exit_code == 11
    assert outcome.EXIT_CONFIG == MountedConfigUnusable.exit_code == 16
    assert outcome.EXIT_UNCHECKED == PreflightUnchecked.exit_code == 17
    # docs/cli.md's exit-code table is generated from geometry/errors.py ExitCode (tools/cli_reference.py)
    table = cli_reference.exit_code_table()
    assert (
        "| 16 | a mounted config or checkpoint file is unusable | pre-flight: a model config.json the serve command "
        "points at is missing, unreadable, not a JSON object, or one the simulator would misread (the key named); "
        "or a checkpoint file is: a shard missing, truncated or with a header that does not parse or does not "
        "describe its data (a tensor's dtype x shape not the bytes of its data_offsets; offsets overlapping, "
        "leaving a gap or past the file: what the safetensors library refuses), a tensor the index names absent, "
        "no tokenizer or chat template for a served parser (the file named) |"
    ) in table
    assert outcome.EXIT_MISMATCH == MountedCheckpointMismatch.exit_code == 26
    assert "| 26 | the mounted checkpoints are not the recipe's | pre-flight: the mounted checkpoints are not" in table
    assert "| 26 |" in doc_sections.preflight_exit_codes()
    assert "| 17 | the geometry cannot be checked | pre-flight: the geometry cannot be checked" in table


def test_the_record_round_trips_and_a_bad_one_is_named(tmp_path):
    r = load_recipe(DEFAULT_RECIPE)
    checked = checked_serve(r, gate_input(r))
    assert CheckedServe.from_json(json.loads(json.dumps(checked.to_json())), "x") == checked
    assert checked.target.config_sha256 == r.target.config_sha256  # the recipe's pin is the snapshot's hash
    assert checked.drafter.config_sha256 == r.drafter.config_sha256
    with pytest.raises(CheckedUnreadable, match=r"^x: malformed glm53-preflight-checked/1 record: KeyError"):
        CheckedServe.from_json({"schema": "glm53-preflight-checked/1"}, "x")


# --- the slow path: vLLM's serve parser, the simulator, the gate, the installed vLLM ----


@pytest.mark.oracle
def test_misfitting_drafter_config_fails_naming_a_drafter_layer(tmp_path):
    models = models_dir(tmp_path / "models", drafter=misfit_drafter())
    run = preflight(models=models)
    assert run.returncode == GeometryGateFailed.exit_code, run.stderr
    error = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1
    assert error[0].startswith("error: pre-flight: FAIL: re-checked (drafter config sha256 ")
    assert "drafter layer drafter.model.layers.0.self_attn.attn" in error[0]
    assert "4 KV heads x head 80, bfloat16: 1280 B/token" in error[0]
    assert "no drafter block fits exactly (4,718,592 is not a multiple of 1280)" in error[0]
    warning = [line for line in run.stdout.splitlines() if "warning" in line]
    assert len(warning) == 1 and "not that of the drafter snapshot the build checked" in warning[0]


def _expected_verdict(**changes) -> bool:
    """What the host gate says for the recipe's own gate input with these values changed."""
    return run_gate(gate_input(load_recipe(DEFAULT_RECIPE)).replace(**changes)).verdict.passed


@pytest.mark.oracle
@pytest.mark.parametrize(
    "extra,changes,shown",
    [
        (["--tensor-parallel-size", "2"], {"tensor_parallel_size": 2}, "tensor_parallel_size 2 (build: 1)"),
        (["--block-size", "64"], {"block_size": 64}, "block_size 64 (build: None)"),
        (
            ["--max-num-batched-tokens", "2048"],
            {"max_num_batched_tokens": 2048},
            "max_num_batched_tokens 2048 (build: 16384)",
        ),
    ],
    ids=["tp2", "block-size-64", "batched-2048"],
)
def test_edited_flags_are_rechecked_as_the_geometry_says(tmp_path, extra, changes, shown):
    run = preflight("--", *extra, models=models_dir(tmp_path / "models"))
    expected = _expected_verdict(**changes)
    assert (run.returncode == 0) is expected, run.stdout + run.stderr
    first = (run.stdout if expected else run.stderr.replace("error: ", "")).splitlines()[0]
    assert first.startswith(f"pre-flight: {'PASS' if expected else 'FAIL'}: re-checked (argv edited, {shown}")
    # The host's vLLM is stock 0.33.0: the cross-check holds the simulator's stock model to it.
    assert "the installed vLLM (stock) agrees with the simulator's stock model" in first


@pytest.mark.oracle
def test_a_qwen3_next_target_passes_the_cross_check(tmp_path):
    """A Qwen3-Next (GDN + full attention) config mounted as the target, no drafter, prefix caching
    off: the simulator and the installed vLLM agree. The pre-flight runs vLLM's CPU platform
    (VLLM_TARGET_DEVICE=cpu, so no GPU is touched), whose config hook would make the GDN state
    float32 on an AVX512-BF16 CPU; the build's gate plans without it. The oracle plans for the GPU."""
    import geometry_cases as C

    qwen = next(c["target_config"] for c in C.sample(300) if c["target_config"]["model_type"] == "qwen3_next")
    models = models_dir(tmp_path / "models")
    (models / TARGET_DIR / "config.json").write_text(json.dumps(qwen))
    # Its own context length: the recipe's 1,048,576 is above its max_position_embeddings (a serving limit).
    length = str(qwen["max_position_embeddings"])
    run = preflight(
        "--", "--no-enable-prefix-caching", "--speculative-config", "null", "--max-model-len", length, models=models
    )
    assert run.returncode == 0, run.stdout + run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("pre-flight: PASS: re-checked (argv edited, "), first
    assert "target config sha256 " in first and "no drafter): " in first, first
    assert first.endswith("; the installed vLLM (stock) agrees with the simulator's stock model"), first


@pytest.mark.oracle
@pytest.mark.parametrize(
    "edit,named",
    [
        (
            lambda d: d.__setitem__("layer_types", ["linear_attention"] * len(d["layer_types"])),
            "layer_types: has no indexed_attention layer: the target needs an attention layer",
        ),
        (
            lambda d: d.__setitem__("architectures", ["LlamaForCausalLM"]),
            "architectures: LlamaForCausalLM is not modelled by the geometry gate",
        ),
    ],
    ids=["no-attention-layer", "foreign-architecture"],
)
def test_a_mounted_config_the_simulator_would_misread_is_exit_16_naming_file_and_key(tmp_path, edit, named):
    """The slow path runs the recipe loader's config checks on what is mounted: one line, the file and the key."""
    models = models_dir(tmp_path / "models")
    config = models / TARGET_DIR / "config.json"
    data = json.loads(config.read_text())
    edit(data)
    config.write_text(json.dumps(data))
    run = preflight(models=models)
    assert run.returncode == MountedConfigUnusable.exit_code == 16, run.stdout + run.stderr
    error = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and error[0].startswith(f"error: pre-flight: FAIL: the target config {config}: {named}"), (
        error
    )
    assert run.stdout == ""


@pytest.mark.oracle
def test_flag_vllm_rejects_is_exit_11_with_vllms_words(tmp_path):
    """In a fresh interpreter: what vLLM prints while it imports is held back, stderr is the two lines."""
    run = preflight("--", "--frobnicate", models=models_dir(tmp_path / "models"), fresh=True)
    assert run.returncode == ServeArgsRejected.exit_code
    assert run.stderr.splitlines() == [
        "pre-flight: the argv differs from the build's: re-checking with vLLM's serve parser, the simulator "
        "and vLLM's planner (seconds)",
        "error: pre-flight: FAIL: vLLM's serve parser rejects the argv: unrecognized arguments: --frobnicate",
    ]


def test_help_is_not_checked(tmp_path):
    run = preflight("--", "--help=ModelConfig", models=models_dir(tmp_path / "models"))
    assert run.returncode == 0, run.stderr
    assert run.stdout == "pre-flight: nothing to check: vLLM is asked for its help, it serves nothing\n"


@pytest.mark.oracle
def test_prefix_caching_turned_off_is_rechecked_in_mamba_cache_mode_none(tmp_path):
    """The recipe serves --enable-prefix-caching (align); a --no-enable-prefix-caching after it
    wins (argparse's last word), and vLLM then runs mamba_cache_mode none."""
    run = preflight("--", "--no-enable-prefix-caching", models=models_dir(tmp_path / "models"))
    expected = _expected_verdict(enable_prefix_caching=False, mamba_cache_mode="none")
    assert (run.returncode == 0) is expected, run.stdout + run.stderr
    first = (run.stdout if expected else run.stderr.replace("error: ", "")).splitlines()[0]
    assert "argv edited, enable_prefix_caching False (build: True), mamba_cache_mode none (build: align)" in first


# The start check's derivation, after the settings it makes before it imports vLLM's parser, in a process of
# its own (forked from the warm one, which imported the parser under those settings): vLLM resolves its platform
# once per process, and this session may have imported it without VLLM_TARGET_DEVICE=cpu.
_DERIVE = """import json, sys
from geometry import prepare_parser_import
prepare_parser_import()
from geometry.preflight.check import build_defaults, derive_inputs
from geometry.preflight.configs import read_config
from geometry.preflight.serve_flags import parse_serve_flags
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import load_recipe
r = load_recipe(sys.argv[4])
built = gate_input(r)
flags = parse_serve_flags(checked_serve(r, built).argv)
target = read_config("target", sys.argv[1] + "/" + sys.argv[2], r.target.path)
drafter = read_config("drafter", sys.argv[1] + "/" + sys.argv[3], r.drafter.path)
defaults = build_defaults(built, built.kv_cache_memory_bytes)
print(json.dumps({"flags": flags.to_json(), "recorded": checked_serve(r, built).flags.to_json(),
                  "model": flags.model, "drafter": flags.drafter_path, "prefix": flags.enable_prefix_caching,
                  "derived": derive_inputs(flags, target, drafter, defaults).to_json(),
                  "built": built.to_json()}))
"""

# Every optional flag the recipe's keys write (core/serve_args.argv_parts), each away from vLLM's default.
_EVERY_FLAG = {
    "max_num_seqs": 7,
    "max_num_batched_tokens": 4096,
    "block_size": 64,
    "enable_prefix_caching": False,
    "tool_call_parser": "glm47",
    "reasoning_parser": "glm45",
}


def _derived(tmp_path, recipe_path) -> dict:
    models = models_dir(tmp_path / "models")
    run = warm_preflight.run(
        ["-c", _DERIVE, str(models), TARGET_DIR, DRAFTER_DIR, str(recipe_path)],
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.oracle
def test_the_recipes_argv_means_to_vllm_what_the_build_gated(tmp_path):
    """vLLM's own parser on the compose command, through the pre-flight's derivation, gives exactly
    the build's gate input: so the fast path (argv unchanged) skips nothing the slow path would see."""
    result = _derived(tmp_path, DEFAULT_RECIPE)
    r = load_recipe(DEFAULT_RECIPE)
    assert (result["model"], result["drafter"]) == (r.target.path, r.drafter.path)
    assert result["prefix"] is True  # --enable-prefix-caching, from serving.enable_prefix_caching
    assert result["derived"] == result["built"]
    # The fast path reads the served flags from the record: they are what vLLM's parser reads from the argv.
    assert result["flags"] == result["recorded"]


@pytest.mark.oracle
def test_every_flag_the_recipe_writes_is_recorded_as_vllm_reads_it(tmp_path):
    """A recipe setting every optional flag away from vLLM's default: the record's served flags are still
    what vLLM's parser reads from the argv, and the build's gate input what the pre-flight derives."""
    from recipe_copies import copy_recipe

    path = copy_recipe(tmp_path / "recipe", lambda d: d["serving"].update(_EVERY_FLAG))
    result = _derived(tmp_path, path)
    assert result["flags"] == result["recorded"]
    assert {k: result["recorded"][k] for k in _EVERY_FLAG} == _EVERY_FLAG
    assert result["derived"] == result["built"]
    assert (result["built"]["max_num_seqs"], result["built"]["max_num_batched_tokens"]) == (7, 4096)


# --- the recipe's pins ---------------------------------------------------------------


@pytest.mark.parametrize(
    "role,key,value,message",
    [
        (
            "drafter",
            "config_sha256",
            "0" * 64,
            "configs/drafter.config.json has sha256 0da6591281a050db5026bb691fd0a59d116bd5b851df1173e1d9284b7418575e, "
            "not " + "0" * 64,
        ),
        ("target", "config_sha256", "sha256:abc", "expected 64 lowercase hex digits, got 'sha256:abc'"),
        ("target", "revision", "main", "expected the checkpoint's 40-hex-digit commit, got 'main'"),
        ("drafter", "revision", "A" * 40, "expected the checkpoint's 40-hex-digit commit, got '" + "A" * 40 + "'"),
    ],
    ids=["sha-mismatch", "sha-malformed", "revision-branch", "revision-uppercase"],
)
def test_recipe_pins_are_checked(tmp_path, role, key, value, message):
    from recipe_copies import copy_recipe

    from stackbuild.core.errors import RecipeError

    path = copy_recipe(tmp_path, lambda d: d[role].__setitem__(key, value))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert str(info.value) == f"{path}: {role}.{key}: {message}"


def test_default_recipe_pins_its_snapshots_by_hash():
    """The sha256 in the recipe, checked here against hashlib over the snapshot files' bytes."""
    import hashlib

    r = load_recipe(DEFAULT_RECIPE)
    for model in (r.target, r.drafter):
        assert model.config_sha256 == hashlib.sha256((r.directory / model.config).read_bytes()).hexdigest()
        assert model.revision is None  # not known to the repository: README says how to pin it
