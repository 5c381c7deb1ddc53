"""The start check's slow path in a process forked from one that has already imported vLLM's serve parser.

`build.py preflight` on edited flags (and ``geometry.preflight.run.preflight`` in a script) sets vLLM's CPU
platform and the import settings (``PARSE_SETTINGS``, ``IMPORT_SETTINGS``), then imports vLLM's `vllm serve`
parser, 6-8 CPU-s in each fresh interpreter, before its own work. :func:`run` forks the process from a warm
one instead (one per test process, started at its first use, gone when that process ends), which set the
same settings and imported the same parser once. The child is a process of its own: its working directory,
environment, ``sys.argv``, ``sys.path[0]`` and file descriptors 0-2 are a fresh interpreter's; it runs the
script (or ``-c`` code) as ``__main__``, runs the exit handlers and ends with the exit
code Python would give. What differs is only that the parser's modules are imported before the
process's own (the start check imports none of them before its settings), and that what vLLM printed
while it imported went to the test's stderr (the start check holds it back).

So a call goes to the warm process only where that difference cannot matter: a script or ``-c``
(no interpreter option, no ``-m``), whose environment, once the settings are set where unset (as the start check
does), holds the warm process's values of every variable those imports read (``IMPORT_VARIABLES``).
Other calls run a fresh interpreter (subprocess.run); so do the tests about the import itself (what the
start check holds back while vLLM imports, that the fast path never imports vLLM), which never come here.
Use it only for processes that run the start check: anything else that imports vLLM would find it imported
under the start check's platform.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Optional, Sequence

from geometry.oracle.import_settings import IMPORT_SETTINGS
from geometry.preflight.check import PARSE_SETTINGS
from support.repo import REPO

# What the start check imports first of vLLM (geometry/preflight/serve_flags.py): the `vllm serve` parser
# (vllm.entrypoints.cli.serve pulls in torch, transformers, vllm.config and the OpenAI server's protocol
# modules) and its argument parser class.
WARM_IMPORTS = ("vllm.entrypoints.cli.serve", "vllm.utils.argparse_utils")
# What the start check sets where unset before that import.
WARM_SETTINGS = {**PARSE_SETTINGS, **IMPORT_SETTINGS}
# The variables that can change what those imports do: a call whose value of any differs runs fresh.
IMPORT_VARIABLES = (
    "VLLM_",
    "TORCH",
    "PYTORCH",
    "HF_",
    "TRANSFORMERS",
    "TOKENIZERS",
    "CUDA",
    "OMP_",
    "MKL_",
    "PYTHON",
    "LD_",
)

# The warm process runs _SERVER compiled under its own file name: a traceback starts below its frames.
_BOOT = "import sys; exec(compile(sys.argv[1], '<warm-preflight>', 'exec'))"
_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, traceback
sys.argv = sys.argv[1:]
channel_in = os.fdopen(os.dup(0), "r")
channel_out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(2, 1)
for name, value in json.loads(sys.argv[2]).items():
    os.environ.setdefault(name, value)
before = dict(os.environ)
for module in json.loads(sys.argv[1]):
    importlib.import_module(module)
# What the imports set in the environment (vllm/env_override.py, ...): a fresh interpreter's import sets it too.
imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}
base_path = list(sys.path[1:])
sys.stdout.flush(); sys.stderr.flush()
channel_out.write(json.dumps({"env": before}) + "\n"); channel_out.flush()


def exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def child(request):
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(imports_set)
        for fd, (path, flags) in enumerate(
            [(request["stdin"], os.O_RDONLY), (request["stdout"], os.O_WRONLY), (request["stderr"], os.O_WRONLY)]
        ):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        channel_in.close(); channel_out.close()
        argv = request["argv"]
        try:
            if argv[0] == "-c":
                sys.argv = ["-c", *argv[2:]]
                sys.path[:] = ["", *base_path]
                main = type(sys)("__main__")
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            else:
                script = os.path.abspath(argv[0])
                sys.argv = list(argv)
                sys.path[:] = [os.path.dirname(script), *base_path]
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exit_code(exc)
        except BaseException as exc:
            # As Python prints it: from the script's first frame (not this server's or runpy's).
            tb, ours = exc.__traceback__, ("<warm-preflight>", "<frozen runpy>", runpy.__file__)
            while tb is not None and tb.tb_frame.f_code.co_filename in ours:
                tb = tb.tb_next
            traceback.print_exception(type(exc), exc, tb)
            code = 1
        try:
            atexit._run_exitfuncs()
        except SystemExit as exc:
            code = exit_code(exc)
        sys.stdout.flush(); sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


for line in channel_in:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(request)
    channel_out.write(json.dumps({"pid": pid}) + "\n"); channel_out.flush()
    _, status = os.waitpid(pid, 0)
    channel_out.write(json.dumps({"status": status}) + "\n"); channel_out.flush()
"""


