"""`build.py deploy --target k8s --signature-key` / `--signature-identity`: the policy comes first in the file,
held to its controller's CRD schema, the workload after it unchanged; refusals are one line, nothing written."""

from __future__ import annotations

import yaml
from bad_input_helpers import assert_refused, invoke
from crd_schema_support import errors
from key_pairs import cosign_pair
from support.repo import REPO

from stackbuild.serve.k8s_validate import validate

SINGLE = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
DIGEST = "sha256:" + "5e" * 32
IDENTITY = "https://github.com/someone/glm53-dflash2-images/.github/workflows/image.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


def deploy(tmp_path, *args):
    return invoke(
        ["deploy", "--target", "k8s", "--recipe", SINGLE, "-o", tmp_path, "--owner", "someone", *args],
        GLM53_ORACLE_PYTHON=None,
    )


def written(tmp_path) -> tuple[str, list[dict]]:
    (path,) = tmp_path.glob("*.k8s.yaml")
    text = path.read_text()
    return text, list(yaml.safe_load_all(text))


def test_a_key_writes_kyvernos_policy_before_the_workload(cosign, tmp_path):
    _private, public = cosign_pair(cosign, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = deploy(out, "--digest", DIGEST, "--signature-key", public, "--json")
    assert result.exit_code == 0, result.stderr
    text, documents = written(out)
    assert [d["kind"] for d in documents if d] == ["ClusterPolicy", "Deployment", "Service"]
    policy = documents[1] if documents[0] is None else documents[0]
    assert errors(policy) == []
    assert policy["spec"]["rules"][0]["verifyImages"][0]["attestors"][0]["entries"][0]["keys"]["publicKeys"] == (
        public.read_text()
    )
    assert "# Signature policy (kyverno): pods running this repository are admitted only when" in text
    workload = next(d for d in documents if d and d["kind"] == "Deployment")
    assert workload["spec"]["template"]["spec"]["containers"][0]["image"].endswith("@" + DIGEST)
    assert validate([workload], "test") == ["Deployment: Kubernetes 1.33.0"]


def test_keyless_for_policy_controller_labels_the_namespace(tmp_path):
    result = deploy(
        tmp_path, "--digest", DIGEST, "--namespace", "serving", "--signature-identity", IDENTITY,
        "--signature-issuer", ISSUER, "--signature-policy", "policy-controller",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    _text, documents = written(tmp_path)
    documents = [d for d in documents if d]
    assert [d["kind"] for d in documents] == ["Namespace", "ClusterImagePolicy", "Deployment", "Service"]
    assert documents[0]["metadata"]["labels"] == {"policy.sigstore.dev/include": "true"}
    assert errors(documents[1]) == []
    assert {d["metadata"].get("namespace") for d in documents[2:]} == {"serving"}


def test_a_key_file_that_is_not_a_public_key_exits_46_and_writes_nothing(cosign, tmp_path):
    private, _public = cosign_pair(cosign, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    refused = deploy(out, "--digest", DIGEST, "--signature-key", private)
    assert refused.exit_code == 46
    assert_refused(refused, 46, f"--signature-key {private}: holds a private key")
    absent = deploy(out, "--digest", DIGEST, "--signature-key", tmp_path / "absent.pub")
    assert absent.exit_code == 46
    assert_refused(absent, 46, "cannot read the public key")
    assert list(out.iterdir()) == []


def test_options_that_make_no_policy_are_usage_errors(cosign, tmp_path):
    _private, public = cosign_pair(cosign, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cases = [
        (["--digest", DIGEST, "--signature-key", public, "--signature-identity", IDENTITY], "give one way to trust"),
        (["--digest", DIGEST, "--signature-identity", IDENTITY], "go together"),
        (["--digest", DIGEST, "--signature-policy", "kyverno"], "without --signature-key"),
        (
            ["--digest", DIGEST, "--signature-key", public, "--signature-policy", "policy-controller"],
            "only for keyless authorities",
        ),
        (["--signature-key", public], "not pinned by digest"),
    ]
    for args, needle in cases:
        result = deploy(out, *args)
        assert result.exit_code == 2
        assert_refused(result, 2, needle)
    assert list(out.iterdir()) == []
