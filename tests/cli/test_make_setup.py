"""What the Makefile's set-up does to the host: `make image` runs no package manager, and the
test set-up (`make deps`) installs Debian's docker.io only where no engine answers and no
other engine package is installed.

The package managers are replaced by recording shims first on PATH (`apt-get`, `apt`,
`dpkg`, `sudo`), so the tests see every call the real run would make and install nothing.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from recipe_copies import copy_recipe, pinned

REPO = Path(__file__).resolve().parents[2]
ENGINE_LINE = (REPO / "requirements" / "debian-engine.txt").read_text().split("\n")
ENGINE_PACKAGES = next(line.split() for line in ENGINE_LINE if line.strip() and not line.startswith("#"))
DEBIAN_ENGINE, OTHER_ENGINES = ENGINE_PACKAGES[0], ENGINE_PACKAGES[1:]


def _shim(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def recording_shims(
    directory: Path, log: Path, *, installed: set[str] | None, engine_answers: bool | None
) -> dict[str, str]:
    """Shims for the package managers that log each call to ``log``.

    ``installed``: the packages ``dpkg -s`` reports (None: every call fails, as on a host
    without dpkg). ``engine_answers``: a ``docker`` shim whose ``info`` succeeds or fails
    (None: the real docker on PATH).
    """
    directory.mkdir(parents=True, exist_ok=True)
    record = f'echo "$(basename "$0") $*" >> {log}\n'
    if installed is None:
        _shim(directory, "dpkg", record + "exit 1\n")
    else:
        cases = " | ".join(sorted(installed)) or "__none__"
        _shim(
            directory,
            "dpkg",
            record + f'for p in "$@"; do :; done\ncase "$p" in {cases}) exit 0 ;; *) exit 1 ;; esac\n',
        )
    _shim(directory, "apt-get", record + "exit 0\n")
    _shim(directory, "apt", record + "exit 0\n")
    _shim(directory, "sudo", record + 'exec "$@"\n')
    if engine_answers is not None:
        _shim(directory, "docker", f"exit {0 if engine_answers else 1}\n")
    env = dict(os.environ)
    env["PATH"] = f"{directory}{os.pathsep}{env['PATH']}"
    return env


def calls(log: Path, program: str) -> list[str]:
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if line.split(" ", 1)[0] == program]


def make(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def test_make_image_runs_no_package_manager(tmp_path):
    """The main job's set-up on a host whose engine answers: no apt-get, apt or dpkg call at all
    (even `dpkg -s`); a dry run of the build is enough to pass every prerequisite."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("no Docker engine answers: this test needs the test machine's engine (make test starts it)")
    log = tmp_path / "calls.log"
    env = recording_shims(tmp_path / "bin", log, installed=set(), engine_answers=None)
    recipe = copy_recipe(tmp_path, pinned)
    done = make("image", "PUSH=0", f"RECIPE={recipe}", "BUILD_ARGS=--dry-run", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FROM " in done.stdout  # the dry run's plan: the build step ran
    assert calls(log, "apt-get") == [] and calls(log, "apt") == [] and calls(log, "dpkg") == []


def test_make_image_says_which_python_is_missing(tmp_path):
    """No usable Python: one line and exit 2 from the venv rule, nothing installed."""
    log = tmp_path / "calls.log"
    env = recording_shims(tmp_path / "bin", log, installed=set(), engine_answers=True)
    done = make("image", "PUSH=0", "PYTHON=/nonexistent/python3", f"VENV={tmp_path / 'venv'}", env=env)
    assert done.returncode != 0
    assert "older than Python 3.10" in done.stderr and "/nonexistent/python3" in done.stderr
    assert not (tmp_path / "venv").exists()
    assert calls(log, "apt-get") == [] and calls(log, "dpkg") == []


def _installs(log: Path) -> list[str]:
    """The packages of every `apt-get install` call."""
    packages = []
    for line in calls(log, "apt-get"):
        words = line.split()
        if "install" in words:
            packages += [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    return packages


@pytest.mark.parametrize("other", OTHER_ENGINES)
def test_test_setup_leaves_another_engine_alone(tmp_path, other):
    """A host with Docker CE (or another engine package) installed and not answering: `make deps`
    installs the missing test packages but never Debian's docker.io, which would remove it."""
    log = tmp_path / "calls.log"
    env = recording_shims(tmp_path / "bin", log, installed={other}, engine_answers=False)
    done = make("deps", env=env)
    assert done.returncode == 0, done.stderr
    installed = _installs(log)
    assert "debootstrap" in installed  # the test packages are installed ...
    assert DEBIAN_ENGINE not in installed  # ... the engine is left as it is
    assert f"{other} installed, not answering: left alone" in done.stdout


def test_test_setup_installs_debian_engine_where_none_is(tmp_path):
    """No engine answers and no engine package: Debian's docker.io is installed with the rest."""
    log = tmp_path / "calls.log"
    env = recording_shims(tmp_path / "bin", log, installed=set(), engine_answers=False)
    done = make("deps", env=env)
    assert done.returncode == 0, done.stderr
    assert DEBIAN_ENGINE in _installs(log)


def test_test_setup_uses_an_answering_engine(tmp_path):
    """An engine answers (Docker Desktop, rootless, DOCKER_HOST, a CE engine): no engine package."""
    log = tmp_path / "calls.log"
    env = recording_shims(tmp_path / "bin", log, installed=set(), engine_answers=True)
    done = make("deps", env=env)
    assert done.returncode == 0, done.stderr
    installed = _installs(log)
    assert "debootstrap" in installed and DEBIAN_ENGINE not in installed
