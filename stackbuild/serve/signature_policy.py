"""`deploy --signature-key` (or ``--signature-identity`` + ``--signature-issuer``): an admission policy that
refuses a pod running the image's repository unless the image is signed, with its SBOM and provenance
attestations, by that key or identity.

Two admission controllers read it (:class:`PolicyEngine`, ``--signature-policy``):

* Kyverno (the default): a ``kyverno.io/v1`` ClusterPolicy whose rule's ``verifyImages`` is of type
  ``SigstoreBundle`` (the signatures a push writes are sigstore bundles, found through the referrers API or
  its fallback tag) with the key (transparency log and SCT off, as the push signs) or the keyless identity;
* sigstore's policy-controller: a ``policy.sigstore.dev/v1beta1`` ClusterImagePolicy whose authority reads
  bundles (``signatureFormat: bundle``). policy-controller verifies bundles for keyless authorities only
  (pkg/webhook/validator.go, checkOptsFromAuthority), so a key is refused here; it checks the pods of the
  namespaces labelled ``policy.sigstore.dev/include: "true"`` only: with ``--namespace`` the manifests carry
  that Namespace, labelled.

The policy matches every tag and digest of the image's repository (the workload names it by digest) and
records the pinned digest in an annotation. The documents are plain data (pure).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from stackbuild.core.errors import UsageError
from stackbuild.core.in_toto import CYCLONEDX_PREDICATE, SLSA_PROVENANCE_PREDICATE
from stackbuild.core.labels import LABEL_NS, RECIPE_NAME
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import DOCKER_HUB, ImageReference
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.signature_trust import FULCIO_URL, KEY_FLAG, REKOR_URL, SignatureTrust

KYVERNO_API = "kyverno.io/v1"
POLICY_CONTROLLER_API = "policy.sigstore.dev/v1beta1"
INCLUDE_LABEL = "policy.sigstore.dev/include"
DIGEST_ANNOTATION = f"{LABEL_NS}.image.digest"
POLICY_SUFFIX = "-signed-image"
# Kyverno's admission webhook waits this long for the registry's signatures (its default, 10 s, is short).
WEBHOOK_TIMEOUT_S = 30
# The name of each required attestation in a ClusterImagePolicy, by predicate type.
ATTESTATION_NAMES = {CYCLONEDX_PREDICATE: "sbom", SLSA_PROVENANCE_PREDICATE: "provenance"}


class PolicyEngine(enum.Enum):
    KYVERNO = "kyverno"
    POLICY_CONTROLLER = "policy-controller"


DEFAULT_ENGINE = PolicyEngine.KYVERNO


@dataclass(frozen=True)
class SignaturePolicy:
    """The trust a deploy's image must meet and the admission controller that enforces it."""

    trust: SignatureTrust
    engine: PolicyEngine = DEFAULT_ENGINE


def signature_policy(trust: Optional[SignatureTrust], engine: Optional[str]) -> Optional[SignaturePolicy]:
    """The policy of `deploy`'s options (None without a key or identity); refused: an engine alone, or
    policy-controller with a key."""
    if trust is None:
        if engine is not None:
            raise UsageError(f"--signature-policy {engine}: without {KEY_FLAG} or --signature-identity")
        return None
    chosen = PolicyEngine(engine) if engine is not None else DEFAULT_ENGINE
    if chosen is PolicyEngine.POLICY_CONTROLLER and not trust.keyless:
        raise UsageError(
            f"--signature-policy {chosen.value} with {KEY_FLAG}: policy-controller verifies sigstore bundles (what "
            "the push writes) only for keyless authorities; use --signature-policy kyverno for a key"
        )
    return SignaturePolicy(trust, chosen)


def repository_for(image: ImagePin, engine: PolicyEngine) -> str:
    """The repository as the controller spells an image's name: Docker Hub's with its registry in full."""
    reference = ImageReference(image.repository)
    if reference.registry != DOCKER_HUB:
        return image.repository
    host = "index.docker.io" if engine is PolicyEngine.POLICY_CONTROLLER else DOCKER_HUB
    return f"{host}/{reference.remote_name}"


def image_patterns(image: ImagePin, engine: PolicyEngine) -> list[str]:
    """Every tag and every digest of the repository, and nothing of another: policy-controller's ``**`` is
    any text, Kyverno's ``*`` too."""
    repository = repository_for(image, engine)
    anything = "**" if engine is PolicyEngine.POLICY_CONTROLLER else "*"
    return [f"{repository}:{anything}", f"{repository}@{anything}"]


