"""The in-toto Statement (v1) every attestation of this project is: its type and its media type; the predicate
types of the attestations a signed push signs (stackbuild/image/signing.py), which a deploy's signature policy
requires (stackbuild/serve/signature_policy.py)."""

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MEDIA_TYPE = "application/vnd.in-toto+json"

# The SBOM (CycloneDX) and the provenance (SLSA v1) predicates, as the signed attestations name them.
CYCLONEDX_PREDICATE = "https://cyclonedx.org/bom"
SLSA_PROVENANCE_PREDICATE = "https://slsa.dev/provenance/v1"
SIGNED_PREDICATES = (CYCLONEDX_PREDICATE, SLSA_PROVENANCE_PREDICATE)
