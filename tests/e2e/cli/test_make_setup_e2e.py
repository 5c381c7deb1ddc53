"""What the Makefile's set-up does to the host: `make image` runs no package manager and installs
the project's runtime dependencies only, and the test set-up (`make deps`) installs Debian's
docker.io only where no engine answers and no other engine package is installed.

The package managers are replaced by shims first on PATH: for `make deps`, recording ones
(`apt-get`, `apt`, `dpkg`, `sudo`), so the tests see every call the real run would make and
install nothing; for `make image` (on a fresh clone, with a fresh venv and the real engine),
ones that record the call and fail (those, `snap`, and `pip`, `pip3`, `python3 -m pip` outside
the venv).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.repo import REPO

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


# What a host installs software with; none may run during `make image` (pip and pip3 on PATH are the host's,
# not the venv's: the Makefile runs the venv's pip as `$(VENV)/bin/python -m pip`).
PACKAGE_MANAGERS = ("apt", "apt-get", "dpkg", "snap", "pip", "pip3", "sudo")
TEST_ONLY = ("pytest", "hypothesis", "ruff", "xdist", "safetensors")  # modules of the test extra alone


def refusing_shims(directory: Path, log: Path, python: str) -> dict[str, str]:
    """Every package manager a shim that logs its call and fails; ``python3`` one that refuses
    ``-m pip`` / ``-m ensurepip`` (a pip run outside any venv) and else runs ``python``."""
    directory.mkdir(parents=True, exist_ok=True)
    record = f'echo "$(basename "$0") $*" >> {log}\n'
    for name in PACKAGE_MANAGERS:
        _shim(directory, name, record + "exit 100\n")
    _shim(
        directory,
        "python3",
        f'case "$1 $2" in "-m pip"|"-m ensurepip") {record}exit 100 ;; esac\nexec {python} "$@"\n',
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    # the test runner's venv leaves PATH: the build finds only the shims and the host's programs
    runner_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join([str(directory), *(p for p in env["PATH"].split(os.pathsep) if p != runner_bin)])
    return env


@pytest.mark.docker
@pytest.mark.registry
def test_make_image_on_a_clean_clone_runs_no_package_manager(tmp_path, synthetic_base_amd64, registry):
    """`make image` in a fresh clone of HEAD: its own new venv with the runtime dependencies only (no test extra),
    the image built on the synthetic base by the real engine (PUSH=0), and no package manager called at all."""
    from stack_e2e import docker_login, local_tags, recipe_copy, unique_repository

    base_python = Path(sys.base_prefix) / "bin" / "python3"
    if sys.base_prefix == sys.prefix or not base_python.exists():
        pytest.fail(f"the tests run in a venv over a Python with bin/python3 ({sys.prefix}, {sys.base_prefix})")
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(checkout)], check=True, timeout=300)
    log = tmp_path / "calls.log"
    env = refusing_shims(tmp_path / "bin", log, str(base_python))
    env["DOCKER_CONFIG"] = str(docker_login(tmp_path, registry))
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "glm53-make-image")
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(checkout),
            "image",
            "PUSH=0",
            f"PYTHON={tmp_path / 'bin' / 'python3'}",
            f"RECIPE={recipe}",
            f"BUILD_ARGS=--repository {repository}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert not log.exists(), log.read_text()  # no package manager, no pip outside the venv
    image_id = json.loads((checkout / "out" / "build-report.json").read_text())["image_id"]
    assert f"built {image_id} (linux/amd64)" in done.stdout
    assert local_tags(repository)  # tagged in the engine, not pushed
    venv = checkout / ".venv"
    assert (venv / ".installed").exists() and not (venv / ".test-installed").exists()
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util, json, sys; import stackbuild, docker, jinja2, oras; "
            "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))",
            *TEST_ONLY,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == []  # the runtime dependencies import; the test extra is not there


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
    assert "mmdebstrap" in installed  # the test packages are installed ...
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
    assert "mmdebstrap" in installed and DEBIAN_ENGINE not in installed