def _metadata(recipe: Recipe, name: str, image: ImagePin) -> dict:
    return {
        "name": name + POLICY_SUFFIX,
        "labels": {RECIPE_NAME: recipe.name},
        "annotations": {DIGEST_ANNOTATION: image.digest or "unpinned"},
    }


def _kyverno_attestor(trust: SignatureTrust) -> dict:
    if trust.key is not None:
        entry = {
            "keys": {
                "publicKeys": trust.key.pem,
                "rekor": {"url": REKOR_URL, "ignoreTlog": True},
                "ctlog": {"ignoreSCT": True},
            }
        }
    else:
        entry = {"keyless": {"subject": trust.identity, "issuer": trust.issuer, "rekor": {"url": REKOR_URL}}}
    return {"entries": [entry]}


def kyverno_policy(recipe: Recipe, name: str, image: ImagePin, trust: SignatureTrust) -> dict:
    attestor = _kyverno_attestor(trust)
    verify = {
        "imageReferences": image_patterns(image, PolicyEngine.KYVERNO),
        "type": "SigstoreBundle",
        "failureAction": "Enforce",
        "required": True,
        "verifyDigest": True,
        "mutateDigest": True,
        "attestors": [attestor],
        "attestations": [{"type": predicate, "attestors": [attestor]} for predicate in trust.attestations],
    }
    rule = {"name": "signed-image", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "verifyImages": [verify]}
    return {
        "apiVersion": KYVERNO_API,
        "kind": "ClusterPolicy",
        "metadata": _metadata(recipe, name, image),
        "spec": {"background": False, "webhookConfiguration": {"timeoutSeconds": WEBHOOK_TIMEOUT_S}, "rules": [rule]},
    }


def cluster_image_policy(recipe: Recipe, name: str, image: ImagePin, trust: SignatureTrust) -> dict:
    authority = {
        "name": "signer",
        "keyless": {"url": FULCIO_URL, "identities": [{"issuer": trust.issuer, "subject": trust.identity}]},
        "ctlog": {"url": REKOR_URL},
        "signatureFormat": "bundle",
        "attestations": [
            {"name": ATTESTATION_NAMES.get(predicate, f"attestation-{number}"), "predicateType": predicate}
            for number, predicate in enumerate(trust.attestations)
        ],
    }
    return {
        "apiVersion": POLICY_CONTROLLER_API,
        "kind": "ClusterImagePolicy",
        "metadata": _metadata(recipe, name, image),
        "spec": {
            "images": [{"glob": glob} for glob in image_patterns(image, PolicyEngine.POLICY_CONTROLLER)],
            "authorities": [authority],
            "mode": "enforce",
        },
    }


def policy_documents(
    recipe: Recipe, name: str, image: ImagePin, policy: SignaturePolicy, namespace: Optional[str]
) -> list[dict]:
    """The objects written before the workload: the labelled Namespace (policy-controller, --namespace) and
    the policy."""
    if policy.engine is PolicyEngine.KYVERNO:
        return [kyverno_policy(recipe, name, image, policy.trust)]
    labelled = []
    if namespace:
        labelled.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {INCLUDE_LABEL: "true"}},
            }
        )
    return [*labelled, cluster_image_policy(recipe, name, image, policy.trust)]


def header_lines(policy: SignaturePolicy, namespace: Optional[str]) -> list[str]:
    """The manifests' comment lines on the policy: what it requires, what must be installed."""
    lines = [
        f"# Signature policy ({policy.engine.value}): pods running this repository are admitted only when the image "
        f"is signed, with its SBOM and provenance attestations, by {policy.trust.describe}."
    ]
    if policy.engine is PolicyEngine.KYVERNO:
        lines.append(
            "#   Needs Kyverno (kyverno.io/v1 ClusterPolicy, verifyImages) installed; apply as a cluster admin."
        )
    else:
        lines.append(
            "#   Needs sigstore's policy-controller (policy.sigstore.dev/v1beta1) installed; it checks namespaces "
            f"labelled {INCLUDE_LABEL}=true only"
            + (f" (the Namespace {namespace} below is)." if namespace else ": label yours (kubectl label namespace).")
        )
    return lines
