"""Render the Dockerfile and lay out the build context; no daemon involved."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jinja2

from .plan import BuildPlan
from .recipe import REPO_ROOT

TEMPLATE = REPO_ROOT / "Dockerfile.j2"
NORMALISE_SCRIPT = Path(__file__).with_name("normalise-mtimes.sh")
# Only what the image needs from overlay/ and geometry/: code and the series.
PAYLOAD_SOURCES = ("overlay", "geometry")
PAYLOAD_SKIP = ("__pycache__", "tests", ".pytest_cache")


def render(plan: BuildPlan) -> str:
    """The Dockerfile text for a plan."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    template = env.get_template(TEMPLATE.name)
    recipe = plan.recipe
    return template.render(
        recipe_name=recipe.name,
        vllm_version=recipe.base.vllm_version,
        series_name=recipe.overlay.series,
        base_reference=plan.base.reference,
        platform=recipe.platform,
        uname_machine=recipe.uname_machine,
        payload_dir=plan.payload_dir,
        source_date_epoch=plan.source_date_epoch,
        labels=dict(plan.labels),
    )


def _wanted(path: Path) -> bool:
    if any(part in PAYLOAD_SKIP for part in path.parts):
        return False
    return not path.name.endswith((".pyc", ".pyo", ".md", ".mk"))


def write_context(plan: BuildPlan, directory: Path) -> Path:
    """Write Dockerfile and payload/ into ``directory``; every file gets the epoch time."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = directory / "payload"
    payload.mkdir(exist_ok=True)
    for name in PAYLOAD_SOURCES:
        src_root = REPO_ROOT / name
        for src in sorted(src_root.rglob("*")):
            if src.is_file() and _wanted(src.relative_to(REPO_ROOT)):
                dst = payload / src.relative_to(REPO_ROOT)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
    (payload / "gate-input.json").write_text(json.dumps(dict(plan.gate_input), indent=2, sort_keys=True) + "\n")
    shutil.copyfile(NORMALISE_SCRIPT, payload / NORMALISE_SCRIPT.name)
    (directory / "Dockerfile").write_text(render(plan))
    # Same bytes, same times, same modes: COPY layers depend only on the inputs.
    for path in sorted(directory.rglob("*"), reverse=True):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.utime(path, (plan.source_date_epoch, plan.source_date_epoch), follow_symlinks=False)
    os.utime(directory, (plan.source_date_epoch, plan.source_date_epoch))
    return directory
