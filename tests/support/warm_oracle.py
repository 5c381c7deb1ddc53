"""The serve-parser oracle interpreter the tests give `build.py` (GLM53_ORACLE_PYTHON, the wrapper
:func:`oracle_wrapper` writes): `serve_oracle.py` runs forked from the test process's warm process
(tests/support/warm_preflight.py), whose address the test process puts in ``SOCKET_ENV``; every other call,
and one the warm process cannot take (another environment, no warm process yet), runs the interpreter itself.

`serve_oracle.py` makes the start check's settings (``prepare_parser_import``) and imports the same `vllm
serve` parser, so the warm process is a fresh interpreter to it as it is to the start check.

Run as ``python -S warm_oracle.py PYTHON ORACLE_SCRIPT ARGS...`` (stdlib only, no site: it starts in
milliseconds); ORACLE_SCRIPT is this checkout's `serve_oracle.py`, the one script it forwards.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.warm_preflight import SOCKET_ENV, call  # noqa: E402


def oracle_wrapper() -> str:
    """An executable that runs this script under this interpreter: one path for every test process of a run
    with this interpreter and checkout (the serve-parser verdicts are kept per interpreter path)."""
    from stackbuild.serve.parser_verdicts import ORACLE_SCRIPT

    script = Path(__file__).resolve()
    body = f'#!/bin/sh\nexec "{sys.executable}" -S "{script}" "{sys.executable}" "{ORACLE_SCRIPT}" "$@"\n'
    directory = Path(tempfile.gettempdir()) / f"glm53-warm-oracle-{hashlib.sha256(body.encode()).hexdigest()[:12]}"
    path = directory / "python"
    if not path.is_file():
        directory.mkdir(exist_ok=True)
        staging = directory / f".python.{os.getpid()}"
        staging.write_text(body)
        staging.chmod(0o755)
        os.replace(staging, path)
    return str(path)


def _warm(argv: list, address: str) -> None:
    """Run ``argv`` forked from the warm process and end with its code; return where it must run fresh
    (stdin then holds what was read of it)."""
    data = sys.stdin.read()
    with tempfile.TemporaryDirectory(prefix="warm-oracle-") as tmp:
        try:
            result = call(address, argv, dict(os.environ), os.getcwd(), data, tmp, None)
        except OSError:  # no warm process listening (yet): the interpreter itself
            result = None
    if result is not None:
        code, out, err = result
        sys.stdout.write(out)
        sys.stderr.write(err)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    with tempfile.TemporaryFile() as kept:
        kept.write(data.encode())
        kept.seek(0)
        os.dup2(kept.fileno(), 0)


def main() -> None:
    python, oracle_script, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    address = os.environ.get(SOCKET_ENV)
    if address and argv and os.path.realpath(argv[0]) == oracle_script:
        _warm(argv, address)
    os.execv(python, [python, *argv])


if __name__ == "__main__":
    main()
