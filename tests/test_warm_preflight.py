"""tests/support/warm_preflight.py and warm_oracle.py: a process forked from the warm one is what a fresh
interpreter would be.

Each case runs the same call both ways (`run` and subprocess.run) and compares what a caller sees: the exit
code, stdout and stderr, and what the process saw of its own arguments, path, directory and environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from models_support import models_dir
from support import warm_preflight
from support.repo import REPO
from support.warm_oracle import oracle_wrapper
from support.warm_preflight import SOCKET_ENV, the_warm_process

from stackbuild.serve.parser_verdicts import oracle_environment
from stackbuild.serve.validate import ORACLE_SCRIPT

# What a process sees of itself, printed as JSON; then a line on stderr and the exit code it is given.
_SELF = """import json, os, sys
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__,
                  "mine": os.environ.get("WARM_TEST"), "stdin": sys.stdin.read()}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def _fresh(argv: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, **kwargs)


def _seen(run: subprocess.CompletedProcess) -> tuple:
    return run.returncode, run.stdout, run.stderr


@pytest.mark.oracle
@pytest.mark.parametrize("code", [0, 3])
def test_code_arguments_directory_environment_and_input_are_a_fresh_interpreters(tmp_path, code):
    env = {**os.environ, "WARM_TEST": "yes"}
    script = tmp_path / "script.py"
    script.write_text(_SELF)
    for argv in (["-c", _SELF, str(code), "x"], [str(script), str(code), "y"]):
        warm = warm_preflight.run(argv, env=env, cwd=tmp_path, input="in", timeout=60)
        fresh = _fresh(argv, env=env, cwd=tmp_path, input="in", timeout=60)
        assert _seen(warm) == _seen(fresh)
        assert json.loads(warm.stdout)["mine"] == "yes" and warm.returncode == code


@pytest.mark.oracle
def test_an_uncaught_exception_is_the_traceback_and_exit_1(tmp_path):
    code = "import sys\nprint('before')\nraise ValueError('boom')"
    script = tmp_path / "script.py"
    script.write_text(code)
    for argv in (["-c", code], [str(script)]):
        warm, fresh = warm_preflight.run(argv, timeout=60), _fresh(argv, timeout=60)
        assert _seen(warm) == _seen(fresh)
        assert warm.returncode == 1 and warm.stderr.endswith("ValueError: boom\n")


@pytest.mark.oracle
def test_the_warm_process_serves_only_calls_whose_import_variables_are_its_own():
    """A process forked from the warm one finds vLLM's parser imported; a changed VLLM_ variable runs fresh."""
    argv = ["-c", "import sys; print('vllm.entrypoints.cli.serve' in sys.modules)"]
    assert warm_preflight.run(argv, timeout=60).stdout == "True\n"
    changed = warm_preflight.run(argv, env={**os.environ, "VLLM_WARM_TEST": "1"}, timeout=60)
    assert changed.stdout == "False\n"
    # An interpreter option runs fresh as well.
    assert warm_preflight.run(["-S", *argv], timeout=60).stdout == "False\n"


@pytest.mark.oracle
def test_a_call_past_its_timeout_is_killed_and_raises():
    with pytest.raises(subprocess.TimeoutExpired):
        warm_preflight.run(["-c", "import time; print('started', flush=True); time.sleep(60)"], timeout=1)
    assert warm_preflight.run(["-c", "print('next')"], timeout=60).stdout == "next\n"


@pytest.mark.oracle
@pytest.mark.parametrize("extra", [["--block-size", "64"], ["--frobnicate"]], ids=["passes", "vllm-refuses"])
def test_the_start_check_says_the_same_warm_and_fresh(tmp_path, extra):
    """The slow path on an edited argv: the same outcome, lines and code as in a fresh interpreter."""
    models = models_dir(tmp_path / "models")
    args = [str(REPO / "build.py"), "preflight", "--models-dir", str(models), "--", *extra]
    warm = warm_preflight.build_py_preflight("--models-dir", str(models), "--", *extra)
    fresh = _fresh(args, cwd=REPO, timeout=900)
    assert _seen(warm) == _seen(fresh)
    assert "re-checking with vLLM's serve parser" in warm.stderr


def _oracle(python: str, argv: list, tmp_path, env: dict) -> tuple:
    """serve_oracle.py's verdict on ``argv`` under ``python``: (exit code, the result file)."""
    out = tmp_path / f"result-{len(list(tmp_path.iterdir()))}.json"
    run = subprocess.run(
        [python, str(ORACLE_SCRIPT), str(out)], input=json.dumps(argv), capture_output=True, text=True, env=env
    )
    return run.returncode, json.loads(out.read_text())


@pytest.mark.oracle
@pytest.mark.parametrize(
    "argv",
    [["/models/m", "--max-model-len", "4096", "--kv-cache-dtype", "fp8"], ["/models/m", "--kv-cache-dtype", "no"]],
    ids=["passes", "vllm-refuses"],
)
def test_the_serve_parser_oracle_says_the_same_through_the_warm_process(tmp_path, argv):
    """The oracle interpreter conftest gives the tests: serve_oracle.py's verdict is the fresh interpreter's,
    through the warm process and, with no warm process to reach, through the interpreter itself."""
    env = {**oracle_environment(), SOCKET_ENV: the_warm_process().address}
    wrapper = oracle_wrapper()
    fresh = _oracle(sys.executable, argv, tmp_path, env)
    assert fresh[1]["status"] == ("passed" if len(argv) > 3 else "rejected"), fresh
    assert _oracle(wrapper, argv, tmp_path, env) == fresh
    assert _oracle(wrapper, argv, tmp_path, {**env, SOCKET_ENV: str(tmp_path / "no-socket")}) == fresh


def test_the_oracle_wrapper_runs_anything_else_with_the_interpreter():
    probe = subprocess.run(
        [oracle_wrapper(), "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
    )
    assert (probe.returncode, probe.stdout) == (0, sys.executable + "\n")
