"""The `command:` of the compose file, parsed by vLLM 0.34.0's own `vllm serve` parser (CPU).

The oracle interpreter is GLM53_ORACLE_PYTHON, else this interpreter (the
.venv after `make oracle`). Each parse imports vLLM: 20-60 s on a small host,
so the tests share results where they can.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from compose_support import DIGEST, NO_REPORT, SOURCE_DATE_EPOCH, recipe, require_compose_binary, require_oracle
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.errors import ServeArgsRejected
from stackbuild.core.serve_args import serve_argv, speculative_config
from stackbuild.serve.compose import write_compose
from stackbuild.serve.target import serve_target
from stackbuild.serve.validate import check_serve_args, run_serve_parser_cases

pytestmark = pytest.mark.oracle


@pytest.fixture(autouse=True)
def _fixed_date(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "compose", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        env={**os.environ, **(env or {})},
    )


def test_default_recipe_command_is_accepted_by_vllm_serve(tmp_path):
    require_oracle()
    require_compose_binary()
    r = recipe(tmp_path)
    out = tmp_path / "out" / "glm.compose.yaml"
    out.parent.mkdir()
    result = write_compose(serve_target(r, digest=DIGEST, report_path=NO_REPORT), output=out)
    assert result["checks"]["serve_args"]["status"] == "passed"
    assert result["checks"]["compose_config"]["status"] == "passed"
    parsed = result["checks"]["serve_args"]["parsed"]
    # What vLLM's parser made of the very list that is in the file.
    command = yaml.safe_load(out.read_text())["services"]["vllm"]["command"]
    assert command == serve_argv(r) == result["command"]
    assert parsed["model_tag"] == "/models/GLM-5.3-Flash-NVFP4"
    spec = parsed["speculative_config"]
    assert (spec["method"], spec["model"], spec["num_speculative_tokens"]) == (
        "dflash",
        "/models/GLM-5.3-Flash-DFlash2",
        7,
    )
    assert spec == speculative_config(r)
    assert parsed["kv_cache_dtype"] == "fp8"
    assert parsed["max_model_len"] == 1048576
    assert parsed["tensor_parallel_size"] == 1
    assert parsed["gpu_memory_utilization"] == 0.9
    assert parsed["served_model_name"] == ["glm-5.3-flash"]
    assert parsed["tool_call_parser"] == "glm47" and parsed["reasoning_parser"] == "glm45"
    assert parsed["enable_auto_tool_choice"] is True
    assert parsed["port"] == 8000


def test_drafter_kv_dtype_is_a_speculative_config_field_vllm_accepts(tmp_path):
    require_oracle()
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("drafter_kv_cache_dtype", "bfloat16"))
    check = check_serve_args(serve_argv(r))
    assert check.status == "passed"
    assert check.parsed["speculative_config"]["kv_cache_dtype"] == "bfloat16"


REJECTED = {
    "bad-kv-dtype": (["/models/m", "--kv-cache-dtype", "fp7"], "Invalid kv_cache_dtype: 'fp7'"),
    "bad-spec-field": (
        ["/models/m", "--speculative-config", '{"method":"dflash","model":"/models/d","num_spec_tokens":7}'],
        "unknown SpeculativeConfig field(s): num_spec_tokens",
    ),
    "bad-tool-parser": (
        ["/models/m", "--enable-auto-tool-choice", "--tool-call-parser", "glm99"],
        "invalid tool call parser: glm99",
    ),
    "bad-drafter-backend": (
        [
            "/models/m",
            "--speculative-config",
            '{"attention_backend":"FLASH_ATTENTION_9","method":"dflash","model":"/models/d"}',
        ],
        "unknown attention backend",
    ),
    "unknown-flag": (["/models/m", "--frobnicate"], "unrecognized arguments: --frobnicate"),
}


@pytest.fixture(scope="module")
def rejected_verdicts():
    """vLLM's verdicts on all the bad command lines, at the cost of one import."""
    require_oracle()
    names = list(REJECTED)
    return dict(zip(names, run_serve_parser_cases([REJECTED[n][0] for n in names])))


@pytest.mark.parametrize("case", list(REJECTED))
def test_vllm_rejects_with_its_own_message(rejected_verdicts, case):
    argv, message = REJECTED[case]
    with pytest.raises(ServeArgsRejected) as info:
        check_serve_args(argv, where="r.yaml", result=rejected_verdicts[case])
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"r.yaml: vLLM {DEFAULT_VERSION} `vllm serve` rejected the command: ")
    assert message in text


def test_cli_refuses_a_recipe_vllm_rejects_and_writes_nothing(tmp_path):
    require_oracle()
    r_path = recipe(
        tmp_path, lambda d: d["serving"].__setitem__("extra_args", ["--enable-auto-tool-choice", "--frobnicate"])
    ).path
    out = tmp_path / "out" / "x.compose.yaml"
    out.parent.mkdir()
    proc = _cli("--recipe", str(r_path), "-o", str(out), "--digest", DIGEST)
    assert proc.returncode == ServeArgsRejected.exit_code, proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert error_lines == [
        f"error: {r_path}: vLLM {DEFAULT_VERSION} `vllm serve` rejected the command: "
        "unrecognized arguments: --frobnicate"
    ]
    assert not out.exists()
    assert list(out.parent.iterdir()) == []


