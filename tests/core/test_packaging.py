"""pyproject.toml installs every package of the project and every file its code reads next to itself.

The packages are listed, not discovered, so a new package or data file is missed silently
unless this test names what the listing must cover: every top-level directory holding an
``__init__.py`` or imported as a package by the project's code, and every tracked file under
those packages that is not Python source, documentation (.md), a make fragment (.mk), a
.gitignore or a compose file build.py writes into compose/.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import tomllib
from support.repo import REPO

SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
NOT_DATA_SUFFIXES = (".py", ".md", ".mk")


def tracked(*paths: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def package_dir(package: str) -> Path:
    return REPO.joinpath(*package.split("."))


def top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_package_of_the_project_is_listed_and_build_py_is_not():
    listed = set(SETUPTOOLS["packages"])
    # Every package and subpackage with an __init__.py, outside the trees that are not installed.
    with_init = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in tracked("*__init__.py")
        if p.parent != REPO and p.parts[len(REPO.parts)] not in ("tests", "tools", "bench", ".github")
    }
    sources = [p for p in tracked("*.py") if p.parts[len(REPO.parts)] not in ("tests", "tools", "bench", ".github")]
    imported = set().union(*(top_level_imports(p) for p in sources))
    ours = {name for name in imported if (REPO / name).is_dir()}
    assert with_init | ours <= listed
    assert all(package_dir(p).is_dir() for p in listed)
    assert "build" not in listed and "py-modules" not in SETUPTOOLS  # PyPA's `build` keeps its name


def test_every_file_the_packages_read_is_package_data():
    top = [p for p in SETUPTOOLS["packages"] if "." not in p]
    data = {
        p
        for p in tracked(*top)
        if p.suffix not in NOT_DATA_SUFFIXES
        and p.name != ".gitignore"
        and not (p.parent == REPO / "compose" and p.name.endswith(".compose.yaml"))
    }
    covered = set()
    for package, patterns in SETUPTOOLS["package-data"].items():
        for pattern in patterns:
            covered.update(p for p in package_dir(package).glob(pattern) if p.is_file())
    assert data, "no data files found: the listing or this test is wrong"
    assert sorted(str(p.relative_to(REPO)) for p in data - covered) == []
