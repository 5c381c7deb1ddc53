"""Modules stay small enough to read at once: no product module (what ships in the image and what builds
it, and the maintainer's tools) over PRODUCT_LINES lines, no test module over TEST_LINES."""

from __future__ import annotations

from pathlib import Path

from support.repo import REPO

PRODUCT_LINES = 400
TEST_LINES = 600
PRODUCT = ("geometry", "stackbuild", "overlay", "tools")


def _over(paths: list[Path], limit: int, root: Path = REPO) -> list[str]:
    """``path: N lines`` (relative to ``root``) for each of ``paths`` longer than ``limit`` lines."""
    sizes = {path: len(path.read_text().splitlines()) for path in paths}
    return sorted(f"{path.relative_to(root)}: {n} lines" for path, n in sizes.items() if n > limit)


def test_no_product_module_is_over_the_limit():
    paths = [REPO / "build.py", *(p for top in PRODUCT for p in (REPO / top).rglob("*.py"))]
    assert len(paths) > 100  # the packages were found
    assert _over(paths, PRODUCT_LINES) == []


def test_no_test_module_is_over_the_limit():
    paths = list((REPO / "tests").rglob("test_*.py"))
    assert len(paths) > 100
    assert _over(paths, TEST_LINES) == []


def test_the_count_sees_a_long_module(tmp_path):
    long, short = tmp_path / "long.py", tmp_path / "short.py"
    long.write_text("x = 1\n" * (PRODUCT_LINES + 1))
    short.write_text("x = 1\n" * PRODUCT_LINES)
    assert _over([long, short], PRODUCT_LINES, root=tmp_path) == [f"long.py: {PRODUCT_LINES + 1} lines"]
