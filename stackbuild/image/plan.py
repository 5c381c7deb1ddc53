"""Everything a build needs, resolved from a recipe before any daemon is asked.

A :class:`BuildPlan` is pure data: the pinned base, the image name and tags,
the labels, the gate's inputs and the host-side geometry verdict. Rendering
and building both start from it, so ``build --dry-run`` shows exactly what a
real build would do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional

from geometry import Behaviour, GeometryInputs, contract
from stackbuild.core import labels as label
from stackbuild.core.gate import recipe_geometry, summarise_reasons
from stackbuild.core.lock import PinnedBase, pinned_base
from stackbuild.core.naming import (
    SOURCE_PLACEHOLDER_RE,
    ImageName,
    image_name,
    image_source,
    require_real_source,
    source_date_epoch,
    source_revision,
)
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import ImageReference
from stackbuild.image.oracle_record import NOT_READ
from stackbuild.image.oracle_record import choose as choose_oracle_record

# The overlay-series label of a stock comparison build, and what its repository ends with.
STOCK_SERIES = "none"
STOCK_REPOSITORY_SUFFIX = "-stock"


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    base: PinnedBase
    image: ImageName
    source_date_epoch: int
    revision: str
    series_sha256: str
    gate_input: GeometryInputs  # written as gate-input.json
    geometry_verdict: str  # "pass" or "fail"
    geometry_summary: str
    labels: Mapping[str, str]
    oracle_record: Optional[Path] = None  # recipe.oracle.json, shipped to the gate
    oracle_record_note: str = ""
    # What FROM names when it is not the pinned base itself: the base index's manifest for this
    # platform (the engine keeps one image per digest reference). Set by the pipeline.
    from_reference: Optional[ImageReference] = None
    # The vLLM gated: stock for a comparison build (`build --stock`): the base's vLLM without the patch series.
    behaviour: Behaviour = Behaviour.OVERLAY
    # `build --allow-gate-failure`: an image whose in-image verdict is fail is kept (never pushed).
    gate_failure_allowed: bool = False

    @property
    def stock(self) -> bool:
        """A stock comparison build."""
        return self.behaviour is Behaviour.STOCK

    @property
    def payload_dir(self) -> str:
        return contract.PAYLOAD_DIR

    def require_pushable(self) -> None:
        """What a push needs before anything moves: an owner and a real source label (exit 2 otherwise)."""
        self.image.require_owner(self.recipe, "push to")
        require_real_source(self.recipe, self.labels[label.OCI_SOURCE])

    def notices(self) -> tuple[str, ...]:
        """The lines for stderr when the image name carries the stand-in owner (such an image is never pushed),
        and when the source label still holds a placeholder (a push refuses it)."""
        lines = []
        if self.image.owner_missing:
            lines.append(
                f"notice: no image owner (--owner, IMAGE_OWNER): naming the image {self.image.repository}; "
                "it stays in this engine (a push needs an owner)"
            )
        source = self.labels.get(label.OCI_SOURCE, "")
        found = SOURCE_PLACEHOLDER_RE.search(source)
        if found:
            fill = "--owner or IMAGE_OWNER fills it" if found.group(0) == "{owner}" else "write the repository's URL"
            lines.append(
                f"warning: label {label.OCI_SOURCE} is {source}, the placeholder {found.group(0)} unfilled "
                f"(image.source; {fill}; a push refuses it)"
            )
        return tuple(lines)

    @property
    def pinned_tag(self) -> str:
        return next(iter(self.image.pinned_tags), self.image.tags[0])


def make_plan(
    recipe: Recipe,
    *,
    owner: str | None = None,
    repository: str | None = None,
    allow_unpinned: bool = False,
    read_oracle_record: bool = True,
    behaviour: Behaviour = Behaviour.OVERLAY,
    gate_failure_allowed: bool = False,
) -> BuildPlan:
    """``read_oracle_record=False`` for commands that build nothing (push, verify, record): they
    neither read nor fail on the recipe's recipe.oracle.json (record replaces it)."""
    from overlay.lock import series_sha256

    base = pinned_base(recipe, allow_unpinned=allow_unpinned)
    epoch = source_date_epoch()
    source = source_revision(recipe, epoch)
    name = image_name(recipe, owner=owner, repository=repository, epoch=epoch, source=source, base_digest=base.digest)
    stock = behaviour is Behaviour.STOCK
    if stock:  # its own repository: a comparison image never takes the patched image's tags
        name = replace(name, repository=name.repository + STOCK_REPOSITORY_SUFFIX)
    series_hash = "" if stock else series_sha256(recipe.series_dir)
    run = recipe_geometry(recipe, vllm_behaviour=behaviour)
    verdict = run.verdict
    record = choose_oracle_record(recipe, run.inputs) if read_oracle_record else NOT_READ
    revision = source.label
    recipe_hash = recipe.file_sha256
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    pinned = next(iter(name.pinned_tags), name.tags[0])
    labels = {
        **dict(recipe.image.labels),
        label.OCI_TITLE: recipe.name,
        label.OCI_DESCRIPTION: recipe.image.description or recipe.description,
        label.OCI_SOURCE: image_source(recipe, owner),
        label.OCI_REVISION: revision,
        label.OCI_VERSION: pinned,
        label.OCI_CREATED: created,
        label.OCI_BASE_NAME: str(base.reference.by_tag()),
        label.OCI_BASE_DIGEST: base.digest or "",
        label.RECIPE_NAME: recipe.name,
        label.RECIPE_SHA256: recipe_hash,
        label.PLATFORM: recipe.platform,
        label.HARDWARE_GPU: recipe.hardware.gpu,
        label.HARDWARE_CAPABILITY_FAMILY: str(recipe.hardware.capability_family),
        label.VLLM_VERSION: recipe.base.vllm_version,
        label.OVERLAY_SERIES: STOCK_SERIES if stock else recipe.overlay.series,
        label.OVERLAY_SERIES_SHA256: series_hash,
        label.GEOMETRY_VERDICT: "pass" if verdict.passed else "fail",
        label.DRAFTER_ID: recipe.require_drafter("an image build (its labels and start-time pre-flight)").id,
        label.DRAFTER_LICENSE: recipe.drafter.license,
        label.TARGET_ID: recipe.target.id,
    }
    return BuildPlan(
        recipe=recipe,
        base=base,
        image=name,
        source_date_epoch=epoch,
        revision=revision,
        series_sha256=series_hash,
        gate_input=run.inputs,
        geometry_verdict="pass" if verdict.passed else "fail",
        geometry_summary=summarise_reasons(verdict.reasons)
        if not verdict.passed
        else "all drafter pages fit the target's attention page",
        labels=MappingProxyType(labels),
        oracle_record=record.path,
        oracle_record_note=record.note,
        behaviour=behaviour,
        gate_failure_allowed=gate_failure_allowed,
    )
