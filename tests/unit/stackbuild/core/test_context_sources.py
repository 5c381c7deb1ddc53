"""What ships in the image: the modules its entry points import and the data they read, nothing else.

The render copies the import closure of the entry points ``stackbuild.core.context_sources.PAYLOADS``
names. These tests build a context with the render code (no Docker) and check it with an import
scan of their own: every shipped module is an entry point, or imported by a shipped module, or the
package of one. A module only the tests or the maintainers use is left out, and the oracle record's
key hashes the same gate code on the host as in the image.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from recipe_copies import REPO, copy_recipe, pinned

import geometry
from geometry.image_contract import PAYLOAD_DIR
from geometry.oracle import record
from stackbuild.core.context_sources import GATE_PAYLOAD, PATCH_PAYLOAD, PAYLOADS, PREFLIGHT_PAYLOAD, payload_files
from stackbuild.core.recipe import load_recipe
from stackbuild.image.plan import make_plan
from stackbuild.image.render import write_context

INSIDE = PAYLOAD_DIR.lstrip("/")
ENTRY_POINTS = {entry for payload in PAYLOADS for entry in payload.entry_points}
# Trees whose every module is the image's: the host's use of geometry is its public API (below).
SHIPPED_TREES = ("geometry", "overlay")


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("payload")
    return write_context(make_plan(load_recipe(copy_recipe(tmp, pinned)), owner="acme"), tmp / "context")


def _shipped_modules(context: Path) -> dict[str, str]:
    """Each ``.py`` file of the context's payloads (its path under the payload root) -> the payload."""
    out: dict[str, str] = {}
    for payload in {p.directory for p in PAYLOADS}:
        root = context / payload / INSIDE
        for path in root.rglob("*.py"):
            name = path.relative_to(root).as_posix()
            assert name not in out, f"{name} ships in {out[name]} and {payload}"
            out[name] = payload
    return out


def _dotted(name: str) -> str:
    return name[: -len(".py")].removesuffix("/__init__").replace("/", ".")


def _imports(path: Path, dotted: str) -> set[str]:
    """The dotted names the module's import statements (any depth) name, ``from P import n`` as ``P.n`` too."""
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = base.strip(".")
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return names


def test_every_module_in_the_context_is_imported_by_the_image(context):
    shipped = _shipped_modules(context)
    assert ENTRY_POINTS <= set(shipped)
    imported = set()
    for name, payload in shipped.items():
        imported |= _imports(context / payload / INSIDE / name, _dotted(name))
    packages = {name.rsplit(".", i)[0] for name in imported for i in range(1, name.count(".") + 1)}
    reached = imported | packages
    unused = sorted(name for name in shipped if name not in ENTRY_POINTS and _dotted(name) not in reached)
    assert not unused, f"modules no image-side code imports ship in the image: {unused}"


def test_the_context_holds_the_closure_and_the_data_only(context):
    closure = set(geometry.import_closure(REPO, sorted(ENTRY_POINTS)))
    assert set(_shipped_modules(context)) == closure
    data = {f.name for f in payload_files() if not f.name.endswith(".py")}
    assert all(name.startswith(("overlay/series/", "stackbuild/image/")) for name in data), data


def _api_closure() -> set[str]:
    """The modules geometry's public API names, and those they import within the shipped trees (any depth)."""
    closure, todo = set(), [module for module, _ in geometry._API.values()]
    while todo:
        module = todo.pop()
        if module in closure:
            continue
        path = REPO / Path(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if not path.is_file():
            continue
        closure.add(module)
        todo += [name for name in _imports(path, module) if name.split(".")[0] in SHIPPED_TREES]
    return closure


def test_what_the_trees_hold_and_the_image_does_not_is_the_hosts_api():
    """A module of geometry/ or overlay/ that does not ship is one the host imports through
    geometry's public API (an API module, or one an API module imports); a test's helper belongs in
    tests/support/, a maintainer's tool in tools/."""
    shipped = {f.name for f in payload_files()}
    api = _api_closure()
    left = sorted(
        p.relative_to(REPO).as_posix()
        for tree in SHIPPED_TREES
        for p in (REPO / tree).rglob("*.py")
        if "__pycache__" not in p.parts and p.relative_to(REPO).as_posix() not in shipped
    )
    assert [name for name in left if _dotted(name) not in api] == []


def _copy_of_the_trees(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for tree in SHIPPED_TREES:
        shutil.copytree(REPO / tree, repo / tree, ignore=shutil.ignore_patterns("__pycache__"))
    script = repo / "stackbuild" / "image" / "normalise-mtimes.sh"
    script.parent.mkdir(parents=True)
    shutil.copyfile(REPO / "stackbuild" / "image" / "normalise-mtimes.sh", script)
    return repo


def test_a_test_helper_or_a_tool_placed_in_the_tree_is_left_out(tmp_path):
    repo = _copy_of_the_trees(tmp_path)
    before = record.code_digest(str(repo))
    # Modules that import shipped ones but that nothing in the image imports.
    (repo / "geometry" / "oracle" / "engine_core_for_tests.py").write_text("from geometry.oracle import plan\n")
    (repo / "overlay" / "refresh.py").write_text("from overlay.lock import read_series\n")
    (repo / "geometry" / "preflight" / "debug_tool.py").write_text("import geometry.preflight.run\n")
    # A module the gate imports in a function body ships, in the gate payload.
    gate = repo / "geometry" / "gate_main.py"
    gate.write_text(gate.read_text() + "\n\ndef _late():\n    from geometry.verdict import late_helper\n")
    (repo / "geometry" / "verdict" / "late_helper.py").write_text("X = 1\n")
    files = {f.name: f.payload for f in payload_files(repo)}
    assert not {"geometry/oracle/engine_core_for_tests.py", "tools/refresh_lock.py"} & set(files)
    assert "geometry/preflight/debug_tool.py" not in files
    assert files["geometry/verdict/late_helper.py"] == GATE_PAYLOAD
    assert files["overlay/apply.py"] == PATCH_PAYLOAD
    # The record's key: the gate's code changed, the modules it does not import did not count.
    (gate.parent / "verdict" / "late_helper.py").unlink()
    gate.write_text((REPO / "geometry" / "gate_main.py").read_text())
    assert record.code_digest(str(repo)) == before


def test_the_record_key_hashes_the_same_gate_code_on_the_host_and_in_the_image(context, tmp_path):
    """At the gate step the image holds every payload under the payload root (one COPY step before it)."""
    image = tmp_path / "image"
    for payload in (PATCH_PAYLOAD, GATE_PAYLOAD, PREFLIGHT_PAYLOAD):
        shutil.copytree(context / payload / INSIDE, image, dirs_exist_ok=True)
    assert record.code_digest(str(image)) == record.code_digest(str(REPO))
