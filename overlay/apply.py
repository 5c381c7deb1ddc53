#!/usr/bin/env python3
"""Apply the overlay's patch series to an installed vLLM: all patches or none.

Standard library only; runs with any Python >= 3.9 (the base image's Python
inside the image build, or a host Python against a copied tree in tests).

What it does, in order:

1. Locates the vLLM package without importing it (``--vllm-dir`` / the
   ``--site-packages`` argument, else ``importlib.util.find_spec``), and reads
   the installed version from the distribution's ``METADATA``.
2. Refuses (one line per error, naming the file or version; exit 1) unless
   the version is the series' target and every file the series touches has
   the pristine sha256 recorded in ``lock.json`` (or, as a whole, the patched
   one: then the overlay is reported as already applied).
3. Applies every patch in memory, strictly: each hunk at its stated line,
   every context and removed line verified, no offset, no fuzz. Checks each
   result against the patched sha256 in the lock.
4. Compiles every new source in memory (a patch that leaves a syntax error is
   refused), writes everything to temporary files next to their targets, then
   moves them into place with ``os.replace``, re-reads and re-hashes the
   result. Any failure restores every touched path to its previous bytes.

   Bytecode: none is written for the changed modules unless
   ``--write-bytecode`` asks for it (then hash-based ``.pyc``: deterministic),
   so an image layer holds the changed sources only. A cached ``.pyc`` of a
   changed module left by the base is kept only where Python is certain to
   reject it for the new source (checked-hash: the source hash differs;
   timestamp-based: the source size differs) and recompile; one it could load
   is replaced by fresh bytecode, or removed when it belongs to another
   interpreter. Removing is the last resort: a deleted file becomes a
   whiteout in the layer, whose time is the build's, not the inputs'.
5. Optionally imports every patched module in a subprocess
   (``--smoke-import``; a failure rolls the tree back) and writes a manifest
   (``--manifest``).

Exit status: 0 applied / already applied / check passed; 1 refused or
failed (the tree is unchanged); 2 usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import py_compile
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SERIES = HERE / "series" / "vllm-0.33.0"
SERIES_FILE = "series"
LOCK_FILE = "lock.json"
# The manifest's reader is geometry/image_contract.py (OverlayManifest): this step runs before
# geometry/ is in the image, so build_manifest writes that shape here and a test reads it back.
MANIFEST_SCHEMA = "glm53-overlay-manifest/1"


class OverlayError(Exception):
    """A refusal or failure; ``str()`` is one line per problem."""

    def __init__(self, errors):
        if isinstance(errors, str):
            errors = [errors]
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


# --------------------------------------------------------------------------
# Series
# --------------------------------------------------------------------------


def read_series(series_dir) -> list:
    """Patch names in application order (``#`` comments and blanks skipped)."""
    path = Path(series_dir) / SERIES_FILE
    names = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            if "/" in line or line.startswith("."):
                raise OverlayError(f"{path}: invalid patch name {line!r}")
            names.append(line)
    if not names:
        raise OverlayError(f"{path}: the series lists no patches")
    return names


def series_sha256(series_dir) -> str:
    """One digest for the whole series: series file, lock and every patch.

    Stable across checkouts (content only, in series order); the build
    driver records it in an image label.
    """
    series_dir = Path(series_dir)
    digest = hashlib.sha256()
    members = [SERIES_FILE, LOCK_FILE] + read_series(series_dir)
    for name in members:
        digest.update(name.encode("utf-8") + b"\0")
        digest.update(sha256_file(series_dir / name).encode("ascii") + b"\n")
    return digest.hexdigest()


def read_lock(series_dir) -> dict:
    path = Path(series_dir) / LOCK_FILE
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OverlayError(f"{path}: missing; run overlay/refresh.py") from None
    except ValueError as exc:
        raise OverlayError(f"{path}: not valid JSON ({exc})") from None
    for key in ("package", "version", "files", "patches"):
        if key not in lock:
            raise OverlayError(f"{path}: no {key!r} entry")
    return lock


# --------------------------------------------------------------------------
# Unified diffs: parsing and strict application
# --------------------------------------------------------------------------


class Hunk:
    def __init__(self, old_start, old_len, new_start, new_len, lines):
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        # (tag, bytes-with-eol) with tag in " ", "-", "+"
        self.lines = lines


class FilePatch:
    def __init__(self, path, hunks):
        self.path = path  # relative to site-packages, e.g. "vllm/v1/x.py"
        self.hunks = hunks


def _strip_prefix(name: str, patch_name: str) -> str:
    name = name.split("\t", 1)[0].strip()
    if name == "/dev/null":
        raise OverlayError(
            f"{patch_name}: creating or deleting files is not supported"
        )
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
            new = _strip_prefix(
                lines[i + 1][4:].decode("utf-8").rstrip("\r\n"), patch_name
            )
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
                    raise OverlayError(
                        f"{patch_name}: {old}: malformed hunk header {header.strip()!r}"
                    ) from None
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
                    raise OverlayError(
                        f"{patch_name}: {old}: hunk at line {old_start} is truncated"
                    )
                hunks.append(Hunk(old_start, old_len, new_start, new_len, body))
            if not hunks:
                raise OverlayError(f"{patch_name}: {old}: no hunks")
            files.append(FilePatch(old, hunks))
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
            raise OverlayError(
                f"{fp.path}: {patch_name}: hunk at line {hunk.old_start} has "
                "inconsistent line numbers"
            )
        if start < cursor:
            raise OverlayError(
                f"{fp.path}: {patch_name}: hunks overlap at line {hunk.old_start}"
            )
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


def load_patches(series_dir, lock) -> list:
    """[(name, [FilePatch])] in series order, each patch's sha256 checked."""
    series_dir = Path(series_dir)
    result = []
    errors = []
    for name in read_series(series_dir):
        path = series_dir / name
        if not path.is_file():
            errors.append(f"{path}: listed in the series but missing")
            continue
        data = path.read_bytes()
        want = lock["patches"].get(name)
        if want is None:
            errors.append(f"{path}: not recorded in {LOCK_FILE}; run overlay/refresh.py")
            continue
        if sha256_bytes(data) != want:
            errors.append(
                f"{path}: sha256 {sha256_bytes(data)} differs from {LOCK_FILE} "
                f"({want}); run overlay/refresh.py"
            )
            continue
        result.append((name, parse_patch(data, name)))
    extra = set(lock["patches"]) - set(read_series(series_dir))
    if extra:
        errors.append(f"{LOCK_FILE}: records patches not in the series: {sorted(extra)}")
    if errors:
        raise OverlayError(errors)
    return result


def patch_in_memory(originals: dict, patches: list) -> tuple:
    """Apply the series to ``{relpath: bytes}``; returns (contents, touched_by)."""
    contents = dict(originals)
    touched_by = {}
    for name, file_patches in patches:
        for fp in file_patches:
            if fp.path not in contents:
                raise OverlayError(f"{fp.path}: {name} touches a file not in the lock")
            contents[fp.path] = apply_file_patch(contents[fp.path], fp, name)
            touched_by.setdefault(fp.path, []).append(name)
    return contents, touched_by


# --------------------------------------------------------------------------
# Locating vLLM
# --------------------------------------------------------------------------


def locate_vllm(package: str, vllm_dir=None, site_packages=None) -> Path:
    """The package directory, found without importing the package."""
    if vllm_dir:
        pkg = Path(vllm_dir)
    elif site_packages:
        pkg = Path(site_packages) / package
    else:
        spec = importlib.util.find_spec(package)  # top level: no import runs
        if spec is None or not spec.submodule_search_locations:
            raise OverlayError(
                f"{package}: not found on this Python's path "
                f"({sys.executable}); pass --site-packages or --vllm-dir"
            )
        pkg = Path(list(spec.submodule_search_locations)[0])
    pkg = pkg.resolve()
    if not (pkg / "__init__.py").is_file():
        raise OverlayError(f"{pkg}: not a {package} package directory (no __init__.py)")
    return pkg


def installed_version(pkg_dir: Path, package: str) -> tuple:
    """(version, METADATA path) from the dist-info next to the package."""
    site = pkg_dir.parent
    metas = []
    for entry in sorted(site.glob("*.dist-info")):
        meta = entry / "METADATA"
        if not meta.is_file():
            continue
        name = version = None
        with meta.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
        if name and _normalize(name) == _normalize(package):
            metas.append((version, meta))
    if not metas:
        raise OverlayError(
            f"{site}: no {package} .dist-info/METADATA next to {pkg_dir}; "
            "cannot verify the installed version"
        )
    if len(metas) > 1:
        raise OverlayError(
            f"{site}: several {package} distributions installed: "
            + ", ".join(str(m.parent.name) for _, m in metas)
        )
    return metas[0]


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# --------------------------------------------------------------------------
# Bytecode
# --------------------------------------------------------------------------


def stale_bytecode(target: Path) -> list:
    """Every cached bytecode file of ``target`` (all interpreters, legacy too)."""
    stem = target.stem
    found = []
    cache = target.parent / "__pycache__"
    if cache.is_dir():
        for entry in cache.iterdir():
            if entry.name.startswith(stem + ".") and entry.suffix == ".pyc":
                rest = entry.name[len(stem) + 1 :]
                if rest.count(".") >= 1:  # <tag>[.opt-N].pyc
                    found.append(entry)
    for legacy in (target.with_suffix(".pyc"),):
        if legacy.exists():
            found.append(legacy)
    return sorted(found)


def check_compiles(data: bytes, final_source: Path) -> None:
    """Refuse a patched source that Python cannot compile (nothing is written)."""
    try:
        compile(data, str(final_source), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        msg = getattr(exc, "msg", None) or str(exc)
        raise OverlayError(f"{final_source}: does not compile after patching: {msg}{line}") from None


def python_rejects(pyc: Path, new_source: bytes) -> str | None:
    """Why every Python rejects cached bytecode ``pyc`` for ``new_source`` (and
    recompiles), or None if one might load it instead of the new source."""
    header = pyc.read_bytes()[:16]
    if len(header) < 16:
        return "truncated header"
    flags = int.from_bytes(header[4:8], "little")
    if flags & ~0b11:
        return "invalid flags"
    if flags & 0b1:
        if not flags & 0b10:
            return None  # unchecked hash: loaded without looking at the source
        if header[:4] == importlib.util.MAGIC_NUMBER:
            if header[8:16] == importlib.util.source_hash(new_source):
                return None
            return "checked hash of a different source"
        # Another interpreter's key: the hash is of the old source, which differs.
        return "checked hash of the old source"
    if int.from_bytes(header[12:16], "little") != len(new_source) & 0xFFFFFFFF:
        return "timestamp-based, recorded source size differs"
    return None


def compile_to(source_tmp: Path, final_source: Path, pyc_tmp: Path) -> None:
    py_compile.compile(
        str(source_tmp),
        cfile=str(pyc_tmp),
        dfile=str(final_source),
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
    )


# --------------------------------------------------------------------------
# Transaction
# --------------------------------------------------------------------------


class Transaction:
    """Stage new files next to their targets, commit with os.replace, and
    restore every touched path's previous bytes on failure."""

    def __init__(self):
        self.staged = []  # (tmp, final)
        self.deletes = []  # paths to remove at commit
        self.saved = {}  # path -> (bytes or None, mode or None)
        self.created_dirs = []  # removed again on rollback

    def makedir(self, path: Path):
        if not path.exists():
            path.mkdir()
            self.created_dirs.append(path)

    def _save(self, path: Path):
        if path in self.saved:
            return
        if path.exists():
            self.saved[path] = (path.read_bytes(), path.stat().st_mode)
        else:
            self.saved[path] = (None, None)

    def stage(self, final: Path, data: bytes = None, tmp: Path = None, mode=None):
        self._save(final)
        if tmp is None:
            fd, name = tempfile.mkstemp(
                prefix=f".{final.name}.", suffix=".overlay-tmp", dir=str(final.parent)
            )
            tmp = Path(name)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        self.staged.append((tmp, final))
        return tmp

    def delete(self, path: Path):
        self._save(path)
        self.deletes.append(path)

    def discard(self):
        for tmp, _ in self.staged:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
        self.staged = []

    def commit(self):
        for tmp, final in self.staged:
            os.replace(tmp, final)
        for path in self.deletes:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.staged = []

    def rollback(self) -> list:
        """Restore every saved path; returns paths that could not be restored."""
        self.discard()
        failed = []
        for path, (data, mode) in self.saved.items():
            try:
                if data is None:
                    if path.exists():
                        path.unlink()
                    continue
                if path.exists() and path.read_bytes() == data:
                    continue
                fd, name = tempfile.mkstemp(
                    prefix=f".{path.name}.", suffix=".overlay-restore", dir=str(path.parent)
                )
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(name, mode & 0o7777)
                os.replace(name, path)
            except OSError:
                failed.append(str(path))
        for path in reversed(self.created_dirs):
            try:
                path.rmdir()
            except OSError:
                failed.append(str(path))
        return failed


# --------------------------------------------------------------------------
# Main operations
# --------------------------------------------------------------------------


def inspect_tree(series_dir, vllm_dir=None, site_packages=None) -> dict:
    """Everything short of writing: version, hashes, in-memory application."""
    series_dir = Path(series_dir)
    lock = read_lock(series_dir)
    package = lock["package"]
    pkg = locate_vllm(package, vllm_dir, site_packages)
    site = pkg.parent
    version, meta = installed_version(pkg, package)
    if version != lock["version"]:
        raise OverlayError(
            f"{meta}: installed {package} version is {version}, the series "
            f"targets {lock['version']}"
        )
    patches = load_patches(series_dir, lock)

    originals = {}
    states = {}
    errors = []
    for rel, want in sorted(lock["files"].items()):
        path = site / rel
        if not path.is_file():
            errors.append(f"{path}: missing (the series patches it)")
            continue
        data = path.read_bytes()
        got = sha256_bytes(data)
        if got == want["pristine_sha256"]:
            states[rel] = "pristine"
        elif got == want["patched_sha256"]:
            states[rel] = "patched"
        else:
            errors.append(
                f"{path}: sha256 {got} matches neither the pristine "
                f"({want['pristine_sha256']}) nor the patched "
                f"({want['patched_sha256']}) {package} {lock['version']} file"
            )
        originals[rel] = data
    if errors:
        raise OverlayError(errors)
    kinds = set(states.values())
    common = {"lock": lock, "site": site, "pkg": pkg, "version": version,
              "patches": patches, "originals": originals}
    if kinds == {"patched"}:
        return {**common, "state": "applied", "touched_by": _touched_by(patches)}
    if kinds != {"pristine"}:
        half = sorted(rel for rel, s in states.items() if s == "patched")
        raise OverlayError(
            [f"{site / rel}: already patched while other files are pristine" for rel in half]
        )

    contents, touched_by = patch_in_memory(originals, patches)
    for rel, data in contents.items():
        want = lock["files"][rel]["patched_sha256"]
        if sha256_bytes(data) != want:
            errors.append(
                f"{site / rel}: patched result has sha256 {sha256_bytes(data)}, "
                f"expected {want}"
            )
    untouched = sorted(set(lock["files"]) - set(touched_by))
    for rel in untouched:
        errors.append(f"{site / rel}: recorded in the lock but no patch touches it")
    if errors:
        raise OverlayError(errors)
    return {**common, "state": "pristine", "contents": contents, "touched_by": touched_by}


def _touched_by(patches) -> dict:
    touched = {}
    for name, file_patches in patches:
        for fp in file_patches:
            touched.setdefault(fp.path, []).append(name)
    return touched


def module_name(rel: str) -> str:
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def smoke_import(site: Path, rels) -> None:
    modules = [module_name(rel) for rel in sorted(rels) if rel.endswith(".py")]
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        f"for m in {modules!r}:\n"
        "    mod = importlib.import_module(m)\n"
        f"    assert mod.__file__.startswith({str(site)!r}), (m, mod.__file__)\n"
    )
    # No bytecode for the rest of vLLM (it would leave files the rollback does not
    # own and bloat the layer), and a neutral working directory: run from inside
    # the package, its submodules would also import as top-level modules.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OverlayError(f"smoke import of {', '.join(modules)} failed: {tail}")


def build_manifest(info: dict, series_dir: Path, bytecode: list, stale_report=None) -> dict:
    lock = info["lock"]
    return {
        "schema": MANIFEST_SCHEMA,
        "package": lock["package"],
        "version": info["version"],
        "package_dir": str(info["pkg"]),
        "series": str(series_dir),
        "series_sha256": series_sha256(series_dir),
        "patches": [
            {"name": name, "sha256": lock["patches"][name]} for name, _ in info["patches"]
        ],
        "files": [
            {
                "file": rel,
                "sha256_before": lock["files"][rel]["pristine_sha256"],
                "sha256_after": lock["files"][rel]["patched_sha256"],
                "patches": info["touched_by"].get(rel, []),
            }
            for rel in sorted(lock["files"])
        ],
        "bytecode": sorted(bytecode),
        "stale_bytecode": stale_report or {"kept": [], "removed": []},
        "python": sys.version.split()[0],
    }


def apply_series(series_dir, vllm_dir=None, site_packages=None, manifest=None,
                 check=False, smoke=False, write_bytecode=False) -> dict:
    series_dir = Path(series_dir).resolve()
    info = inspect_tree(series_dir, vllm_dir, site_packages)
    site = info["site"]
    result = {
        "ok": True,
        "version": info["version"],
        "package_dir": str(info["pkg"]),
        "series_sha256": series_sha256(series_dir),
        "files": sorted(info["lock"]["files"]),
    }
    if check:
        result["action"] = "check"
        result["state"] = info["state"]
        if smoke and info["state"] == "applied":
            smoke_import(site, info["lock"]["files"])
        return result
    if info["state"] == "applied":
        result["action"] = "already-applied"
        if smoke:
            smoke_import(site, info["lock"]["files"])
        if manifest:
            _write_json(Path(manifest), build_manifest(info, series_dir, []))
            result["manifest"] = str(manifest)
        return result

    txn = Transaction()
    bytecode, stale_report = [], {"kept": [], "removed": []}
    try:
        for rel, data in sorted(info["contents"].items()):
            final = site / rel
            mode = final.stat().st_mode
            tmp = txn.stage(final, data, mode=mode)
            pyc = Path(importlib.util.cache_from_source(str(final)))
            write = write_bytecode
            for stale in stale_bytecode(final):
                if write_bytecode and stale == pyc:
                    continue  # replaced below
                reason = python_rejects(stale, data)
                if reason:
                    stale_report["kept"].append({"file": str(stale.relative_to(site)), "rejected": reason})
                elif stale == pyc:
                    write = True  # replaced in place below: no whiteout
                else:
                    txn.delete(stale)
                    stale_report["removed"].append(str(stale.relative_to(site)))
            if not write:
                check_compiles(data, final)  # writing bytecode below checks it too
                continue
            txn.makedir(pyc.parent)
            fd, pyc_tmp = tempfile.mkstemp(
                prefix=f".{pyc.name}.", suffix=".overlay-tmp", dir=str(pyc.parent)
            )
            os.close(fd)
            try:
                compile_to(tmp, final, Path(pyc_tmp))
            except py_compile.PyCompileError as exc:
                os.unlink(pyc_tmp)
                raise OverlayError(f"{final}: does not compile after patching: {exc.msg}")
            txn.stage(pyc, tmp=Path(pyc_tmp), mode=0o644)
            bytecode.append(str(pyc.relative_to(site)))
        if manifest:
            manifest = Path(manifest)
            for parent in reversed(manifest.parent.parents):
                if parent != parent.parent:
                    txn.makedir(parent)
            txn.makedir(manifest.parent)
            txn.stage(manifest, _json_bytes(build_manifest(info, series_dir, bytecode, stale_report)))
        txn.commit()
        errors = []
        for rel in sorted(info["contents"]):
            got = sha256_file(site / rel)
            want = info["lock"]["files"][rel]["patched_sha256"]
            if got != want:
                errors.append(f"{site / rel}: sha256 after writing is {got}, expected {want}")
        if errors:
            raise OverlayError(errors)
        if smoke:
            smoke_import(site, info["contents"])
    except BaseException as exc:
        failed = txn.rollback()
        if failed:
            extra = [f"{p}: could not be restored" for p in failed]
            if isinstance(exc, OverlayError):
                raise OverlayError(exc.errors + extra) from None
            raise OverlayError([f"{type(exc).__name__}: {exc}"] + extra) from None
        if isinstance(exc, OverlayError):
            raise
        if isinstance(exc, OSError):
            raise OverlayError(f"{getattr(exc, 'filename', '') or 'write'}: {exc}") from None
        raise
    result["action"] = "applied"
    result["bytecode"] = bytecode
    result["stale_bytecode"] = stale_report
    if manifest:
        result["manifest"] = str(manifest)
    return result


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    with os.fdopen(fd, "wb") as fh:
        fh.write(_json_bytes(obj))
    os.chmod(name, 0o644)
    os.replace(name, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply the GLM-5.3 overlay patch series to vLLM (all or nothing)."
    )
    parser.add_argument("--series", default=str(DEFAULT_SERIES), help="series directory")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--site-packages", help="directory holding vllm/ and its dist-info")
    where.add_argument("--vllm-dir", help="the vllm package directory itself")
    parser.add_argument("--manifest", help="write the manifest JSON here")
    parser.add_argument("--check", action="store_true", help="verify only, write nothing")
    parser.add_argument("--write-bytecode", action="store_true",
                        help="also write hash-based .pyc for the changed modules")
    parser.add_argument("--smoke-import", action="store_true",
                        help="import every patched module in a subprocess")
    parser.add_argument("--json", action="store_true", help="print a JSON result")
    parser.add_argument("--print-series-sha256", action="store_true",
                        help="print series_sha256 of --series and exit")
    args = parser.parse_args(argv)

    if args.print_series_sha256:
        try:
            print(series_sha256(args.series))
        except (OverlayError, OSError) as exc:
            print(f"overlay: error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        result = apply_series(
            args.series,
            vllm_dir=args.vllm_dir,
            site_packages=args.site_packages,
            manifest=args.manifest,
            check=args.check,
            smoke=args.smoke_import,
            write_bytecode=args.write_bytecode,
        )
    except OverlayError as exc:
        if args.json:
            print(json.dumps({"ok": False, "errors": exc.errors}, indent=2))
        for line in exc.errors:
            print(f"overlay: error: {line}", file=sys.stderr)
        return 1
    except OSError as exc:
        if args.json:
            print(json.dumps({"ok": False, "errors": [str(exc)]}, indent=2))
        print(f"overlay: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        state = result.get("state", result["action"])
        print(
            f"overlay: {result['action']}: vllm {result['version']} at "
            f"{result['package_dir']} ({state}; {len(result['files'])} files; "
            f"series {result['series_sha256'][:16]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
