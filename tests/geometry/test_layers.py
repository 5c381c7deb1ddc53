"""The import structure of the shipped and host packages, read from their source with ``ast``.

* geometry/ (and the rest) has no import cycle, counting imports inside functions, which hide a
  cycle from the interpreter until the function runs, but not from a reader.
* The layers: geometry/ and overlay/ import nothing of stackbuild; stackbuild.core imports
  nothing of stackbuild.image, stackbuild.serve or stackbuild.cli; stackbuild.image and
  stackbuild.serve never import each other; the stackbuild.cli package (any of its modules) alone
  imports both, and nothing outside it imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("geometry", "overlay", "stackbuild")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, root: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file; ``from X import Y`` names
    both ``X`` and ``X.Y`` (Y may be a submodule). Relative imports are resolved."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules it imports (any module name, inside the packages or not)."""
    graph = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            graph[module_name(path, root)] = imported_names(path, root)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself) among the graph's own modules (Tarjan's algorithm, iterative)."""
    edges = {m: sorted(d for d in deps if d in graph) for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    found.append(sorted(component))
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, deps in sorted(graph.items()):

        def imports(package: str) -> list[str]:
            return sorted(d for d in deps if _in(d, package))

        if _in(module, "geometry") or _in(module, "overlay"):
            problems += [
                f"{module} imports {d} (geometry/ and overlay/ import nothing of stackbuild)"
                for d in imports("stackbuild")
            ]
        if _in(module, "stackbuild.core"):
            for upper in ("stackbuild.image", "stackbuild.serve", "stackbuild.cli"):
                problems += [f"{module} imports {d} (stackbuild.core is below {upper})" for d in imports(upper)]
        for one, other in (("stackbuild.image", "stackbuild.serve"), ("stackbuild.serve", "stackbuild.image")):
            if _in(module, one):
                problems += [
                    f"{module} imports {d} ({one} and {other} never import each other)" for d in imports(other)
                ]
        if not _in(module, "stackbuild.cli"):
            if imports("stackbuild.image") and imports("stackbuild.serve"):
                problems.append(
                    f"{module} imports both stackbuild.image and stackbuild.serve (only stackbuild/cli/ does)"
                )
            problems += [f"{module} imports {d} (nothing imports the CLI)" for d in imports("stackbuild.cli")]
    return problems


def test_no_import_cycle():
    graph = import_graph(ROOT)
    assert {"geometry.model.model", "geometry.model.inputs", "stackbuild.core.recipe"} <= set(graph)
    assert cycles({m: deps for m, deps in graph.items() if _in(m, "geometry")}) == []
    assert cycles(graph) == []


def test_the_layers_import_one_way():
    graph = import_graph(ROOT)
    assert {
        "geometry.plan.simulate",
        "overlay.apply",
        "stackbuild.cli",
        "stackbuild.cli.image",
        "stackbuild.core.gate",
    } <= set(graph)
    assert layer_violations(graph) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    """The circle geometry/ had: a module-level import one way, a function-level one back."""
    root = _tree(
        tmp_path,
        {
            "geometry/__init__.py": "",
            "geometry/inputs.py": "def resolve():\n    from .model import model_kind\n",
            "geometry/model.py": "from . import drafter\n",
            "geometry/drafter.py": "from .inputs import BadInput\n",
            "geometry/table.py": "from geometry.model import x\n",
        },
    )
    assert cycles(import_graph(root, ("geometry",))) == [["geometry.drafter", "geometry.inputs", "geometry.model"]]


@pytest.mark.parametrize(
    "module,text,problem",
    [
        (
            "geometry/gate.py",
            "def f():\n    import stackbuild.core.errors\n",
            "geometry.gate imports stackbuild.core.errors",
        ),
        ("overlay/apply.py", "from stackbuild import cli\n", "overlay.apply imports stackbuild"),
        ("stackbuild/core/recipe.py", "from ..image import plan\n", "stackbuild.core.recipe imports stackbuild.image"),
        (
            "stackbuild/image/plan.py",
            "from stackbuild.serve.compose import x\n",
            "stackbuild.image.plan imports stackbuild.serve.compose",
        ),
        (
            "stackbuild/serve/compose.py",
            "def f():\n    from stackbuild.image import render\n",
            "stackbuild.serve.compose imports stackbuild.image",
        ),
        (
            "stackbuild/__init__.py",
            "import stackbuild.image.plan\nimport stackbuild.serve.k8s\n",
            "stackbuild imports both",
        ),
        (
            "stackbuild/image/plan.py",
            "from stackbuild.cli import main\n",
            "stackbuild.image.plan imports stackbuild.cli",
        ),
        (
            "stackbuild/command_exits.py",
            "def f():\n    from stackbuild.cli.image import render\n",
            "stackbuild.command_exits imports stackbuild.cli.image",
        ),
    ],
)
def test_an_import_against_the_layers_is_found(tmp_path, module, text, problem):
    files = {
        f"{p}/__init__.py": ""
        for p in ("geometry", "overlay", "stackbuild", "stackbuild/core", "stackbuild/image", "stackbuild/serve")
    }
    # The CLI as a package: its group imports its command modules, one of them both stages.
    files["stackbuild/cli/__init__.py"] = (
        "from stackbuild.cli.image import render\nfrom stackbuild.cli.serve import pin\n"
    )
    files["stackbuild/cli/image.py"] = "from stackbuild.image import plan\nfrom stackbuild.serve import compose\n"
    files["stackbuild/cli/serve.py"] = "from stackbuild.serve import compose\nfrom stackbuild.cli import image\n"
    root = _tree(tmp_path, files)
    assert layer_violations(import_graph(root)) == []
    _tree(root, {module: text})
    assert any(p.startswith(problem) for p in layer_violations(import_graph(root))), layer_violations(
        import_graph(root)
    )
