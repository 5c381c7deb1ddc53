"""What a serving file requires of its image's signature (:class:`SignatureTrust`): a cosign public key (its PEM,
read and checked from the file given) or a keyless certificate identity and its OIDC issuer, and the signed
attestations a signed push attaches (the SBOM and the provenance predicates, stackbuild/core/in_toto.py).

`deploy` writes it as an admission policy (signature_policy.py), `compose` into the compose file for
`build.py up` (compose_signature.py); the options are `verify`'s ways to trust, spelled
``--signature-key`` / ``--signature-identity`` + ``--signature-issuer`` (stackbuild/cli/signing_options.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stackbuild.core.errors import UsageError
from stackbuild.core.in_toto import SIGNED_PREDICATES
from stackbuild.core.public_key import PublicKey, read_public_key
from stackbuild.serve.image_pin import ImagePin

KEY_FLAG = "--signature-key"
IDENTITY_FLAG = "--signature-identity"
ISSUER_FLAG = "--signature-issuer"
# Public sigstore: the certificate authority and the transparency log keyless signatures are checked against.
FULCIO_URL = "https://fulcio.sigstore.dev"
REKOR_URL = "https://rekor.sigstore.dev"


@dataclass(frozen=True)
class SignatureTrust:
    """A public key (signed with the transparency log off, as `push --signing-key` signs), or a keyless identity
    and issuer (as the workflow signs); the attestation predicate types that must be signed too."""

    key: Optional[PublicKey] = None
    identity: Optional[str] = None
    issuer: Optional[str] = None
    attestations: tuple[str, ...] = SIGNED_PREDICATES

    @property
    def keyless(self) -> bool:
        return self.key is None

    @property
    def describe(self) -> str:
        if self.key is not None:
            return self.key.describe
        return f"identity {self.identity} ({self.issuer})"


def signature_trust(key: Optional[Path], identity: Optional[str], issuer: Optional[str]) -> Optional[SignatureTrust]:
    """The trust the options name, or None when none is given; UsageError for a mix, PublicKeyInvalid for a key
    file that is not a public key."""
    if key is None and identity is None and issuer is None:
        return None
    if key is not None and (identity or issuer):
        raise UsageError(f"{KEY_FLAG} and {IDENTITY_FLAG}/{ISSUER_FLAG}: give one way to trust")
    if key is None and not (identity and issuer):
        raise UsageError(f"{IDENTITY_FLAG} and {ISSUER_FLAG} go together")
    if key is not None:
        return SignatureTrust(key=read_public_key(key, KEY_FLAG))
    return SignatureTrust(identity=identity, issuer=issuer)


def require_pinned(image: ImagePin, command: str) -> None:
    """A signature is checked for one digest: refuse an image the file would name by tag alone, or whose owner
    is left to the environment (the repository the policy names must be known)."""
    if image.owner_from_env:
        raise UsageError(
            f"{command} {KEY_FLAG}/{IDENTITY_FLAG}: no image owner given (--owner) or found in a build report; "
            "a signature policy names the image's repository in full"
        )
    if not image.digest:
        raise UsageError(
            f"{command} {KEY_FLAG}/{IDENTITY_FLAG}: the image is not pinned by digest ({image.unpinned_because}); "
            "a signature is checked for one digest: pass --digest or push first"
        )
