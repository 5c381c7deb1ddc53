"""The one exit-code table, geometry/errors.py ExitCode, read from the product's source with ``ast``.

* Each number has one meaning: no two entries share a number, and each has a one-line title and meaning.
* Every entry is one some program returns: a product module names it.
* No product module outside the table has an exit code of its own: no ``exit_code = <int>`` (or
  ``exit_code=<int>``) and no ``sys.exit(<int>)`` but ``sys.exit(0)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.repo import REPO

from geometry.errors import ExitCode
from stackbuild.core import errors

PRODUCT = ("geometry", "overlay", "stackbuild")
TABLE = REPO / "geometry" / "errors.py"
# Calls that end the process with their argument.
EXITS = {"sys.exit", "exit", "os._exit", "ctx.exit"}


def product_modules() -> list[Path]:
    found = [path for package in PRODUCT for path in sorted((REPO / package).rglob("*.py"))]
    return [REPO / "build.py", *(path for path in found if path != TABLE and "tests" not in path.parts)]


def _int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def bare_exit_codes(path: Path) -> list[str]:
    """``path:line: code`` for every exit code ``path`` gives as a number instead of a table entry."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {getattr(t, "id", getattr(t, "attr", None)) for t in targets}
            if "exit_code" in names and node.value is not None and _int(node.value):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.keyword) and node.arg == "exit_code" and _int(node.value):
            found.append(f"{path.name}:{node.value.lineno}: exit_code={ast.unparse(node.value)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in EXITS:
            if node.args and _int(node.args[0]) and node.args[0].value != 0:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def entries_named(path: Path) -> set[str]:
    """The ExitCode entries ``path`` names (``ExitCode.X``, or ``E.X`` where ``E = ExitCode``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {"ExitCode"} | {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.value) == "ExitCode"
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
    }


def test_each_number_has_one_meaning():
    numbers = [int(entry) for entry in ExitCode.__members__.values()]  # an alias (a second name) counts too
    assert len(numbers) == len(set(numbers)), sorted(n for n in numbers if numbers.count(n) > 1)
    for entry in ExitCode:
        assert entry.title and entry.meaning, entry.name
        assert "\n" not in entry.title + entry.meaning, entry.name
    titles = [entry.title for entry in ExitCode]
    assert len(titles) == len(set(titles))


def test_every_entry_is_one_a_program_returns():
    named = set().union(*(entries_named(path) for path in product_modules()))
    assert set(ExitCode.__members__) - named == set()


def test_every_error_exits_with_an_entry():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    for cls in (errors.StackBuildError, *subclasses(errors.StackBuildError)):
        assert isinstance(cls.exit_code, ExitCode), cls.__name__


def test_no_product_module_has_an_exit_code_of_its_own():
    found = [line for path in product_modules() for line in bare_exit_codes(path)]
    assert found == [], "name the code by its geometry/errors.py ExitCode entry: " + "; ".join(found)


@pytest.mark.parametrize(
    "text,problem",
    [
        ("class E(Exception):\n    exit_code = 4\n", "m.py:2: exit_code = 4"),
        ("import sys\nsys.exit(3)\n", "m.py:2: sys.exit(3)"),
        ("def f(ctx):\n    ctx.exit(2)\n", "m.py:2: ctx.exit(2)"),
        ("record(exit_code=5)\n", "m.py:1: exit_code=5"),
    ],
)
def test_a_bare_exit_code_is_found(tmp_path, text, problem):
    path = tmp_path / "m.py"
    path.write_text(text)
    assert bare_exit_codes(path) == [problem]


def test_an_entry_or_a_success_is_not_a_bare_code(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import sys\nexit_code = ExitCode.GEOMETRY\nsys.exit(0)\nsys.exit(main())\n")
    assert bare_exit_codes(path) == []
