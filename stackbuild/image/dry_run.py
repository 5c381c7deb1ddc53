"""What ``build --dry-run`` shows: the plan's base, platforms, registry, tags, geometry verdict and
oracle record, and the Dockerfile a real build would render; no daemon is asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from stackbuild.image.plan import BuildPlan
from stackbuild.image.render import render as render_dockerfile


@dataclass(frozen=True)
class DryRun:
    """The summary as ``--json`` prints it (data) and as text."""

    data: Mapping[str, Any]
    text: str


def dry_run(plans: Sequence[BuildPlan]) -> DryRun:
    """The summary of the build ``plans`` describe; the first plan's Dockerfile stands for all."""
    plan = plans[0]
    data = {
        "recipe": str(plan.recipe.path),
        "base": str(plan.base.reference),
        "platform": plan.recipe.platform,
        "platforms": [p.recipe.platform for p in plans],
        "registry": plan.image.registry,
        "repository": plan.image.repository,
        "tags": list(plan.image.tags),
        "geometry_verdict": plan.geometry_verdict,
        "oracle_record": str(plan.oracle_record) if plan.oracle_record else None,
        "labels": dict(plan.labels),
        "dockerfile": render_dockerfile(plan),
    }
    several = (
        f" (one image each, an index under every tag; Dockerfile for {plan.recipe.platform})" if len(plans) > 1 else ""
    )
    text = (
        f"# base      {data['base']}\n# platform  {', '.join(data['platforms'])}"
        + several
        + f"\n# registry  {data['registry']}\n"
        f"# tags      {', '.join(plan.image.references)}\n"
        f"# geometry  {plan.geometry_verdict}: {plan.geometry_summary}\n"
        f"# oracle    {plan.oracle_record_note}\n\n" + data["dockerfile"]
    )
    return DryRun(data, text.rstrip("\n"))
