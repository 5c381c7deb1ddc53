"""Attach an SBOM and provenance to a pushed image, and check them for `verify`.

:func:`attest_image` runs after the push: it reads the image's Python
packages, the overlay's changed files and the gate report from the image,
writes the CycloneDX SBOM and the in-toto/SLSA statement, and pushes both as
artifacts referring to the pushed digest (stackbuild/attach.py).
:func:`attestation_problems` fetches them back and compares them with the
image: subject digests, labels (recipe and series sha256, base digest,
revision), the gate verdict and the sha256 of the image's gate report, and
the overlay files' sha256 as they are in the image.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Optional

from geometry import contract
from stackbuild.core.errors import BuildStepFailed, VerifyError
from stackbuild.core.labels import OCI_BASE_DIGEST, OCI_CREATED, OCI_REVISION, OVERLAY_SERIES_SHA256, RECIPE_SHA256
from stackbuild.core.reference import ImageReference
from stackbuild.image.attach import NotAttached, attach, fetch_document
from stackbuild.image.engine_api import ContainerEngine
from stackbuild.image.plan import BuildPlan
from stackbuild.image.progress import Progress
from stackbuild.image.provenance import PREDICATE_TYPE, PROVENANCE_MEDIA_TYPE, STATEMENT_TYPE, builder, make_statement
from stackbuild.image.registry import RegistryClient, registry_client
from stackbuild.image.report import geometry_verdict
from stackbuild.image.sbom import SBOM_MEDIA_TYPE, Inventory, make_sbom, overlay_files_of, read_inventory


def gate_report_sha256(engine: ContainerEngine, image: str, payload_dir: str) -> tuple[str, bytes]:
    path = contract.payload_path(contract.GATE_REPORT, payload_dir)
    raw = engine.read_file(image, path)
    if raw is None:
        raise BuildStepFailed("attest", f"the image has no {path}")
    return hashlib.sha256(raw).hexdigest(), raw


def attest_image(
    engine: ContainerEngine, plan: BuildPlan, image_id: str, image_digest: str, progress: Progress
) -> dict:
    """Push the SBOM and the provenance of ``repository@image_digest``; return where they are."""
    client = registry_client(engine, plan.image.repository, progress)
    subject = client.manifest(image_digest)
    if subject is None:
        raise BuildStepFailed(
            "attest", f"{plan.image.reference(digest=image_digest)}: the registry does not have the pushed manifest"
        )
    inventory = read_inventory(engine, image_id, plan.payload_dir, plan.recipe.platform)
    report_sha, raw = gate_report_sha256(engine, image_id, plan.payload_dir)
    try:
        verdict = geometry_verdict(json.loads(raw))
    except (ValueError, contract.ContractError):  # not JSON, or not the gate's report
        verdict = "unknown"
    finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    statement = make_statement(
        plan,
        image_digest=image_digest,
        gate_verdict=verdict,
        gate_report_sha256=report_sha,
        gate_report_path=contract.payload_path(contract.GATE_REPORT, plan.payload_dir),
        builder_info=builder(engine.about().line),
        finished_on=finished,
    )
    annotations = {OCI_CREATED: finished}
    sbom = attach(
        client,
        subject.descriptor,
        SBOM_MEDIA_TYPE,
        make_sbom(inventory, plan.image.repository, image_digest),
        annotations,
    )
    provenance = attach(
        client, subject.descriptor, PROVENANCE_MEDIA_TYPE, json.dumps(statement, sort_keys=True).encode(), annotations
    )
    progress.note(
        f"attached SBOM {sbom.digest} ({len(inventory.distributions)} packages, "
        f"{len(inventory.overlay_files)} overlay files) and provenance {provenance.digest} ({sbom.via})"
    )
    return {"sbom": sbom.digest, "provenance": provenance.digest, "found_via": sbom.via}


def attestation_problems(
    client: RegistryClient, image_digest: str, labels: dict, report_sha: str, inventory: Inventory
) -> list[str]:
    """Fetch both documents referring to ``image_digest``; what in them does not match the image."""
    hex_digest = image_digest.removeprefix("sha256:")
    fetched: dict[str, tuple[Optional[dict], Optional[VerifyError]]] = {}
    for artifact_type, what in ((PROVENANCE_MEDIA_TYPE, "provenance"), (SBOM_MEDIA_TYPE, "SBOM")):
        try:
            raw, where = fetch_document(client, image_digest, artifact_type, what)
        except VerifyError as exc:
            fetched[what] = (None, exc)
            continue
        try:
            fetched[what] = (json.loads(raw), None)
        except json.JSONDecodeError:
            fetched[what] = (None, VerifyError(f"{what} {where}: not JSON"))
    errors = [error for _document, error in fetched.values() if error is not None]
    if len(errors) == 2 and all(isinstance(error, NotAttached) for error in errors):
        # Nothing refers to the image: one cause, one line.
        return [
            f"{ImageReference(client.repository, digest=image_digest)}: no SBOM and no provenance refer to it "
            f"({errors[0].where}); "
            "this project did not push it"
        ]
    problems = [str(error) for error in errors]
    statement, _ = fetched["provenance"]
    if statement is not None:
        problems += _provenance_problems(statement, hex_digest, labels, report_sha)
    sbom, _ = fetched["SBOM"]
    if sbom is not None:
        problems += _sbom_problems(sbom, image_digest, inventory)
    return problems


def _provenance_problems(statement: dict, hex_digest: str, labels: dict, report_sha: str) -> list[str]:
    problems = []
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != PREDICATE_TYPE:
        problems.append(
            f"provenance: not an in-toto statement with a SLSA provenance predicate "
            f"({statement.get('_type')}, {statement.get('predicateType')})"
        )
    subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject") or []]
    if hex_digest not in subjects:
        problems.append(f"provenance: subject is {subjects}, not the image's sha256:{hex_digest}")
    definition = (statement.get("predicate") or {}).get("buildDefinition") or {}
    external = definition.get("externalParameters") or {}
    internal = definition.get("internalParameters") or {}
    dependencies = definition.get("resolvedDependencies") or []
    expected = {
        "recipe sha256": (((external.get("recipe") or {}).get("sha256")), labels.get(RECIPE_SHA256)),
        "series sha256": (((external.get("overlay") or {}).get("series_sha256")), labels.get(OVERLAY_SERIES_SHA256)),
        "base digest": (
            next(
                (
                    ("sha256:" + d["digest"]["sha256"])
                    for d in dependencies
                    if str(d.get("uri", "")).startswith("docker://") and (d.get("digest") or {}).get("sha256")
                ),
                None,
            ),
            labels.get(OCI_BASE_DIGEST),
        ),
        "source revision": (
            next(
                (
                    (d.get("digest") or {}).get("gitCommit")
                    for d in dependencies
                    if str(d.get("uri", "")).startswith("git+")
                ),
                None,
            ),
            labels.get(OCI_REVISION),
        ),
        "gate verdict": (((internal.get("gate") or {}).get("verdict")), "pass"),
        "gate report sha256": (
            (((internal.get("gate") or {}).get("report") or {}).get("digest") or {}).get("sha256"),
            report_sha,
        ),
    }
    for what, (says, image_has) in expected.items():
        if says != image_has:
            problems.append(f"provenance: {what} is {says!r}, the image has {image_has!r}")
    return problems


def _sbom_problems(sbom: dict, image_digest: str, inventory: Inventory) -> list[str]:
    problems = []
    described = ((sbom.get("metadata") or {}).get("component") or {}).get("version")
    if described != image_digest:
        problems.append(f"SBOM: describes {described!r}, not the image {image_digest}")
    listed = overlay_files_of(sbom)
    actual = dict(inventory.overlay_files)
    if listed != actual:
        differ = sorted(set(listed.items()) ^ set(actual.items()))
        problems.append(f"SBOM: overlay files differ from the image's ({len(differ)} entries, first {differ[0][0]})")
    packages = {c.get("name"): c.get("version") for c in sbom.get("components") or [] if c.get("type") == "library"}
    if packages != dict(inventory.distributions):
        problems.append(
            f"SBOM: Python packages differ from the image's ({len(packages)} listed, "
            f"{len(inventory.distributions)} in the image)"
        )
    return problems
