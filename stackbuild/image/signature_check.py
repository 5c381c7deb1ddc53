"""Check an image's signatures and signed attestations before `verify` reads anything else of it.

:func:`check_signatures` (``verify --key`` or ``--certificate-identity``) refuses,
each with its own exception and exit code:

* :class:`TagMoved`: a tag given beside the digest names another digest now;
* :class:`Unsigned`: no signature refers to the digest (the index's, or a platform image's);
* :class:`SignatureInvalid`: signatures are there, none verifies with the key or identity;
* :class:`AttestationTampered`: the signed SBOM or provenance attestation is missing, does not
  verify, or its statement names another subject; or the provenance attached beside it is not
  the signed one;
* :class:`SbomMismatch`: the SBOM attached beside it is not the signed one.

cosign does the cryptography (``cosign verify``, ``cosign verify-attestation``);
this module reads what it verified: the statements' subjects and predicates.
The plain SBOM and provenance that `verify` then compares with the image are
therefore the signed ones.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Optional

from stackbuild.core.errors import (
    AttestationTampered,
    SbomMismatch,
    SignatureInvalid,
    TagMoved,
    Unsigned,
    VerifyError,
)
from stackbuild.core.reference import ImageReference
from stackbuild.image.attach import fetch_document
from stackbuild.image.cosign import Cosign, TrustPolicy, first_error_line, registry_args
from stackbuild.image.index import index_platforms
from stackbuild.image.progress import Progress
from stackbuild.image.provenance import PROVENANCE_MEDIA_TYPE
from stackbuild.image.registry import RegistryClient
from stackbuild.image.sbom import SBOM_MEDIA_TYPE
from stackbuild.image.signing import PROVENANCE_ATTESTATION, SBOM_ATTESTATION

NO_SIGNATURES = "no signatures found"


def check_tag(client: RegistryClient, tag: Optional[str], digest: str) -> None:
    if tag is None:
        return
    held = client.manifest(tag)
    if held is None or held.digest != digest:
        raise TagMoved(
            f"{ImageReference(client.repository, tag=tag)}: the tag names "
            f"{held.digest if held else 'nothing'}, not {digest}; the tag was moved (or removed)"
        )


def check_signatures(
    cosign: Cosign, policy: TrustPolicy, client: RegistryClient, tag: Optional[str], digest: str, progress: Progress
) -> dict:
    """The tag, the digest's signature, and for each image (the index's platforms, or the image itself) its
    signature and signed attestations; what was checked."""
    with progress.phase("signatures", f"{ImageReference(client.repository, digest=digest)} ({policy.describe})"):
        check_tag(client, tag, digest)
        _signature(cosign, policy, client, digest)
        top = client.manifest(digest)
        images = list(index_platforms(top.document).values()) if top and "manifests" in top.document else [digest]
        for image in images:
            if image != digest:
                _signature(cosign, policy, client, image)
            _attestations(cosign, policy, client, image)
    return {"signed": True, "trusted": policy.describe, "digests": [digest, *[i for i in images if i != digest]]}


def _run(cosign: Cosign, policy: TrustPolicy, client: RegistryClient, args: list[str], digest: str):
    reference = str(ImageReference(client.repository, digest=digest))
    return cosign.run([*args, *policy.args(), *registry_args(client.plain_http), "--output", "json", reference])


def _signature(cosign: Cosign, policy: TrustPolicy, client: RegistryClient, digest: str) -> None:
    reference = ImageReference(client.repository, digest=digest)
    result = _run(cosign, policy, client, ["verify"], digest)
    if result.returncode == 0:
        return
    reason = first_error_line(result)
    if NO_SIGNATURES in reason:
        raise Unsigned(f"{reference}: not signed ({reason})")
    raise SignatureInvalid(f"{reference}: no signature verifies with {policy.describe} ({reason})")


def statements(stdout: str) -> list[dict]:
    """The in-toto statements in verify-attestation's output (one DSSE envelope per line); unreadable lines skipped."""
    out = []
    for line in stdout.splitlines():
        try:
            envelope = json.loads(line)
            statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
        except (ValueError, KeyError, TypeError, binascii.Error):
            continue
        if isinstance(statement, dict):
            out.append(statement)
    return out


def _attestations(cosign: Cosign, policy: TrustPolicy, client: RegistryClient, digest: str) -> None:
    reference = ImageReference(client.repository, digest=digest)
    signed: dict[str, list] = {}
    for kind, predicate_type in (SBOM_ATTESTATION, PROVENANCE_ATTESTATION):
        result = _run(cosign, policy, client, ["verify-attestation", "--type", kind], digest)
        if result.returncode != 0:
            raise AttestationTampered(
                f"{reference}: no {kind} attestation verifies with {policy.describe} ({first_error_line(result)})"
            )
        found = [s for s in statements(result.stdout) if s.get("predicateType") == predicate_type]
        for statement in found:
            subjects = [(s.get("digest") or {}).get("sha256") for s in statement.get("subject") or []]
            if digest.removeprefix("sha256:") not in subjects:
                raise AttestationTampered(
                    f"{reference}: a signed {kind} attestation names the subject {subjects}, not {digest}"
                )
        if not found:
            raise AttestationTampered(f"{reference}: cosign verified no {predicate_type} statement")
        signed[kind] = [s.get("predicate") for s in found]
    sbom = _attached(client, digest, SBOM_MEDIA_TYPE, "SBOM", SbomMismatch)
    if sbom not in signed[SBOM_ATTESTATION[0]]:
        raise SbomMismatch(f"{reference}: the attached SBOM is not the signed one (replaced or edited after signing)")
    statement = _attached(client, digest, PROVENANCE_MEDIA_TYPE, "provenance", AttestationTampered)
    if (statement or {}).get("predicate") not in signed[PROVENANCE_ATTESTATION[0]]:
        raise AttestationTampered(f"{reference}: the attached provenance is not the signed one")


def _attached(client: RegistryClient, digest: str, artifact_type: str, what: str, error: type) -> Optional[dict]:
    """The attached document, parsed; ``error`` when it is missing or unreadable."""
    try:
        raw, _ = fetch_document(client, digest, artifact_type, what)
        return json.loads(raw)
    except VerifyError as exc:
        raise error(str(exc)) from None
    except ValueError:
        raise error(f"{ImageReference(client.repository, digest=digest)}: the attached {what} is not JSON") from None
