"""A mounted checkpoint as the pre-flight sees it without loading a weight (stdlib only).

``snapshot_of``: which Hub commit a directory is (a Hugging Face cache names it in the
path, ``models--ORG--NAME/snapshots/<commit>/``, and its ``refs/`` files name the
branches at that commit; a plain directory names none). ``scan``: every weights file
the checkpoint consists of, their headers read and checked against the index and the
files' sizes (safetensors_header.py); a missing, truncated or foreign shard is refused
(CheckpointUnusable) with its name.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from geometry.image_contract import Role
from geometry.preflight.safetensors_header import ShardHeader, ShardUnusable, read_header

INDEX = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
CACHE_REPO_PREFIX = "models--"


class CheckpointUnusable(Exception):
    """A checkpoint's weights files are missing, truncated or inconsistent (one line naming the file)."""


@dataclass(frozen=True)
class Snapshot:
    """Where a mounted directory comes from: a Hub commit (None: a plain directory)."""

    directory: str  # the directory as resolved (symlinks followed)
    commit: Optional[str] = None
    repo: Optional[str] = None  # "ORG/NAME", from the cache's models--ORG--NAME
    refs: tuple[str, ...] = ()  # the cache's refs naming this commit ("main", ...)

    def describe(self) -> str:
        if self.commit is None:
            return f"{self.directory} is a plain directory (no Hub commit in its path)"
        refs = f", refs/{', refs/'.join(self.refs)}" if self.refs else ""
        return f"snapshot {self.commit[:12]} of {self.repo}{refs}"


def snapshot_of(directory: str) -> Snapshot:
    """The Hub commit of ``directory``, when it is (or links to) a cache's ``snapshots/<commit>``."""
    real = os.path.realpath(directory)
    snapshots, commit = os.path.split(real)
    repo_dir, name = os.path.split(snapshots)
    repo_name = os.path.basename(repo_dir)
    if name != "snapshots" or not COMMIT_RE.match(commit) or not repo_name.startswith(CACHE_REPO_PREFIX):
        return Snapshot(directory=real)
    refs = []
    refs_dir = os.path.join(repo_dir, "refs")
    try:
        for ref in sorted(os.listdir(refs_dir)):
            try:
                with open(os.path.join(refs_dir, ref), encoding="utf-8") as fh:
                    if fh.read().strip() == commit:
                        refs.append(ref)
            except (OSError, UnicodeDecodeError):
                continue  # a ref that is a directory (refs/pr/...) or unreadable names nothing here
    except OSError:
        pass
    return Snapshot(
        directory=real, commit=commit, repo=repo_name[len(CACHE_REPO_PREFIX) :].replace("--", "/", 1), refs=tuple(refs)
    )


@dataclass(frozen=True)
class Checkpoint:
    role: Role
    directory: str  # where it was read (on the host: under --models-dir)
    snapshot: Snapshot
    layout: str  # INDEX or SINGLE_FILE: how its weights are listed
    shards: tuple[ShardHeader, ...]

    @property
    def tensor_bytes(self) -> int:
        return sum(s.tensor_bytes for s in self.shards)

    def dtypes(self) -> Mapping[str, str]:
        """dtype -> the first tensor (by shard, then name) that has it."""
        out: dict[str, str] = {}
        for shard in self.shards:
            for name in sorted(shard.tensors):
                out.setdefault(shard.tensors[name].dtype, name)
        return out

    def tensor_names(self) -> frozenset[str]:
        return frozenset(n for s in self.shards for n in s.tensors)


def _shard_name(name, index_path: str) -> str:
    if not isinstance(name, str) or not name:
        raise CheckpointUnusable(f"{index_path}: weight_map names a shard {name!r}, not a file name")
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm == ".." or norm.startswith(".." + os.sep):
        raise CheckpointUnusable(
            f"{index_path}: weight_map names the shard {name!r}, which is outside the checkpoint directory"
        )
    return norm


def _read_index(path: str) -> Mapping[str, str]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except IsADirectoryError:
        raise CheckpointUnusable(f"{path} is a directory, not a file") from None
    except OSError as exc:
        raise CheckpointUnusable(f"{path} cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
        raise CheckpointUnusable(f"{path} is not JSON ({why})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointUnusable(f"{path}: weight_map: missing or not a non-empty object of tensor -> shard")
    return weight_map


def scan(role: Role, directory: str) -> Checkpoint:
    """Every weights file of the checkpoint in ``directory``, its header read and checked (CheckpointUnusable)."""
    snapshot = snapshot_of(directory)
    index_path = os.path.join(directory, INDEX)
    try:
        if os.path.lexists(index_path):
            weight_map = _read_index(index_path)
            by_shard: dict[str, list[str]] = {}
            for tensor, name in weight_map.items():
                by_shard.setdefault(_shard_name(name, index_path), []).append(tensor)
            shards = []
            for name in sorted(by_shard):
                path = os.path.join(directory, name)
                if not os.path.lexists(path):
                    raise CheckpointUnusable(
                        f"{path} is missing ({INDEX} places {len(by_shard[name]):,} tensors "
                        "there): is the download complete?"
                    )
                header = read_header(path, path)
                missing = [t for t in by_shard[name] if t not in header.tensors]
                if missing:
                    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
                    raise CheckpointUnusable(
                        f"{header.path}: has no tensor {missing[0]!r}{more}, which {INDEX} places there"
                    )
                shards.append(header)
            return Checkpoint(role, directory, snapshot, INDEX, tuple(shards))
        single = os.path.join(directory, SINGLE_FILE)
        if not os.path.lexists(single):
            raise CheckpointUnusable(
                f"the {role} checkpoint {directory} has neither {INDEX} nor {SINGLE_FILE}: "
                "no safetensors weights (is the download complete?)"
            )
        return Checkpoint(role, directory, snapshot, SINGLE_FILE, (read_header(single, single),))
    except ShardUnusable as exc:
        raise CheckpointUnusable(str(exc)) from None
