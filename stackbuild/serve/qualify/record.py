"""The record `qualify --attach` pushes: the measurement and the recipe's facts, for the image
(stackbuild/image/qualification.py attaches it); stackbuild/core/qualification_record.py defines it."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from stackbuild.core.qualification_record import QualificationRecord
from stackbuild.core.recipe import load_recipe
from stackbuild.core.reference import ImageReference
from stackbuild.core.serve_args import serve_argv
from stackbuild.serve.qualify.result import Qualification


def qualification_record(
    result: Qualification, recipe_path: Optional[Path], reference: ImageReference
) -> QualificationRecord:
    """``result`` measured now on the image ``reference`` names, with the facts of the recipe at
    ``recipe_path`` (none without one)."""
    recipe = load_recipe(recipe_path) if recipe_path is not None else None
    hardware = (
        {}
        if recipe is None
        else {
            "gpu": recipe.hardware.gpu,
            "compute_capability": recipe.hardware.compute_capability,
            "platforms": list(recipe.platforms),
            "tensor_parallel_size": recipe.serving.tensor_parallel_size,
            "nodes": recipe.serving.nodes,
        }
    )
    spec = result.spec_decode
    findings = (
        list(result.kv_cache.differences)
        + list(result.failures)
        + [f"{e.key}: measured {e.measured}, expected at least {e.minimum}" for e in result.expectations if not e.met]
    )
    return QualificationRecord(
        repository=reference.repository,
        digest=reference.digest,
        qualified_on=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        verdict="pass" if result.passed else "fail",
        url=result.url,
        model=result.model,
        vllm_version=result.vllm_version,
        recipe_name=recipe.name if recipe else None,
        recipe_sha256=recipe.file_sha256 if recipe else None,
        hardware=hardware,
        served_flags=tuple(serve_argv(recipe)) if recipe else (),
        decode_tokens_per_s=result.served.e2e_output_tokens_per_s,
        speculation_configured=spec.configured,
        acceptance_rate=spec.acceptance_rate,
        mean_accepted_length=spec.mean_accepted_length,
        acceptance_per_position=tuple(spec.acceptance_per_position),
        findings=tuple(findings),
        result=result.to_json(),
    )
