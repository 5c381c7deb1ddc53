"""How an image was made: an in-toto Statement (v1) with a SLSA provenance (v1) predicate.

The subject is the pushed manifest digest. The build definition records the
recipe (path, sha256), the platform, the patch series (name, sha256) and the
gate's verdict with the sha256 of the report it wrote in the image; the
resolved dependencies are the base image (by digest) and the source
revision. The builder is the GitHub Actions workflow run when there is one,
else this driver on the local engine.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from stackbuild.core.in_toto import MEDIA_TYPE, SLSA_PROVENANCE_PREDICATE, STATEMENT_TYPE
from stackbuild.core.labels import OCI_SOURCE, RECIPE_SHA256
from stackbuild.image.plan import BuildPlan

PROVENANCE_MEDIA_TYPE = MEDIA_TYPE
PREDICATE_TYPE = SLSA_PROVENANCE_PREDICATE
BUILD_TYPE = "urn:glm53-dflash2-images:build.py:v1"


def builder(engine_description: str, environ: Mapping[str, str] = os.environ) -> dict:
    """The builder's id and this run's id: the workflow run in GitHub Actions, else the local engine."""
    if environ.get("GITHUB_ACTIONS") == "true":
        server = environ.get("GITHUB_SERVER_URL", "https://github.com")
        run = f"{server}/{environ.get('GITHUB_REPOSITORY', '')}/actions/runs/{environ.get('GITHUB_RUN_ID', '')}"
        return {
            "id": f"{server}/{environ.get('GITHUB_WORKFLOW_REF', '')}",
            "invocation": f"{run}/attempts/{environ.get('GITHUB_RUN_ATTEMPT', '1')}",
        }
    return {"id": f"urn:glm53-dflash2-images:local:{engine_description}", "invocation": ""}


def make_statement(
    plan: BuildPlan,
    *,
    image_digest: str,
    gate_verdict: str,
    gate_report_sha256: str,
    gate_report_path: str,
    builder_info: dict,
    finished_on: Optional[str] = None,
) -> dict:
    base_hex = (plan.base.digest or "").removeprefix("sha256:")
    source = plan.labels[OCI_SOURCE]
    metadata = {"invocationId": builder_info["invocation"]} if builder_info.get("invocation") else {}
    if finished_on:
        metadata["finishedOn"] = finished_on
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": plan.image.repository, "digest": {"sha256": image_digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "recipe": {
                        "name": plan.recipe.name,
                        "path": str(plan.recipe.path),
                        "sha256": plan.labels[RECIPE_SHA256],
                    },
                    "platform": plan.recipe.platform,
                    "overlay": {"series": plan.recipe.overlay.series, "series_sha256": plan.series_sha256},
                },
                "internalParameters": {
                    "gate": {
                        "verdict": gate_verdict,
                        "report": {"path": gate_report_path, "digest": {"sha256": gate_report_sha256}},
                    },
                },
                "resolvedDependencies": [
                    {"uri": f"docker://{plan.base.reference.by_tag()}", "digest": {"sha256": base_hex}},
                    {"uri": f"git+{source}", "digest": {"gitCommit": plan.revision}},
                ],
            },
            "runDetails": {"builder": {"id": builder_info["id"]}, "metadata": metadata},
        },
    }
