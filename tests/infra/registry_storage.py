#!/usr/bin/env python3
"""What a new test registry keeps of the last one's storage: the synthetic bases' repositories and
the repositories the latest runs pushed to.

    registry_storage.py STORAGE STATE_DIR ADDRESS   keep those repositories in STORAGE, drop the rest
    registry_storage.py --recorded STATE_DIR        print each repository the base records name

services.sh gives every new registry fresh credentials and storage that holds two kinds of
repository, every other one removed (services.sh then has the registry collect the blobs only those
held):
- the bases': the repositories the base records in STATE_DIR name (base-*.json, written by
  build_base.record: their "repository", on the registry at ADDRESS). A base is the same bytes every
  run: kept, build_base.push finds it in the registry and need not compress its layers again;
- the latest runs': those pushed to within RECENT_HOURS of the newest push, however many registries
  started since (a run of a few tests starts one too). A Docker engine pushing a layer to a new
  repository mounts it from one of the (at most three) repositories it last pushed that layer to,
  youngest first, and compresses and uploads the whole layer again when none of them holds it any
  more: the tests' first push of a base layer in a run would be gigabytes (the CPU serving base:
  2.2 GB) had the last run's repositories gone. They cost little room: the engines compress a base's
  layers into the same blobs every time, so the runs share them.
Prints one line: the base repositories kept, by name, how many recent ones, how many were dropped.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

# Where Distribution's filesystem driver keeps a repository: REPOSITORIES/<name>/_manifests, _layers, _uploads.
REPOSITORIES = Path("docker/registry/v2/repositories")
# A repository pushed to within this many hours of the newest push stays (with the bases').
RECENT_HOURS = 6


def recorded_repositories(state_dir: Path) -> set[str]:
    """The repositories (``127.0.0.1:5000/vllm/vllm-openai``) the base records in state_dir name."""
    repositories = set()
    for path in state_dir.glob("base-*.json"):
        try:
            repositories.add(str(json.loads(path.read_text())["repository"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record this run will write again
    return repositories


def base_repositories(state_dir: Path, address: str) -> set[str]:
    """The names (``vllm/vllm-openai``) of the repositories the base records put on the registry at address."""
    names = set()
    for repository in recorded_repositories(state_dir):
        host, _, name = repository.partition("/")
        if host == address and name:
            names.add(name)
    return names


def repository_names(storage: Path) -> list[str]:
    """Every repository of storage, by name (``e2e-0123456789/cpu-hybrid``), sorted."""
    root = storage / REPOSITORIES
    if not root.is_dir():
        return []
    return sorted(path.parent.relative_to(root).as_posix() for path in root.rglob("_manifests"))


def last_pushed(storage: Path, name: str) -> float:
    """When repository ``name`` was last pushed to: the newest time of its files (a push writes its links).
    Files only: the registry's garbage collection deletes links, which dates the directories holding them."""
    files = (path for path in (storage / REPOSITORIES / name).rglob("*") if path.is_file())
    return max((path.stat().st_mtime for path in files), default=0.0)


def recent_repositories(storage: Path, names: list[str], hours: float = RECENT_HOURS) -> set[str]:
    """Those of names pushed to within ``hours`` of the newest push among them."""
    pushed = {name: last_pushed(storage, name) for name in names}
    newest = max(pushed.values(), default=0.0)
    return {name for name, when in pushed.items() if when >= newest - hours * 3600}


def keep_only(storage: Path, keep: set[str]) -> tuple[list[str], list[str]]:
    """Remove every repository of storage not named in keep: (kept, dropped), by name."""
    root = storage / REPOSITORIES
    names = repository_names(storage)
    kept = [name for name in names if name in keep]
    dropped = [name for name in names if name not in keep]
    for name in dropped:
        shutil.rmtree(root / name)
        # The namespaces it leaves empty (e2e-<id>/).
        namespace = (root / name).parent
        while namespace != root and not any(namespace.iterdir()):
            namespace.rmdir()
            namespace = namespace.parent
    return kept, dropped


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--recorded":
        print("\n".join(sorted(recorded_repositories(Path(argv[1])))))
        return 0
    if len(argv) != 3:
        print(
            "registry_storage.py: expected STORAGE STATE_DIR ADDRESS or --recorded STATE_DIR, got "
            f"{len(argv)} argument(s)",
            file=sys.stderr,
        )
        return 2
    storage, state_dir, address = Path(argv[0]), Path(argv[1]), argv[2]
    bases = base_repositories(state_dir, address)
    recent = recent_repositories(storage, [name for name in repository_names(storage) if name not in bases])
    kept, dropped = keep_only(storage, bases | recent)
    kept_bases = [name for name in kept if name in bases]
    print(
        f"kept {len(kept_bases)} base repositories ({', '.join(kept_bases) or 'none'}) and "
        f"{len(kept) - len(kept_bases)} pushed to within {RECENT_HOURS} h of the newest push, "
        f"dropped {len(dropped)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
