"""Processes that parse a `vllm serve` argv with vLLM's parser, forked from one that has already imported it.

The start check (`build.py preflight` on edited flags, ``geometry.preflight.run.preflight`` in a script) and
the serve-parser oracle (`serve_oracle.py`, which `compose` and `deploy` run) make the same settings
(``geometry.prepare_parser_import``: vLLM's CPU platform, the import settings), then import vLLM's `vllm
serve` parser: 6-8 CPU-s in each fresh interpreter, before their own work. :func:`run` forks such a process
from a warm one instead: one per test process, started at its first use (conftest starts it with the
session), gone when that process ends. It made the same settings and imported the same parser once, and
it listens on a Unix socket (tests/support/warm_oracle.py brings `serve_oracle.py` there).

The child is a process of its own: its working directory, environment, ``sys.argv``, ``sys.path[0]`` and
file descriptors 0-2 are a fresh interpreter's; it runs the script (or ``-c`` code) as ``__main__``, runs the
exit handlers and ends with the exit code, and the traceback, Python would give. What differs is only that
the parser's modules (and the settings' own, from this checkout) are imported before the process's own, and
that what vLLM printed while it imported went to the test's stderr (the start check holds it back).

So the warm process takes a call only where that difference cannot matter: ``-c`` code or a script of this
checkout (no interpreter option, no ``-m``), whose environment, once the settings are set where unset, holds
the warm process's values of every variable those imports read (``IMPORT_VARIABLES``). Every other call runs
a fresh interpreter; so do the tests about the import itself (what the start check holds back while vLLM
imports, that the fast path never imports vLLM). Use it only for processes that make those settings before
they import vLLM: another would find vLLM imported under the start check's platform.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from support.repo import REPO

# What the start check imports first of vLLM (geometry/preflight/serve_flags.py): the `vllm serve` parser
# (vllm.entrypoints.cli.serve pulls in torch, transformers, vllm.config and the OpenAI server's protocol
# modules) and its argument parser class.
WARM_IMPORTS = ("vllm.entrypoints.cli.serve", "vllm.utils.argparse_utils")
# Where a test process tells the processes it starts the address of its warm process (tests/support/warm_oracle.py).
SOCKET_ENV = "GLM53_TEST_WARM_PREFLIGHT"
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
import atexit, importlib, json, os, runpy, select, socket, sys, traceback
sys.argv = sys.argv[1:]
imports, variables, address = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2])), sys.argv[3]
lifeline = os.dup(0)  # the test process holds the other end: its end closed, this process ends
ready = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(2, 1)
from geometry.preflight.serve_flags import PARSE_SETTINGS, prepare_parser_import
from geometry.oracle.import_settings import IMPORT_SETTINGS
prepare_parser_import()
settings = {**PARSE_SETTINGS, **IMPORT_SETTINGS}
before = dict(os.environ)
for module in imports:
    importlib.import_module(module)
# What the imports set in the environment (vllm/env_override.py, ...): a fresh interpreter's import sets it too.
imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}
base_path = list(sys.path[1:])
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(address)
listener.listen(8)
sys.stdout.flush(); sys.stderr.flush()
ready.write("listening\n"); ready.close()


def relevant(environment):
    return {k: v for k, v in environment.items() if k.startswith(variables)}


home = os.path.realpath(os.getcwd())  # the checkout this process imported geometry/ from


def serves(request):
    # The process sets the settings where unset before it imports the parser; a script of another checkout
    # would import that checkout's geometry/.
    script = request["argv"][0]
    ours = script == "-c" or os.path.realpath(script).startswith(home + os.sep)
    return ours and relevant({**settings, **request["env"]}) == relevant(before)


def exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def child(request, closing):
    code = 1
    try:
        for fd in closing:
            os.close(fd)
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


def answer(connection):
    with connection, connection.makefile("rw") as channel:
        request = json.loads(channel.readline())
        if not serves(request):
            channel.write(json.dumps({"fresh": True}) + "\n"); channel.flush()
            return
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(request, [listener.fileno(), lifeline, connection.fileno()])
        channel.write(json.dumps({"pid": pid}) + "\n"); channel.flush()
        _, status = os.waitpid(pid, 0)
        channel.write(json.dumps({"status": status}) + "\n"); channel.flush()


while True:
    readable, _, _ = select.select([listener, lifeline], [], [])
    if lifeline in readable:
        break
    connection, _ = listener.accept()
    try:
        answer(connection)
    except (OSError, ValueError):
        pass  # a client that went away: the next one is served
listener.close()
os.unlink(address)
"""


class _Warm:
    """The warm process of this test process and its socket's address."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="warm-preflight-")
        self.address = os.path.join(self.directory, "socket")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _BOOT,
                _SERVER,
                json.dumps(WARM_IMPORTS),
                json.dumps(IMPORT_VARIABLES),
                self.address,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            text=True,
        )
        self.listening = False
        atexit.register(self.close)

    def wait_ready(self) -> None:
        """Until the warm process has imported and listens (it says so on its stdout)."""
        if not self.listening:
            if not self.process.stdout.readline():
                raise RuntimeError(
                    f"the warm start-check process ended before it was ready (exit {self.process.wait()})"
                )
            self.listening = True

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)

    def run(self, argv: list, env: dict, cwd: str, input: Optional[str], timeout: Optional[float]) -> Optional[tuple]:
        """(exit code, stdout, stderr) of ``argv`` forked from the warm process; None where it must run fresh."""
        self.wait_ready()
        with tempfile.TemporaryDirectory(prefix="warm-preflight-") as tmp:
            return call(self.address, argv, env, cwd, input or "", tmp, timeout)


def call(
    address: str, argv: list, env: dict, cwd: str, input: str, tmp: str, timeout: Optional[float]
) -> Optional[tuple]:
    """One call to the warm process at ``address`` (its files in ``tmp``): (code, stdout, stderr), or None where
    the warm process says the call must run fresh."""
    paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
    for name, text in (("stdin", input), ("stdout", ""), ("stderr", "")):
        Path(paths[name]).write_text(text)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address)
        with connection.makefile("rw") as channel:
            channel.write(json.dumps({"argv": argv, "env": env, "cwd": cwd, **paths}) + "\n")
            channel.flush()
            first = json.loads(channel.readline())
            if first.get("fresh"):
                return None
            ready, _, _ = select.select([connection], [], [], timeout)
            if not ready:
                os.kill(first["pid"], signal.SIGKILL)
            status = json.loads(channel.readline())["status"]
    out, err = Path(paths["stdout"]).read_text(), Path(paths["stderr"]).read_text()
    if not ready:
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, out, err)
    return os.waitstatus_to_exitcode(status), out, err


_warm: Optional[_Warm] = None
_started_by: Optional[int] = None


def the_warm_process() -> _Warm:
    """This test process's warm process (started at the first call)."""
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
    result = None if fresh else the_warm_process().run(argv, full_env, directory, input, timeout)
    if result is None:
        return subprocess.run(
            [sys.executable, *argv],
            env=full_env,
            cwd=directory,
            input=input,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
    return subprocess.CompletedProcess([sys.executable, *argv], *result)


def build_py_preflight(
    *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """``python build.py preflight ARGS`` from the checkout's root, through :func:`run`."""
    return run([str(REPO / "build.py"), "preflight", *args], env=env, cwd=REPO, timeout=timeout)
