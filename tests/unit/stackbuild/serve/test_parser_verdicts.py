"""The serve parser's passing verdicts kept per vLLM installation (stackbuild/serve/parser_verdicts.py).

vLLM's real parser answers (the test venv's vLLM, the oracle interpreter `make oracle` installs); the
oracle interpreter is that Python behind a wrapper that notes each run of serve_oracle.py, so a test
can tell an answer vLLM gave now from one kept.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from infra.fixtures import unavailable

from stackbuild.serve import parser_verdicts
from stackbuild.serve.validate import run_serve_parser, run_serve_parser_cases

GOOD = ["/models/m", "--max-model-len", "4096", "--kv-cache-dtype", "fp8"]
OTHER = ["/models/m", "--max-model-len", "8192"]
REFUSED = ["/models/m", "--kv-cache-dtype", "not-a-dtype"]


def _wrapper(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """(oracle interpreter, how many times it ran serve_oracle.py so far), the cache in tmp_path."""
    if importlib.util.find_spec("vllm") is None:
        unavailable("vLLM is not installed for the tests' interpreter (make oracle)")
    monkeypatch.setenv(parser_verdicts.CACHE_ENV, str(tmp_path / "cache"))
    log = tmp_path / "asked.log"
    log.touch()
    python = _wrapper(
        tmp_path,
        "python",
        f'case "$1" in *serve_oracle.py) echo asked >> "{log}";; esac\nexec "{sys.executable}" "$@"',
    )
    return str(python), lambda: len(log.read_text().splitlines())


def test_a_pass_is_kept_and_not_asked_again(counted, capfd):
    python, asked = counted
    first = run_serve_parser(GOOD, python=python)
    assert first["status"] == "passed" and asked() == 1
    assert first["parsed"]["max_model_len"] == 4096 and first["parsed"]["kv_cache_dtype"] == "fp8"
    capfd.readouterr()
    assert run_serve_parser(GOOD, python=python) == first
    assert asked() == 1
    assert "passed it before" in capfd.readouterr().err
    # Of several command lines only the new one is asked, and the answers keep their order.
    both = run_serve_parser_cases([OTHER, GOOD], python=python)
    assert asked() == 2 and both[1] == first
    assert both[0]["status"] == "passed" and both[0]["parsed"]["max_model_len"] == 8192


def test_an_unreadable_entry_is_asked_again_and_replaced(counted):
    python, asked = counted
    run_serve_parser(GOOD, python=python)
    (entry,) = parser_verdicts.cache_directory().glob("*.json")
    entry.write_text('{"status": "passed", "parsed"')  # cut short
    assert run_serve_parser(GOOD, python=python)["status"] == "passed"
    assert asked() == 2
    assert json.loads(entry.read_text())["status"] == "passed"


def test_a_refusal_is_not_kept(counted):
    python, asked = counted
    verdict = run_serve_parser(REFUSED, python=python)
    assert verdict["status"] == "rejected" and "not-a-dtype" in verdict["error"]
    assert asked() == 1
    assert not parser_verdicts.cache_directory().exists() or not list(parser_verdicts.cache_directory().iterdir())


def test_a_cache_that_cannot_be_written_is_passed_over(counted, tmp_path, monkeypatch):
    python, asked = counted
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(parser_verdicts.CACHE_ENV, str(blocker / "cache"))
    assert run_serve_parser(GOOD, python=python)["status"] == "passed"
    assert asked() == 1
    assert blocker.read_text() == ""


def _fake_installation(tmp_path: Path) -> tuple[str, Path]:
    """An interpreter whose only site is a small `vllm` package of tmp_path's (no site-packages: -S)."""
    site = tmp_path / "site"
    (site / "vllm" / "engine").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "engine" / "arg_utils.py").write_text("X = 1\n")
    info = site / "vllm-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    (info / "top_level.txt").write_text("vllm\n")
    python = _wrapper(tmp_path, "fake-python", f'PYTHONPATH="{site}" exec "{sys.executable}" -S "$@"')
    return str(python), site


def test_the_key_is_the_installation(tmp_path):
    python, site = _fake_installation(tmp_path)
    key = parser_verdicts.installation_key(python)
    assert key is not None and key == parser_verdicts.installation_key(python)
    # Another interpreter path is another installation.
    twin = _wrapper(tmp_path, "twin-python", f'exec "{python}" "$@"')
    assert parser_verdicts.installation_key(str(twin)) not in (None, key)
    # A file of the package edited in place (a patch), even to the same size, is a new installation.
    source = site / "vllm" / "engine" / "arg_utils.py"
    stat = source.stat()
    source.write_text("X = 2\n")
    assert source.stat().st_size == stat.st_size
    edited = parser_verdicts.installation_key(python)
    assert edited not in (None, key)
    # Another version of the distribution is another installation.
    (site / "vllm-9.9.9.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.10\n")
    assert parser_verdicts.installation_key(python) not in (None, key, edited)


def test_the_key_holds_the_vllm_settings_but_no_credential(tmp_path, monkeypatch):
    python, _ = _fake_installation(tmp_path)
    for name in [n for n in os.environ if n.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    key = parser_verdicts.installation_key(python)
    # The oracle runs on vLLM's CPU platform whatever the caller says.
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cuda")
    assert parser_verdicts.installation_key(python) == key
    # Any other setting vLLM reads is part of the installation's answer.
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    with_setting = parser_verdicts.installation_key(python)
    assert with_setting not in (None, key)
    # A credential is not hashed into a key: changing it finds the same verdicts.
    monkeypatch.setenv("VLLM_API_KEY", "first")
    assert parser_verdicts.installation_key(python) == with_setting
    monkeypatch.setenv("VLLM_API_KEY", "second")
    assert parser_verdicts.installation_key(python) == with_setting


def test_no_vllm_or_no_interpreter_keeps_nothing(tmp_path):
    python, site = _fake_installation(tmp_path)
    shutil.rmtree(site / "vllm")
    assert parser_verdicts.installation_key(python) is None
    assert parser_verdicts.installation_key(str(tmp_path / "no-such-python")) is None
    assert parser_verdicts.kept(None, GOOD) is None
