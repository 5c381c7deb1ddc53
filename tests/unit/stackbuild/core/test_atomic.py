"""Replacing several files all or none (stackbuild/core/atomic.py)."""

from __future__ import annotations

import os
import stat

import pytest

from stackbuild.core.atomic import ReplaceFailed, replace_files, replace_text, replace_texts


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_every_file_is_written_after_the_check_sees_every_temporary_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("old a\n")
    seen = {}

    def check(temps):
        seen.update({path: tmp.read_text() for path, tmp in temps.items()})
        assert all(tmp.parent == path.parent for path, tmp in temps.items())
        assert a.read_text() == "old a\n" and not b.exists()  # nothing moved yet
        return "checked"

    assert replace_texts({a: "new a\n", b: "new b\n"}, check, mode=0o644) == "checked"
    assert seen == {a: "new a\n", b: "new b\n"}
    assert (a.read_text(), b.read_text()) == ("new a\n", "new b\n")
    assert {stat.S_IMODE(p.stat().st_mode) for p in (a, b)} == {0o644}
    assert leftovers(tmp_path) == []


def test_a_failed_check_writes_none(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("old a\n")

    def check(temps):
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        replace_texts({a: "new a\n", b: "new b\n"}, check)
    assert a.read_text() == "old a\n" and not b.exists()
    assert leftovers(tmp_path) == []


def test_a_failed_move_puts_back_the_files_moved_before_it(tmp_path):
    a, b, c = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    a.write_text("old a\n")
    c.mkdir()  # a directory: the move over it fails

    with pytest.raises(ReplaceFailed) as raised:
        replace_texts({a: "new a\n", b: "new b\n", c: "new c\n"})
    assert (raised.value.path, raised.value.stage) == (c, "move")
    assert a.read_text() == "old a\n" and not b.exists() and c.is_dir()
    assert leftovers(tmp_path) == []


def test_a_directory_that_cannot_hold_a_temporary_file_is_named(tmp_path):
    missing = tmp_path / "missing" / "a.yaml"
    with pytest.raises(ReplaceFailed) as raised:
        replace_texts({missing: "x"})
    assert (raised.value.path, raised.value.stage, raised.value.strerror) == (missing, "create", os.strerror(2))


def test_one_file_raises_what_the_write_raised(tmp_path):
    """replace_file / replace_text: the OSError itself, not a ReplaceFailed."""
    directory = tmp_path / "d"
    directory.mkdir()
    with pytest.raises(IsADirectoryError):
        replace_text(directory, "x")
    with pytest.raises(RuntimeError):
        replace_files({tmp_path / "x": lambda tmp: (_ for _ in ()).throw(RuntimeError("no"))})
    assert leftovers(tmp_path) == [] and not (tmp_path / "x").exists()
