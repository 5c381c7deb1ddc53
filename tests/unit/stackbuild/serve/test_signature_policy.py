"""`deploy --signature-key` / `--signature-identity`: the admission policy documents, held to the controllers'
own CRD schemas (tests/unit/stackbuild/serve/crd_schemas/, strict as `kubectl apply` is), to the rules of their
webhooks the policy depends on (which images a pattern matches: policy-controller's glob.go and Kyverno's
wildcards, reimplemented here from their sources), and to what the push signs.

What the push signs (hand-written, as tests/e2e/image/test_signing_e2e.py checks stock cosign finds it): the
image's signature and two in-toto attestations, predicate types https://cyclonedx.org/bom and
https://slsa.dev/provenance/v1, with a key and the transparency log off, as sigstore bundles.
"""

from __future__ import annotations

import copy
import fnmatch
import re

import pytest
from crd_schema_support import errors
from key_pairs import cosign_pair
from support.repo import REPO

from stackbuild.core.errors import UsageError
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.k8s_validate import validate
from stackbuild.serve.signature_policy import (
    PolicyEngine,
    SignaturePolicy,
    header_lines,
    image_patterns,
    policy_documents,
    signature_policy,
)
from stackbuild.serve.signature_trust import signature_trust

SINGLE = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
DIGEST = "sha256:" + "5e" * 32
REPOSITORY = "ghcr.io/someone/glm53-flash-dflash2-gb300"
IMAGE = ImagePin(REPOSITORY, "sm100-gb300-20261205-xabc", DIGEST, "--digest")
SIGNED_PREDICATES = ["https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"]
IDENTITY = "https://github.com/someone/glm53-dflash2-images/.github/workflows/image.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


@pytest.fixture(scope="module")
def public_key(cosign, tmp_path_factory):
    return cosign_pair(cosign, tmp_path_factory.mktemp("keys"))[1]


def documents(engine: PolicyEngine, trust, namespace=None) -> list[dict]:
    return policy_documents(load_recipe(SINGLE), "glm53", IMAGE, SignaturePolicy(trust, engine), namespace)


def kyverno_key(public_key) -> dict:
    (policy,) = documents(PolicyEngine.KYVERNO, signature_trust(public_key, None, None))
    return policy


def policy_controller(namespace=None) -> list[dict]:
    return documents(PolicyEngine.POLICY_CONTROLLER, signature_trust(None, IDENTITY, ISSUER), namespace)


def kyverno_webhook_refusals(policy: dict) -> list[str]:
    """Kyverno's own checks of a verifyImages rule (api/kyverno/v1/image_verification_types.go, Validate),
    the ones the CRD schema does not hold."""
    found = []
    for verify in policy["spec"]["rules"][0]["verifyImages"]:
        if verify.get("failureAction") == "Audit" and verify.get("mutateDigest", True):
            found.append("mutateDigest must be set to false for 'Audit' failure action")
        if not verify.get("imageReferences"):
            found.append("An image reference is required")
        sets = [*verify.get("attestors", []), *(s for a in verify.get("attestations", []) for s in a["attestors"])]
        for attestor_set in sets:
            if not attestor_set.get("entries"):
                found.append("An entry is required")
            for entry in attestor_set.get("entries", []):
                kinds = [k for k in ("keys", "certificates", "keyless", "attestor") if k in entry]
                if len(kinds) != 1:
                    found.append("keys, certificates, keyless, or a nested attestor is required")
                if "keys" in entry and not entry["keys"].get("publicKeys"):
                    found.append("A public key, kms key or secret is required")
                keyless = entry.get("keyless", {})
                if "keyless" in entry and not (keyless.get("rekor", {}).get("url") or keyless.get("roots")):
                    found.append("Either Rekor URL or roots are required")
    return found


