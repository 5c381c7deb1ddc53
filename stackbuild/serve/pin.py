"""`build.py pin`: write into the recipe the revisions and config sha256s of the checkpoints under a
models directory, so a user pins what they downloaded with one command.

The commit comes from the Hugging Face cache path (geometry/preflight/checkpoint.py
``snapshot_of``, the code the start-time check runs); a plain directory has none and is
refused. The recipe is edited in place, one line per key (``revision:`` / ``config_sha256:``
under ``target:`` / ``drafter:``, added after the block's last key when absent), so its
comments stay; the new text must load as a recipe with those values before it replaces
the file (atomically).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from geometry import ConfigUnusable, Role, read_config, snapshot_of
from stackbuild.core.atomic import replace_text
from stackbuild.core.errors import MountedCheckpointMismatch, MountedConfigUnusable, RecipeError, UsageError
from stackbuild.core.preflight_record import file_sha256, snapshot_path
from stackbuild.core.recipe import Recipe, load_recipe
from stackbuild.serve.preflight_host import host_locator

PINNED_KEYS = ("revision", "config_sha256")


@dataclass(frozen=True)
class Pinned:
    role: Role
    directory: str  # the host directory read
    revision: str
    config_sha256: str
    changed: bool  # the recipe said something else (or nothing) before


def _found(recipe: Recipe, models_dir: Path) -> list[Pinned]:
    locate = host_locator(recipe, models_dir)
    out = []
    for role in Role:
        model = getattr(recipe, role)
        if model is None:  # no drafter (speculation.method ngram)
            continue
        directory = locate(model.path)
        snapshot = snapshot_of(directory)
        if snapshot.commit is None:
            raise UsageError(
                f"--models-dir: the {role} {directory}: {snapshot.describe()}; nothing to pin "
                "(a Hugging Face cache snapshot names its commit: models--ORG--NAME/snapshots/<commit>/)"
            )
        try:
            config = read_config(role, directory, model.path)
        except ConfigUnusable as exc:
            raise MountedConfigUnusable(str(exc)) from None
        snapshot_sha = file_sha256(snapshot_path(recipe, model.config))
        if config.sha256 != snapshot_sha:
            raise MountedCheckpointMismatch(
                f"{config.path} has sha256 {config.sha256}, not that of the recipe's snapshot {model.config} "
                f"({snapshot_sha}) the geometry gate checks: copy it there and re-run the gate before pinning"
            )
        changed = (model.revision, model.config_sha256) != (snapshot.commit, config.sha256)
        out.append(Pinned(role, directory, snapshot.commit, config.sha256, changed))
    return out


_TOP_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")


def _block(lines: list[str], role: str, path: Path) -> tuple[int, int, str]:
    """(first line after ``role:``, end of its block, the indentation of its keys)."""
    start = next((i for i, line in enumerate(lines) if re.match(rf"^{role}\s*:\s*(#.*)?$", line)), None)
    if start is None:
        raise RecipeError(path, role, "no block mapping `" + role + ":` at the top level to edit (edit it by hand)")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
        end += 1
    keys = [line for line in lines[start + 1 : end] if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise RecipeError(path, role, "is empty")
    return start + 1, end, keys[0][: len(keys[0]) - len(keys[0].lstrip())]


def pinned_text(text: str, path: Path, values: dict[str, dict[str, str]]) -> str:
    """``text`` with ``values[role][key]`` written as ``key: "value"``
    (quoted: a commit of digits alone is a string) under each role's block."""
    lines = text.splitlines(keepends=True)
    for role, keys in values.items():
        for key, value in keys.items():
            start, end, indent = _block(lines, role, path)
            pattern = re.compile(rf"^{re.escape(indent)}{key}\s*:[ \t]*([^#\n]*?)([ \t]+#.*)?(\r?\n)?$")
            at = next((i for i in range(start, end) if pattern.match(lines[i])), None)
            if at is not None:
                m = pattern.match(lines[at])
                if m.group(1).strip().strip("'\"") != value:  # a line that already says it stays as it is
                    lines[at] = f'{indent}{key}: "{value}"{m.group(2) or ""}{m.group(3) or ""}'
            else:
                last = max(i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
                if not lines[last].endswith("\n"):
                    lines[last] += "\n"
                lines.insert(last + 1, f'{indent}{key}: "{value}"\n')
    return "".join(lines)


def pin(recipe_path: Path, models_dir: Path) -> dict:
    """Write the found pins into the recipe at ``recipe_path``; what was pinned."""
    recipe = load_recipe(recipe_path)
    found = _found(recipe, models_dir)
    path = Path(recipe_path)
    old = path.read_text(encoding="utf-8")
    new = pinned_text(old, path, {p.role: {"revision": p.revision, "config_sha256": p.config_sha256} for p in found})
    if new != old:
        replace_text(path, new)
        try:
            again = load_recipe(path)
            for p in found:
                model = getattr(again, p.role)
                if (model.revision, model.config_sha256) != (p.revision, p.config_sha256):
                    raise RecipeError(path, f"{p.role}.revision", "the line edit did not take (edit it by hand)")
        except RecipeError:
            replace_text(path, old)
            raise
    return {
        "recipe": str(path),
        "changed": new != old,
        "pins": [
            {
                "role": p.role,
                "directory": p.directory,
                "revision": p.revision,
                "config_sha256": p.config_sha256,
                "changed": p.changed,
            }
            for p in found
        ],
    }
