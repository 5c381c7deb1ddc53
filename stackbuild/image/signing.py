"""Sign a pushed image and its attestations with cosign, in the sigstore format.

:func:`sign_image` runs after the SBOM and the provenance are attached
(stackbuild/image/attest.py): it reads both back from the registry, attaches
them again as in-toto attestations cosign signs (the SBOM as a CycloneDX
predicate, the provenance's SLSA predicate), then signs the image's digest.
:func:`sign_index` signs an index's digest. Signatures and attestations go
where ``cosign verify`` looks: the referrers API, or on a registry without one
the ``sha256-<hex>`` tag's index, beside the plain artifacts.

:func:`signature_record` is what the build report says of it: signed (by
which kind of key, which digests) or unsigned.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

from stackbuild.core.errors import BuildStepFailed
from stackbuild.core.in_toto import CYCLONEDX_PREDICATE
from stackbuild.core.reference import ImageReference
from stackbuild.image.attach import fetch_document
from stackbuild.image.cosign import Signer, first_error_line, registry_args
from stackbuild.image.progress import Progress
from stackbuild.image.provenance import PREDICATE_TYPE, PROVENANCE_MEDIA_TYPE
from stackbuild.image.registry import RegistryClient
from stackbuild.image.sbom import SBOM_MEDIA_TYPE

# cosign's --type for each signed attestation, and the predicate type it writes in the statement. The
# provenance goes by its URI: cosign then keeps the predicate as it is (``slsaprovenance1`` would re-encode
# it through its own SLSA struct and drop what that does not know).
SBOM_ATTESTATION = ("cyclonedx", CYCLONEDX_PREDICATE)
PROVENANCE_ATTESTATION = (PREDICATE_TYPE, PREDICATE_TYPE)
UNSIGNED_NOTE = (
    "no signing key given: the pushed image is unsigned (`--signing-key`, `--signing-key-env` or `--sign-keyless` "
    "signs it)"
)


def _cosign(signer: Signer, client: RegistryClient, args: list[str], what: str) -> None:
    result = signer.cosign.run(
        [*args, *signer.args(), *registry_args(client.plain_http)], passphrase=signer.passphrase()
    )
    if result.returncode != 0:
        raise BuildStepFailed("sign", f"{what}: cosign failed: {first_error_line(result)}")


def sign_image(signer: Signer, client: RegistryClient, digest: str, progress: Progress) -> list[str]:
    """Attest the attached SBOM and provenance of ``repository@digest`` signed, then sign the digest;
    the predicate types signed."""
    reference = str(ImageReference(client.repository, digest=digest))
    sbom, _ = fetch_document(client, digest, SBOM_MEDIA_TYPE, "SBOM")
    statement, _ = fetch_document(client, digest, PROVENANCE_MEDIA_TYPE, "provenance")
    predicates = (
        (SBOM_ATTESTATION, sbom),
        (PROVENANCE_ATTESTATION, json.dumps(json.loads(statement)["predicate"], sort_keys=True).encode()),
    )
    with tempfile.TemporaryDirectory(prefix="stackbuild-sign-") as tmp:
        for number, ((kind, _predicate_type), document) in enumerate(predicates):
            path = Path(tmp) / f"predicate-{number}.json"
            path.write_bytes(document)
            _cosign(signer, client, ["attest", "--type", kind, "--predicate", str(path), reference], reference)
    _cosign(signer, client, ["sign", reference], reference)
    progress.note(f"signed {reference} and its SBOM and provenance attestations (key: {signer.source})")
    return [predicate_type for (_kind, predicate_type), _ in predicates]


def sign_index(signer: Signer, client: RegistryClient, digest: str, progress: Progress) -> None:
    reference = str(ImageReference(client.repository, digest=digest))
    _cosign(signer, client, ["sign", reference], reference)
    progress.note(f"signed the index {reference}")


def signature_record(signer: Optional[Signer], digests: list[str], attestations: list[str]) -> dict:
    """The report's ``signature``: who signed what, or that nothing was."""
    if signer is None:
        return {"signed": False}
    return {
        "signed": True,
        "format": "sigstore (cosign)",
        "key": signer.source,
        "transparency_log": signer.key is None,
        "digests": digests,
        "attestations": attestations,
    }