def test_kyverno_with_the_key_fits_its_schema_and_requires_what_the_push_signs(public_key):
    policy = kyverno_key(public_key)
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    assert errors(policy) == [] and kyverno_webhook_refusals(policy) == []
    assert kyverno_webhook_refusals(_edit(policy, "spec.rules.0.verifyImages.0.failureAction", "Audit"))
    (rule,) = policy["spec"]["rules"]
    assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod"]}}]}
    (verify,) = rule["verifyImages"]
    assert verify["type"] == "SigstoreBundle"  # the push's signatures are bundles (referrers), not .sig tags
    assert (verify["failureAction"], verify["required"], verify["verifyDigest"]) == ("Enforce", True, True)
    keys = verify["attestors"][0]["entries"][0]["keys"]
    assert keys["publicKeys"] == public_key.read_text()
    assert keys["rekor"]["ignoreTlog"] is True and keys["ctlog"]["ignoreSCT"] is True  # signed with the log off
    assert [a["type"] for a in verify["attestations"]] == SIGNED_PREDICATES
    assert all(a["attestors"] == verify["attestors"] for a in verify["attestations"])
    assert policy["metadata"]["annotations"] == {"io.github.glm53.image.digest": DIGEST}


def test_kyverno_keyless_names_the_identity_and_issuer():
    (policy,) = documents(PolicyEngine.KYVERNO, signature_trust(None, IDENTITY, ISSUER))
    assert errors(policy) == [] and kyverno_webhook_refusals(policy) == []
    entry = policy["spec"]["rules"][0]["verifyImages"][0]["attestors"][0]["entries"][0]
    assert entry == {"keyless": {"subject": IDENTITY, "issuer": ISSUER, "rekor": {"url": "https://rekor.sigstore.dev"}}}


def test_policy_controller_keyless_fits_its_schema_and_its_webhooks_rules():
    (policy,) = policy_controller()
    assert (policy["apiVersion"], policy["kind"]) == ("policy.sigstore.dev/v1beta1", "ClusterImagePolicy")
    assert errors(policy) == []
    spec = policy["spec"]
    assert spec["mode"] == "enforce"
    (authority,) = spec["authorities"]
    # clusterimagepolicy_validation.go: one of key, keyless, static; keyless needs url or ca-cert, and identities.
    assert [k for k in ("key", "keyless", "static") if k in authority] == ["keyless"]
    assert authority["keyless"]["url"] and authority["keyless"]["identities"] == [
        {"issuer": ISSUER, "subject": IDENTITY}
    ]
    assert authority["signatureFormat"] == "bundle"  # validator.go: the bundle verifier, keyless only
    # Attestation.Validate: a name and a predicate type, an RFC 3986 URI (no deprecated short form).
    assert [(a["name"], a["predicateType"]) for a in authority["attestations"]] == [
        ("sbom", SIGNED_PREDICATES[0]),
        ("provenance", SIGNED_PREDICATES[1]),
    ]


def test_policy_controller_with_a_namespace_labels_it_first():
    namespace, policy = policy_controller("serving")
    assert namespace == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "serving", "labels": {"policy.sigstore.dev/include": "true"}},
    }
    assert validate([namespace], "test") == ["Namespace: Kubernetes 1.33.0"]
    assert policy["kind"] == "ClusterImagePolicy"
    assert (
        "Namespace serving below"
        in header_lines(
            SignaturePolicy(signature_trust(None, IDENTITY, ISSUER), PolicyEngine.POLICY_CONTROLLER), "serving"
        )[1]
    )


def _edit(document: dict, path: str, value) -> dict:
    """A copy of ``document`` with ``value`` set at ``path`` (dots, list indices as numbers)."""
    edited = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = edited
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value
    return edited


KYVERNO_FAULTS = [
    ("spec.rules.0.verifyImages.0.attestor", [], "'attestor' was unexpected"),
    ("spec.rules.0.verifyImages.0.failureAction", "Deny", "'Deny' is not one of ['Audit', 'Enforce']"),
    ("spec.rules.0.verifyImages.0.required", "yes", "'yes' is not of type 'boolean'"),
    ("spec.rules.0.verifyImages.0.attestations.0.predicate", "x", "'predicate' was unexpected"),
    ("spec.rules.0.verifyImages.0.attestors.0.entries.0.keys.rekor.ignoreTLog", True, "'ignoreTLog' was unexpected"),
    ("spec.rules.0.verifyImages.0.type", "Sigstore", "'Sigstore' is not one of"),
    ("spec.webhookConfiguration.timeout", 30, "'timeout' was unexpected"),
    ("metadata.annotation", {}, "'annotation' was unexpected"),
]