class _Warm:
    """The warm process of this test process, its environment before it imported, and the lock that keeps
    its calls one at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, _SERVER, json.dumps(WARM_IMPORTS), json.dumps(WARM_SETTINGS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            text=True,
        )
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError(f"the warm start-check process ended before it was ready (exit {self.process.wait()})")
        self.env: dict = json.loads(ready)["env"]
        self.lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a start check with ``env`` imports the parser as one in a fresh interpreter would."""
        settled = {**WARM_SETTINGS, **env}  # the start check sets them where unset

        def relevant(environment: Mapping[str, str]) -> dict:
            return {k: v for k, v in environment.items() if k.startswith(IMPORT_VARIABLES)}

        return relevant(settled) == relevant(self.env)

    def run(self, argv: list, env: dict, cwd: str, input: Optional[str], timeout: Optional[float]) -> tuple:
        with self.lock, tempfile.TemporaryDirectory(prefix="warm-preflight-") as tmp:
            paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
            for path in paths.values():
                Path(path).write_text("")
            if input is not None:
                Path(paths["stdin"]).write_text(input)
            self.process.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": cwd, **paths}) + "\n")
            self.process.stdin.flush()
            pid = json.loads(self.process.stdout.readline())["pid"]
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            if not ready:
                os.kill(pid, signal.SIGKILL)
            status = json.loads(self.process.stdout.readline())["status"]
            out, err = Path(paths["stdout"]).read_text(), Path(paths["stderr"]).read_text()
            if not ready:
                raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, out, err)
            return os.waitstatus_to_exitcode(status), out, err


_warm: Optional[_Warm] = None
_started_by: Optional[int] = None


def _the_warm_process() -> _Warm:
    global _warm, _started_by
    if _warm is None or _started_by != os.getpid() or _warm.process.poll() is not None:
        _warm, _started_by = _Warm(), os.getpid()
    return _warm


def run(
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[Path | str] = None,
    input: Optional[str] = None,
    timeout: Optional[float] = None,
) -> subprocess.CompletedProcess:
    """``python ARGV`` (this interpreter), its exit code and text output, as subprocess.run(capture_output=True,
    text=True) gives them: forked from the warm process where the call allows it (the module docstring),
    else a fresh interpreter."""
    argv = [str(a) for a in argv]
    full_env = dict(os.environ if env is None else env)
    directory = str(cwd if cwd is not None else os.getcwd())
    fresh = not argv or (argv[0].startswith("-") and argv[0] != "-c")
    warm = None if fresh else _the_warm_process()
    if warm is None or not warm.serves(full_env):
        return subprocess.run(
            [sys.executable, *argv],
            env=full_env,
            cwd=directory,
            input=input,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
    code, out, err = warm.run(argv, full_env, directory, input, timeout)
    return subprocess.CompletedProcess([sys.executable, *argv], code, out, err)


def build_py_preflight(
    *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """``python build.py preflight ARGS`` from the checkout's root, through :func:`run`."""
    return run([str(REPO / "build.py"), "preflight", *args], env=env, cwd=REPO, timeout=timeout)
