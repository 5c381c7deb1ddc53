"""Everything a build needs, resolved from a recipe before any daemon is asked.

A :class:`BuildPlan` is pure data: the pinned base, the image name and tags,
the labels, the gate's inputs and the host-side geometry verdict. Rendering
and building both start from it, so ``build --dry-run`` shows exactly what a
real build would do.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional

from stackbuild.core.labels import LABEL_NS
from stackbuild.core.lock import PinnedBase, pinned_base
from geometry.image_contract import PAYLOAD_DIR

from stackbuild.core.naming import ImageName, image_name, source_date_epoch, source_revision
from stackbuild.image.oracle_record import NOT_READ
from stackbuild.image.oracle_record import choose as choose_oracle_record
from stackbuild.core.gate import recipe_geometry, summarise_reasons
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import ImageReference



@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    base: PinnedBase
    image: ImageName
    source_date_epoch: int
    revision: str
    series_sha256: str
    gate_input: Mapping
    geometry_verdict: str  # "pass" or "fail"
    geometry_summary: str
    labels: Mapping[str, str]
    oracle_record: Optional[Path] = None  # recipe.oracle.json, shipped to the gate
    oracle_record_note: str = ""
    # What FROM names when it is not the pinned base itself: the base index's manifest for this
    # platform (the engine keeps one image per digest reference). Set by the pipeline.
    from_reference: Optional[ImageReference] = None

    @property
    def payload_dir(self) -> str:
        return PAYLOAD_DIR

    @property
    def pinned_tag(self) -> str:
        return next(iter(self.image.pinned_tags), self.image.tags[0])


def make_plan(recipe: Recipe, *, owner: str | None = None, repository: str | None = None, allow_unpinned: bool = False,
              read_oracle_record: bool = True) -> BuildPlan:
    """``read_oracle_record=False`` for commands that build nothing (push, verify, record): they
    neither read nor fail on the recipe's recipe.oracle.json (record replaces it)."""
    from overlay.lock import series_sha256

    base = pinned_base(recipe, allow_unpinned=allow_unpinned)
    epoch = source_date_epoch()
    source = source_revision(recipe, epoch)
    name = image_name(recipe, owner=owner, repository=repository, epoch=epoch, source=source, base_digest=base.digest)
    series_hash = series_sha256(recipe.series_dir)
    gate, _report, verdict = recipe_geometry(recipe)
    record = choose_oracle_record(recipe, gate) if read_oracle_record else NOT_READ
    revision = source.label
    recipe_hash = hashlib.sha256(recipe.path.read_bytes()).hexdigest()
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    pinned = next(iter(name.pinned_tags), name.tags[0])
    labels = {
        **dict(recipe.image.labels),
        "org.opencontainers.image.title": recipe.name,
        "org.opencontainers.image.description": recipe.image.description or recipe.description,
        "org.opencontainers.image.source": recipe.image.source,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.version": pinned,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.base.name": str(base.reference.by_tag()),
        "org.opencontainers.image.base.digest": base.digest or "",
        f"{LABEL_NS}.recipe.name": recipe.name,
        f"{LABEL_NS}.recipe.sha256": recipe_hash,
        f"{LABEL_NS}.platform": recipe.platform,
        f"{LABEL_NS}.hardware.gpu": recipe.hardware.gpu,
        f"{LABEL_NS}.hardware.capability-family": str(recipe.hardware.capability_family),
        f"{LABEL_NS}.vllm.version": recipe.base.vllm_version,
        f"{LABEL_NS}.overlay.series": recipe.overlay.series,
        f"{LABEL_NS}.overlay.series.sha256": series_hash,
        f"{LABEL_NS}.geometry.verdict": "pass" if verdict.passed else "fail",
        f"{LABEL_NS}.drafter.id": recipe.drafter.id,
        f"{LABEL_NS}.drafter.license": recipe.drafter.license,
        f"{LABEL_NS}.target.id": recipe.target.id,
    }
    return BuildPlan(
        recipe=recipe,
        base=base,
        image=name,
        source_date_epoch=epoch,
        revision=revision,
        series_sha256=series_hash,
        gate_input=MappingProxyType(gate),
        geometry_verdict="pass" if verdict.passed else "fail",
        geometry_summary=summarise_reasons(verdict.reasons) if not verdict.passed else "all drafter pages fit the target's attention page",
        labels=MappingProxyType(labels),
        oracle_record=record.path,
        oracle_record_note=record.note,
    )