def test_cli_writes_the_file_with_overrides(tmp_path):
    require_oracle()
    require_compose_binary()
    r_path = recipe(tmp_path).path
    out = tmp_path / "served.compose.yaml"
    proc = _cli(
        "--recipe",
        str(r_path),
        "-o",
        str(out),
        "--digest",
        DIGEST,
        "--models-dir",
        str(tmp_path / "w"),
        "--port",
        "18001",
        "--gpus",
        "3",
        "--owner",
        "acme",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    import json

    result = json.loads(proc.stdout)
    assert result["path"] == str(out) and result["pinned"] is True
    assert result["checks"]["serve_args"]["status"] == "passed"
    svc = yaml.safe_load(out.read_text())["services"]["vllm"]
    assert svc["image"] == f"ghcr.io/acme/glm53-flash-dflash2-gb300:sm100-gb300-20251130@{DIGEST}"
    assert svc["volumes"][0]["source"] == str(tmp_path / "w")
    assert svc["ports"][0]["published"] == "18001"
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["3"]


def test_oracle_without_vllm_is_skipped_with_a_notice(tmp_path):
    """An interpreter without vLLM: the file is still written, the check says it was skipped."""
    require_compose_binary()
    # A venv of this interpreter's base without pip: its standard library and nothing installed.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    probe = subprocess.run(
        [bare, "-c", "import importlib.util; print(importlib.util.find_spec('vllm') is None)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True", (probe.stdout, probe.stderr)
    out = tmp_path / "x.compose.yaml"
    proc = _cli("--recipe", str(recipe(tmp_path).path), "-o", str(out), env={"GLM53_ORACLE_PYTHON": bare})
    assert proc.returncode == 0, proc.stderr
    assert "notice: vLLM serve-parser check skipped: vLLM is not installed for" in proc.stderr
    assert out.exists()


def test_prefix_caching_key_is_the_flag_vllm_reads_and_the_gate_input_resolves_it_as_vllm_does(tmp_path):
    """serving.enable_prefix_caching true / false / unset: vLLM's parser reads --enable-prefix-caching,
    --no-enable-prefix-caching, or nothing (None: vLLM's default), and the gate input holds what
    resolve_prefix_caching makes of exactly what vLLM parsed."""
    require_oracle()
    from geometry.model.inputs import resolve_prefix_caching
    from stackbuild.core.gate import gate_input

    def set_key(value):
        def edit(d):
            if value is None:
                d["serving"].pop("enable_prefix_caching", None)
            else:
                d["serving"]["enable_prefix_caching"] = value

        return edit

    recipes = {}
    for value in (True, False, None):
        (tmp_path / str(value)).mkdir()
        recipes[value] = recipe(tmp_path / str(value), set_key(value))
    flags = {True: ["--enable-prefix-caching"], False: ["--no-enable-prefix-caching"], None: []}
    for value, r in recipes.items():
        assert [a for a in serve_argv(r) if "prefix-caching" in a] == flags[value]
    verdicts = run_serve_parser_cases([serve_argv(r) for r in recipes.values()])
    for (value, r), verdict in zip(recipes.items(), verdicts):
        assert verdict["status"] == "passed", verdict
        assert verdict["parsed"]["enable_prefix_caching"] is value
        gate = gate_input(r)
        assert (gate.enable_prefix_caching, gate.mamba_cache_mode) == resolve_prefix_caching(
            r.target_config, verdict["parsed"]["enable_prefix_caching"]
        )
    # vLLM 0.34.0 turns it on for this hybrid target when no flag says otherwise: align.
    assert (gate_input(recipes[None]).enable_prefix_caching, gate_input(recipes[None]).mamba_cache_mode) == (
        True,
        "align",
    )


def test_extra_args_may_not_repeat_the_prefix_caching_flag(tmp_path):
    with pytest.raises(
        Exception,
        match=r"serving.extra_args\[0\]: --enable-prefix-caching is generated from serving.enable_prefix_caching",
    ):
        recipe(tmp_path, lambda d: d["serving"].__setitem__("extra_args", ["--enable-prefix-caching"]))


def test_compose_says_when_vllm_and_compose_accept_the_file(tmp_path):
    """A passing check prints a line: compose says that vLLM's check passed."""
    require_oracle()
    require_compose_binary()
    out = tmp_path / "x.compose.yaml"
    proc = _cli("--recipe", str(recipe(tmp_path).path), "-o", str(out), "--digest", DIGEST)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert any(
        line.startswith(f"notice: checked: vLLM {DEFAULT_VERSION} `vllm serve` parser")
        and line.endswith("accepts the command")
        for line in lines
    ), proc.stderr
    assert "notice: checked: docker compose config reads x.compose.yaml and its command as written" in lines
    assert proc.stdout.strip() == f"wrote {out}"
