"""The `vllm serve` parser's passing verdicts, kept per vLLM installation.

Asking vLLM's parser imports vLLM (10-20 s); `compose` and `deploy` ask it on every run. A command
line that a given installation passed once is passed again without the import: its verdict is kept
under the user's cache directory (``$GLM53_CACHE_DIR``, else ``$XDG_CACHE_HOME/glm53``, else
``~/.cache/glm53``), in ``serve-parser/``, one JSON file per command line.

The key of a verdict is the command line, the oracle interpreter's path, the installed vLLM (its
distribution's version and its package tree as the oracle record keys it, ``oracle_record.tree_digest``:
``.py`` files by content, the others by size, so a patched or reinstalled tree is a new installation),
the bytes of the parser code (serve_oracle.py and the pre-flight's serve_flags.py) and the ``VLLM_*``
variables the oracle runs with (vLLM reads its settings from them; those named like a credential are left
out, so no secret goes into a key). Only ``passed`` verdicts are kept: a refusal, a missing vLLM or a
broken one is asked again every time. A cache that cannot be read or written is passed over.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import geometry
from geometry import PARSE_SETTINGS, parse_serve_args

CACHE_ENV = "GLM53_CACHE_DIR"
SUBDIR = "serve-parser"
# The script the oracle interpreter runs (stackbuild.serve.validate) and the parser it loads: the code
# whose answer a verdict is.
ORACLE_SCRIPT = Path(__file__).resolve().parent / "serve_oracle.py"
PARSER_CODE = (ORACLE_SCRIPT, Path(inspect.getfile(parse_serve_args)))
# Run by the oracle interpreter, with the directory holding the geometry package as its argument (as
# serve_oracle.py loads it): vLLM's version and its tree's digest, found without importing vLLM.
_INSTALLATION_PROBE = r"""
import importlib.metadata, json, sys
sys.path.insert(0, sys.argv[1])
from geometry import oracle_record
root = oracle_record.vllm_directory()
owners = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
versions = sorted({importlib.metadata.version(name) for name in owners})
print(json.dumps({"root": root, "versions": versions, "tree": oracle_record.tree_digest(root)}))
"""
_GEOMETRY_HOME = str(Path(geometry.__file__).resolve().parent.parent)
PROBE_TIMEOUT_S = 60
_CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


def oracle_environment() -> dict:
    """The environment the serve-parser oracle runs in: the parser's settings over the caller's (vLLM's CPU
    platform, whatever the host has)."""
    return {**os.environ, **PARSE_SETTINGS}


def vllm_settings(environment: dict) -> list:
    """The ``VLLM_*`` variables of ``environment`` a verdict depends on, in name order (credentials left out)."""
    return sorted(
        (name, value)
        for name, value in environment.items()
        if name.startswith("VLLM_") and not _CREDENTIAL_NAME.search(name)
    )


def cache_directory() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        base = Path(explicit)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glm53"
    return base / SUBDIR


def installation_key(python: str) -> Optional[str]:
    """What names ``python``'s vLLM installation and the parser code, hashed; None where it cannot be told
    (no such interpreter, no vLLM: nothing is kept then)."""
    try:
        probe = subprocess.run(
            [python, "-c", _INSTALLATION_PROBE, _GEOMETRY_HOME], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if probe.returncode != 0:
        return None
    digest = hashlib.sha256()
    digest.update(os.path.realpath(python).encode() + b"\0" + probe.stdout.strip().encode() + b"\0")
    digest.update(json.dumps(vllm_settings(oracle_environment())).encode() + b"\0")
    for code in PARSER_CODE:
        try:
            digest.update(hashlib.sha256(code.read_bytes()).digest())
        except OSError:
            return None
    return digest.hexdigest()


def _entry(installation: str, argv: Sequence[str]) -> Path:
    key = hashlib.sha256(installation.encode() + b"\0" + json.dumps(list(argv)).encode()).hexdigest()
    return cache_directory() / f"{key}.json"


def kept(installation: Optional[str], argv: Sequence[str]) -> Optional[dict]:
    """The passing verdict kept for ``argv`` on this installation, else None."""
    if installation is None:
        return None
    try:
        verdict = json.loads(_entry(installation, argv).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return verdict if isinstance(verdict, dict) and verdict.get("status") == "passed" else None


def keep(installation: Optional[str], argv: Sequence[str], verdict: dict) -> None:
    """Keep ``verdict`` if it is a pass (written whole or not at all; a cache that cannot be written is passed over)."""
    if installation is None or verdict.get("status") != "passed":
        return
    path = _entry(installation, argv)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=path.parent, suffix=".part")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(verdict, fh)
        os.replace(part, path)
    except OSError:
        Path(part).unlink(missing_ok=True)
