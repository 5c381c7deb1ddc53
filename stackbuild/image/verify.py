"""Check a pushed image against its recipe: labels, platform, and the gate run again inside it.

``build.py verify IMAGE@DIGEST --recipe R`` pulls the image by digest,
recomputes the plan's labels (all but the fields that record when and from
which commit it was built) and compares, fetches the SBOM and the
provenance that refer to the digest and checks them against the image
(stackbuild/attest.py), lists the qualifications `qualify --attach` left
there (an unreadable one is a mismatch; a failing one is listed, its verdict
in it), then runs the in-image geometry gate with ``--json``
and reads its verdict. A digest naming an image index (a multi-platform
recipe's) is checked entry by entry: the index must hold exactly the
recipe's platforms, and each platform's image is checked as above against
the recipe's view of that platform. Any difference is a :class:`VerifyError`
listing every mismatch, prefixed with its platform for an index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from geometry import contract
from stackbuild.core.errors import VerifyError
from stackbuild.core.labels import OCI_CREATED, OCI_REVISION, OCI_VERSION, RECIPE_SHA256
from stackbuild.core.qualification_record import summary_line
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import DIGEST_RE, ImageReference, by_digest
from stackbuild.image.attest import attestation_problems, gate_report_sha256
from stackbuild.image.connect import connect
from stackbuild.image.cosign import Cosign, TrustPolicy
from stackbuild.image.engine_api import ContainerEngine
from stackbuild.image.engine_errors import engine_errors
from stackbuild.image.index import index_platforms
from stackbuild.image.plan import make_plan
from stackbuild.image.progress import Progress
from stackbuild.image.qualification import records as qualification_records
from stackbuild.image.registry import RegistryClient, registry_client
from stackbuild.image.report import geometry_verdict
from stackbuild.image.sbom import read_inventory
from stackbuild.image.signature_check import check_signatures

# Labels that record time or revision: they differ between two builds of one recipe.
UNCOMPARED_LABELS = (OCI_CREATED, OCI_REVISION, OCI_VERSION)


def gate_command(import_vllm: bool = False) -> tuple[list[str], list[str]]:
    """(entrypoint, args) of ``docker run --rm --entrypoint ENTRY IMAGE ARGS``: the gate again, its report on stdout
    (held to the oracle record the build left in the image when its key is the image's, unless ``import_vllm``)."""
    argv = contract.gate_argv(contract.PAYLOAD_DIR, build=False, import_vllm=import_vllm)
    return argv[:1], argv[1:]


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


def image_by_digest(image: str) -> ImageReference:
    """``REPOSITORY@sha256:...`` -> the image by digest (a tag beside the digest is dropped);
    a tag alone is a usage error."""
    return by_digest(image, f"verify {image}")


def tag_beside_digest(image: str) -> Optional[str]:
    """The tag of ``REPOSITORY:TAG@DIGEST``, which verify checks still names the digest; None without one."""
    return ImageReference.parse(image).tag


@dataclass(frozen=True)
class SignatureCheck:
    """verify's signature check: the cosign it runs and what the signatures must verify with."""

    cosign: Cosign
    policy: TrustPolicy


def verify_image(
    image: str,
    recipe: Recipe,
    *,
    json_progress: bool = False,
    engine: Optional[ContainerEngine] = None,
    signatures: Optional[SignatureCheck] = None,
    import_vllm: bool = False,
) -> dict:
    with engine_errors(f"verify {image}"):
        return _verify(image, recipe, json_progress, engine, signatures, import_vllm)


def qualification_lines(result: dict) -> list[str]:
    """verify's text lines for the qualifications it found (the image's, or the index's and each platform's)."""
    scopes = [("", result.get("qualifications") or [])]
    scopes += [
        (f"{platform}: ", entry.get("qualifications") or [])
        for platform, entry in (result.get("platforms") or {}).items()
    ]
    lines = [prefix + summary_line(q) for prefix, found in scopes for q in found]
    return lines or ["no qualifications (`build.py qualify --attach IMAGE@DIGEST` adds one)"]


def _verify(
    image: str,
    recipe: Recipe,
    json_progress: bool,
    engine: Optional[ContainerEngine],
    signatures: Optional[SignatureCheck],
    import_vllm: bool,
) -> dict:
    reference = image_by_digest(image)
    repository, digest = reference.repository, reference.digest
    progress = Progress(json_lines=json_progress)
    engine = engine or connect()
    client = registry_client(engine, repository, progress)
    signed = {"signed": None, "trusted": None}  # not checked: no key or identity given
    if signatures is not None:
        signed = check_signatures(
            signatures.cosign, signatures.policy, client, tag_beside_digest(image), digest, progress
        )
    result = _verify_unsigned(image, reference, recipe, client, engine, progress, import_vllm)
    return {**result, "signature": signed}


def _verify_unsigned(
    image: str,
    reference: ImageReference,
    recipe: Recipe,
    client: RegistryClient,
    engine: ContainerEngine,
    progress: Progress,
    import_vllm: bool,
) -> dict:
    repository, digest = reference.repository, reference.digest
    top = client.manifest(digest)
    if top is None:
        raise VerifyError(f"{image}: the registry has no such manifest")
    if "manifests" in top.document:
        return _verify_index(image, reference, recipe, top.document, client, engine, progress, import_vllm)
    view = recipe
    if len(recipe.platforms) > 1:  # one platform's image of a multi-platform recipe, verified on its own
        platform = _config_platform(client, top.document, image)
        if platform not in recipe.platforms:
            raise VerifyError(
                f"{image} does not match {recipe.path}:\n  platform: image is {platform}, "
                f"recipe says {', '.join(recipe.platforms)}"
            )
        view = recipe.for_platform(platform)
    result = _verify_platform(repository, digest, view, client, engine, progress, import_vllm)
    if result["mismatches"]:
        raise VerifyError(f"{image} does not match {recipe.path}:\n  " + "\n  ".join(result["mismatches"]))
    return {"image": image, **result}


def _config_platform(client: RegistryClient, manifest: dict, image: str) -> str:
    config_digest = (manifest.get("config") or {}).get("digest", "")
    config = client.image_config(config_digest) if DIGEST_RE.match(config_digest) else None
    if config is None or not config.architecture:
        raise VerifyError(f"{image}: the manifest names no readable image config ({config_digest or 'none'})")
    return config.platform


def _verify_index(
    image: str,
    reference: ImageReference,
    recipe: Recipe,
    index: dict,
    client: RegistryClient,
    engine: ContainerEngine,
    progress: Progress,
    import_vllm: bool,
) -> dict:
    """Every platform of the recipe: its entry in the index, then the image it names, checked as one image is."""
    repository, digest = reference.repository, reference.digest
    entries = index_platforms(index)
    problems = [f"index: no image for {platform}" for platform in recipe.platforms if platform not in entries]
    problems += [
        f"index: {platform} is not one of the recipe's platforms ({', '.join(recipe.platforms)})"
        for platform in entries
        if platform not in recipe.platforms
    ]
    found, unreadable = qualification_records(client, digest)
    problems += unreadable
    platforms = {}
    for platform in recipe.platforms:
        if platform not in entries:
            continue
        result = _verify_platform(
            repository, entries[platform], recipe.for_platform(platform), client, engine, progress, import_vllm
        )
        platforms[platform] = result
        problems += [f"{platform}: {problem}" for problem in result["mismatches"]]
    if problems:
        raise VerifyError(f"{image} does not match {recipe.path}:\n  " + "\n  ".join(problems))
    return {
        "image": image,
        "digest": digest,
        "index": True,
        "platforms": platforms,
        "mismatches": [],
        "verdict": "pass",
        "geometry_verdict": "pass",
        "qualifications": [r.summary() for r in found],
    }


def _verify_platform(
    repository: str,
    digest: str,
    recipe: Recipe,
    client: RegistryClient,
    engine: ContainerEngine,
    progress: Progress,
    import_vllm: bool,
) -> dict:
    """One image (``recipe`` is the view of its platform): labels, platform, attestations, then the gate.

    The gate runs only on an image whose labels and attestations already match. It is held to vLLM's
    answer recorded in the image by its build when that record's key is the image's vLLM tree, packages
    and gate input; otherwise (or with ``import_vllm``) it imports the image's vLLM (a cold import,
    minutes under emulation) and plans again.
    """
    plan = make_plan(recipe, read_oracle_record=False)
    reference = ImageReference(repository, digest=digest)
    with progress.phase("pull", f"{reference} for {recipe.platform}"):
        inspected = engine.pull(
            reference, recipe.platform, lambda m: progress.layer_event("pull", m), progress.retry_event
        )
    labels = dict(inspected.labels)
    problems = label_mismatches(dict(plan.labels), labels)
    platform = inspected.platform
    if platform != recipe.platform:
        problems.append(f"platform: image is {platform}, recipe says {recipe.platform}")
    with progress.phase("attestations", f"SBOM and provenance referring to {digest}"):
        inventory = read_inventory(engine, inspected.id, contract.PAYLOAD_DIR, recipe.platform)
        report_sha, _raw = gate_report_sha256(engine, inspected.id, contract.PAYLOAD_DIR)
        problems += attestation_problems(client, digest, labels, report_sha, inventory)
        found, unreadable = qualification_records(client, digest)
        problems += unreadable
    gate: Optional[dict] = None
    verdict: Optional[str] = None
    if problems:
        progress.note(f"{reference}: the geometry gate is not run again: the image already does not match")
    else:
        with progress.phase("geometry gate", f"inside the image ({recipe.platform})"):
            entrypoint, args = gate_command(import_vllm)
            code, out, err = engine.run(inspected.id, entrypoint, args, platform=recipe.platform)
        try:
            gate = json.loads(out)
            verdict = geometry_verdict(gate)
        except (json.JSONDecodeError, contract.ContractError):
            gate = None
        if code != 0 or verdict != "pass":
            tail = " | ".join([line for line in (err or out).splitlines() if line.strip()][-5:])
            problems.append(
                f"geometry gate: exit code {code}, verdict {verdict or 'unreadable'}"
                + (f" ({tail})" if tail and verdict is None else "")
            )
            verdict = verdict or "fail"
    return {
        "digest": digest,
        "image_id": inspected.id,
        "platform": platform,
        "labels_compared": len([k for k in plan.labels if k not in UNCOMPARED_LABELS]),
        "mismatches": problems,
        "verdict": "pass" if not problems else "fail",
        "geometry_verdict": verdict,
        "geometry_report": gate,
        # Whether each was measured with the recipe file this image was built from (its recipe sha256 label).
        "qualifications": [
            {**r.summary(), "recipe_matches_image": r.recipe_sha256 == labels.get(RECIPE_SHA256)} for r in found
        ],
    }
