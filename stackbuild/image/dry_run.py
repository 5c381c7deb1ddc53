"""What ``build --dry-run`` shows: the plan's base, platforms, registry, tags, geometry verdict and
oracle record, and the Dockerfile a real build would render; no daemon is asked.

The dry run ends as the build would where the host knows how: a recipe, lock or owner the build
refuses is refused before the plan exists (make_plan, build_plans), and a plan the host-side gate
fails is the build's gate step failing (exit 5) once the image is built: the in-image gate runs
the same simulator on the same gate input. That refusal is the dry run's ``refusal``, raised
after the plan is shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from stackbuild.core.errors import GeometryGateFailed
from stackbuild.image.plan import BuildPlan
from stackbuild.image.render import render as render_dockerfile

# How the dry run's error line says that it stands for the build.
BUILD_WOULD_FAIL = (
    f"; the build would stop at its gate step with this, exit {GeometryGateFailed.exit_code} (dry run: nothing built)"
)


@dataclass(frozen=True)
class DryRun:
    """The summary as ``--json`` prints it (data) and as text, and the error the build would end with."""

    data: Mapping[str, Any]
    text: str
    refusal: Optional[GeometryGateFailed] = None


def gate_refusal(plans: Sequence[BuildPlan]) -> Optional[GeometryGateFailed]:
    """The build's gate-step failure for the first plan the host-side gate fails; None when all pass
    (or a failure is allowed: `--allow-gate-failure` keeps the image)."""
    failed = next((p for p in plans if p.geometry_verdict != "pass" and not p.gate_failure_allowed), None)
    if failed is None:
        return None
    return GeometryGateFailed(
        f"{failed.recipe.path}: geometry gate failed: {failed.geometry_summary}{BUILD_WOULD_FAIL}"
    )


def dry_run(plans: Sequence[BuildPlan]) -> DryRun:
    """The summary of the build ``plans`` describe; the first plan's Dockerfile stands for all."""
    plan = plans[0]
    refusal = gate_refusal(plans)
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
        # the code the build would exit with (the dry run exits with it too)
        "exit_code": refusal.exit_code if refusal else 0,
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
    return DryRun(data, text.rstrip("\n"), refusal)
