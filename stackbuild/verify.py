"""Check a pushed image against its recipe: labels, platform, and the gate run again inside it.

``build.py verify IMAGE@DIGEST --recipe R`` pulls the image by digest,
recomputes the plan's labels (all but the fields that record when and from
which commit it was built) and compares, then runs the in-image geometry
gate with ``--json`` and reads its verdict, then fetches the SBOM and the
provenance that refer to the digest and checks them against the image
(stackbuild/attest.py). Any difference is a
:class:`VerifyError` listing every mismatch.
"""
from __future__ import annotations

import json
from typing import Optional

from . import engine as engine_mod
from .attest import attestation_problems, gate_report_sha256, registry_client
from .errors import UsageError, VerifyError
from .plan import PAYLOAD_DIR, make_plan
from .progress import Progress
from .recipe import DIGEST_RE, Recipe
from .report import geometry_verdict
from .sbom import read_inventory

# Labels that record time or revision: they differ between two builds of one recipe.
UNCOMPARED_LABELS = (
    "org.opencontainers.image.created",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.version",
)
GATE_SCRIPT = f"{PAYLOAD_DIR}/geometry/sim_glm5_drafter_hades.py"
GATE_INPUT = f"{PAYLOAD_DIR}/gate-input.json"


def gate_command() -> tuple[list[str], list[str]]:
    """(entrypoint, args) of ``docker run --rm --entrypoint python3 IMAGE <gate> --json``."""
    return ["python3"], [GATE_SCRIPT, "--input", GATE_INPUT, "--oracle", "--json"]


def label_mismatches(expected: dict, actual: dict) -> list[str]:
    out = []
    for key in sorted(expected):
        if key in UNCOMPARED_LABELS:
            continue
        if key not in actual:
            out.append(f"label {key}: missing (recipe says {expected[key]!r})")
        elif actual[key] != expected[key]:
            out.append(f"label {key}: image has {actual[key]!r}, recipe says {expected[key]!r}")
    return out


def image_by_digest(image: str) -> tuple[str, str]:
    """``REPOSITORY@sha256:...`` -> (repository, digest); anything else (a tag) is a usage error."""
    repository, _tag, digest = engine_mod.split_reference(image)
    if not digest or not DIGEST_RE.match(digest):
        raise UsageError(f"verify {image}: give the image by digest (REPOSITORY@sha256:...), "
                         "as the build report's pushed_reference records it")
    return repository, digest


def verify_image(image: str, recipe: Recipe, *, json_progress: bool = False, engine: Optional[engine_mod.DockerEngine] = None) -> dict:
    with engine_mod.engine_errors(f"verify {image}"):
        return _verify(image, recipe, json_progress, engine)


def _verify(image: str, recipe: Recipe, json_progress: bool, engine: Optional[engine_mod.DockerEngine]) -> dict:
    repository, digest = image_by_digest(image)
    plan = make_plan(recipe, read_oracle_record=False)
    progress = Progress(json_lines=json_progress)
    engine = engine or engine_mod.connect()
    with progress.phase("pull", image):
        inspected = engine.pull(f"{repository}@{digest}", recipe.platform, lambda m: progress.layer_event("pull", m),
                                progress.retry_event)
    labels = (inspected.get("Config") or {}).get("Labels") or {}
    problems = label_mismatches(dict(plan.labels), labels)
    platform = f"{inspected.get('Os')}/{inspected.get('Architecture')}"
    if platform != recipe.platform:
        problems.append(f"platform: image is {platform}, recipe says {recipe.platform}")
    with progress.phase("geometry gate", "inside the image"):
        entrypoint, args = gate_command()
        code, out, err = engine.run(inspected["Id"], entrypoint, args, platform=recipe.platform)
    gate: Optional[dict] = None
    try:
        parsed = json.loads(out)
        gate = parsed if isinstance(parsed, dict) else None
    except json.JSONDecodeError:
        pass
    verdict = geometry_verdict(gate) if gate is not None else None
    if code != 0 or verdict != "pass":
        tail = " | ".join([line for line in (err or out).splitlines() if line.strip()][-5:])
        problems.append(f"geometry gate: exit code {code}, verdict {verdict or 'unreadable'}" + (f" ({tail})" if tail and verdict is None else ""))
        verdict = verdict or "fail"
    with progress.phase("attestations", "SBOM and provenance referring to the digest"):
        client = registry_client(engine, repository, progress)
        inventory = read_inventory(engine, inspected["Id"], PAYLOAD_DIR, recipe.platform)
        report_sha, _raw = gate_report_sha256(engine, inspected["Id"], PAYLOAD_DIR)
        problems += attestation_problems(client, digest, labels, report_sha, inventory)
    result = {
        "image": image,
        "digest": digest,
        "image_id": inspected["Id"],
        "platform": platform,
        "labels_compared": len([k for k in plan.labels if k not in UNCOMPARED_LABELS]),
        "mismatches": problems,
        "verdict": "pass" if not problems else "fail",
        "geometry_verdict": verdict,
        "geometry_report": gate,
    }
    if problems:
        raise VerifyError(f"{image} does not match {recipe.path}:\n  " + "\n  ".join(problems))
    return result
