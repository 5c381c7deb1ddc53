#!/usr/bin/env python3
"""What a new test registry keeps of the last one's storage: the synthetic bases' repositories.

    registry_storage.py STORAGE STATE_DIR ADDRESS   keep only the base repositories in STORAGE
    registry_storage.py --recorded STATE_DIR        print each repository the base records name

services.sh gives every new registry fresh credentials and, but for the bases, empty storage. The
repositories the base records in STATE_DIR name (base-*.json, written by build_base.record: their
"repository", on the registry at ADDRESS) stay in STORAGE; every other repository is removed, and
services.sh then has the registry collect the blobs only those held. A base is the same bytes every
run: kept, build_base.push finds it in the registry and need not compress its layers again.
Prints one line: the repositories kept, by name, and how many were dropped.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

# Where Distribution's filesystem driver keeps a repository: REPOSITORIES/<name>/_manifests, _layers, _uploads.
REPOSITORIES = Path("docker/registry/v2/repositories")


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


def keep_only(storage: Path, keep: set[str]) -> tuple[list[str], list[str]]:
    """Remove every repository of storage not named in keep: (kept, dropped), by name."""
    root = storage / REPOSITORIES
    if not root.is_dir():
        return [], []
    names = sorted(path.parent.relative_to(root).as_posix() for path in root.rglob("_manifests"))
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
    kept, dropped = keep_only(storage, base_repositories(state_dir, address))
    print(f"kept {len(kept)} base repositories ({', '.join(kept) or 'none'}), dropped {len(dropped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