@pytest.mark.parametrize(("path", "value", "message"), KYVERNO_FAULTS, ids=[f[0] for f in KYVERNO_FAULTS])
def test_a_planted_fault_in_the_kyverno_policy_is_refused(public_key, path, value, message):
    found = errors(_edit(kyverno_key(public_key), path, value))
    assert found and any(message in e for e in found), found


CIP_FAULTS = [
    ("spec.authorities.0.keyless.identity", [], "'identity' was unexpected"),
    ("spec.images.0.pattern", "x", "'pattern' was unexpected"),
    ("spec.mode", 5, "5 is not of type 'string'"),
    ("spec.authorities.0.attestations.0.predicate", "x", "'predicate' was unexpected"),
    ("spec.authorities.0.ctlog.url", ["x"], "is not of type 'string'"),
]


@pytest.mark.parametrize(("path", "value", "message"), CIP_FAULTS, ids=[f[0] for f in CIP_FAULTS])
def test_a_planted_fault_in_the_cluster_image_policy_is_refused(path, value, message):
    (policy,) = policy_controller()
    found = errors(_edit(policy, path, value))
    assert found and any(message in e for e in found), found


# policy-controller pkg/apis/glob/glob.go: the characters a glob may hold, and its translation to a regexp.
GLOB_CHARACTERS = re.compile(r"^[a-zA-Z0-9-_:\/\*\.@]+$")


def policy_controller_matches(glob: str, name: str) -> bool:
    assert GLOB_CHARACTERS.match(glob), glob
    pattern = glob.replace(".", r"\.").replace("**", "#").replace("*", "[^/]*").replace("#", ".*")
    return re.match(f"^{pattern}$", name) is not None


def test_the_patterns_match_every_tag_and_digest_of_the_repository_and_nothing_else():
    # What each controller compares: go-containerregistry's Name() of repository:tag@digest is repository@digest.
    ours = [f"{REPOSITORY}@{DIGEST}", f"{REPOSITORY}:latest", f"{REPOSITORY}@sha256:{'0' * 64}"]
    others = [f"{REPOSITORY}-evil@{DIGEST}", f"{REPOSITORY}/sub:latest", f"ghcr.io/else/glm53@{DIGEST}"]
    globs = image_patterns(IMAGE, PolicyEngine.POLICY_CONTROLLER)
    wildcards = image_patterns(IMAGE, PolicyEngine.KYVERNO)
    for name in ours:
        assert any(policy_controller_matches(g, name) for g in globs), name
        assert any(fnmatch.fnmatchcase(name, w) for w in wildcards), name  # Kyverno's `*`: any text
    for name in others:
        assert not any(policy_controller_matches(g, name) for g in globs), name
        assert not any(fnmatch.fnmatchcase(name, w) for w in wildcards), name


def test_a_docker_hub_repository_is_spelled_as_each_controller_names_it():
    hub = ImagePin("docker.io/someone/glm53", "t", DIGEST, "--digest")
    assert image_patterns(hub, PolicyEngine.POLICY_CONTROLLER)[1] == "index.docker.io/someone/glm53@**"
    assert image_patterns(hub, PolicyEngine.KYVERNO)[1] == "docker.io/someone/glm53@*"


def test_the_options_that_cannot_make_a_policy_are_refused(public_key):
    with pytest.raises(UsageError, match="only for keyless authorities; use --signature-policy kyverno"):
        signature_policy(signature_trust(public_key, None, None), "policy-controller")
    with pytest.raises(UsageError, match="without --signature-key or --signature-identity"):
        signature_policy(None, "kyverno")
    assert signature_policy(None, None) is None
    assert signature_policy(signature_trust(public_key, None, None), None).engine is PolicyEngine.KYVERNO
