"""Unified diffs: parsed, then applied strictly in memory.

Strict: each hunk at its stated line, every context and removed line
verified, no offset, no fuzz. Only changes to existing files (no creation,
deletion or rename).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import OverlayError


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple  # (tag, bytes-with-eol) with tag in " ", "-", "+"


@dataclass(frozen=True)
class FilePatch:
    path: str  # relative to site-packages, e.g. "vllm/v1/x.py"
    hunks: tuple  # of Hunk, in file order


def _strip_prefix(name: str, patch_name: str) -> str:
    name = name.split("\t", 1)[0].strip()
    if name == "/dev/null":
        raise OverlayError(f"{patch_name}: creating or deleting files is not supported")
    if not (name.startswith("a/") or name.startswith("b/")):
        raise OverlayError(f"{patch_name}: path {name!r} lacks an a/ or b/ prefix")
    rel = name[2:]
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts or not rel:
        raise OverlayError(f"{patch_name}: unsafe path {name!r}")
    return rel


def parse_patch(data: bytes, patch_name: str) -> list:
    """Parse a unified diff with a free-form header before the first file."""
    lines = data.splitlines(keepends=True)
    files = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ "):
            old = _strip_prefix(line[4:].decode("utf-8").rstrip("\r\n"), patch_name)
            new = _strip_prefix(lines[i + 1][4:].decode("utf-8").rstrip("\r\n"), patch_name)
            if old != new:
                raise OverlayError(f"{patch_name}: renames are not supported ({old})")
            i += 2
            hunks = []
            while i < n and lines[i].startswith(b"@@ "):
                header = lines[i].decode("utf-8")
                try:
                    ranges = header.split("@@")[1].split()
                    old_start, old_len = _range(ranges[0][1:])
                    new_start, new_len = _range(ranges[1][1:])
                except (IndexError, ValueError):
                    raise OverlayError(f"{patch_name}: {old}: malformed hunk header {header.strip()!r}") from None
                i += 1
                body = []
                seen_old = seen_new = 0
                while i < n and (seen_old < old_len or seen_new < new_len):
                    hl = lines[i]
                    tag = hl[:1]
                    if tag == b"\\":
                        i += 1
                        continue
                    if tag not in (b" ", b"-", b"+"):
                        if hl in (b"\n", b"\r\n"):  # context line of an empty line
                            tag, hl = b" ", b" " + hl
                        else:
                            break
                    body.append((tag.decode(), hl[1:]))
                    if tag in (b" ", b"-"):
                        seen_old += 1
                    if tag in (b" ", b"+"):
                        seen_new += 1
                    i += 1
                # "\ No newline at end of file" strips the previous line's EOL.
                if i < n and lines[i].startswith(b"\\"):
                    tag, text = body[-1]
                    body[-1] = (tag, text.rstrip(b"\r\n"))
                    i += 1
                if seen_old != old_len or seen_new != new_len:
                    raise OverlayError(f"{patch_name}: {old}: hunk at line {old_start} is truncated")
                hunks.append(Hunk(old_start, old_len, new_start, new_len, tuple(body)))
            if not hunks:
                raise OverlayError(f"{patch_name}: {old}: no hunks")
            files.append(FilePatch(old, tuple(hunks)))
            continue
        i += 1
    if not files:
        raise OverlayError(f"{patch_name}: contains no unified diff")
    return files


def _range(text: str):
    if "," in text:
        start, length = text.split(",", 1)
        return int(start), int(length)
    return int(text), 1


def apply_file_patch(original: bytes, fp: FilePatch, patch_name: str) -> bytes:
    """Apply the hunks at their exact positions; any mismatch raises."""
    src = original.splitlines(keepends=True)
    out = []
    cursor = 0  # index into src of the next line not yet copied
    delta = 0
    for hunk in fp.hunks:
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if hunk.new_start - 1 + (0 if hunk.new_len else 1) != start + delta:
            raise OverlayError(f"{fp.path}: {patch_name}: hunk at line {hunk.old_start} has inconsistent line numbers")
        if start < cursor:
            raise OverlayError(f"{fp.path}: {patch_name}: hunks overlap at line {hunk.old_start}")
        out.extend(src[cursor:start])
        pos = start
        for tag, text in hunk.lines:
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos] != text:
                    found = src[pos] if pos < len(src) else b"<end of file>"
                    raise OverlayError(
                        f"{fp.path}: {patch_name}: line {pos + 1} does not match "
                        f"the patch (expected {text.rstrip()[:60]!r}, found "
                        f"{found.rstrip()[:60]!r})"
                    )
                pos += 1
                if tag == " ":
                    out.append(text)
            else:
                out.append(text)
        cursor = pos
        delta += hunk.new_len - hunk.old_len
    out.extend(src[cursor:])
    return b"".join(out)


def touched_by(patches) -> dict:
    """``{relpath: [patch names]}`` for ``[(name, [FilePatch])]``, in series order."""
    touched = {}
    for name, file_patches in patches:
        for fp in file_patches:
            touched.setdefault(fp.path, []).append(name)
    return touched


def patch_in_memory(originals: dict, patches: list) -> tuple:
    """Apply the series to ``{relpath: bytes}``; returns (contents, touched_by)."""
    contents = dict(originals)
    for name, file_patches in patches:
        for fp in file_patches:
            if fp.path not in contents:
                raise OverlayError(f"{fp.path}: {name} touches a file not in the lock")
            contents[fp.path] = apply_file_patch(contents[fp.path], fp, name)
    return contents, touched_by(patches)
