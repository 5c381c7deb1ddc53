"""`compose --signature-key` / `--signature-identity`: the file carries its signature policy for `build.py up`
(x-signature-policy, read back by read_signed_file), real Docker Compose reads the file and its label, and
what cannot be checked is refused before anything is written."""

from __future__ import annotations

import pytest
import yaml
from bad_input_helpers import assert_refused, invoke
from key_pairs import cosign_pair, der_sha256
from support.repo import REPO

from stackbuild.core.errors import PublicKeyInvalid, UsageError
from stackbuild.core.recipe import load_recipe
from stackbuild.core.reference import ImageReference
from stackbuild.core.serve_args import role_commands
from stackbuild.serve.compose_signature import read_signed_file
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.multinode import target_role_text
from stackbuild.serve.signature_trust import signature_trust
from stackbuild.serve.target import ServeTarget
from stackbuild.serve.validate import compose_config

SINGLE = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
MULTI = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
DIGEST = "sha256:" + "5e" * 32
LABEL = "io.github.glm53.signature.verified"
IDENTITY = "https://github.com/someone/glm53-dflash2-images/.github/workflows/image.yml@refs/heads/main"
ISSUER = "https://token.actions.githubusercontent.com"


@pytest.fixture(scope="module")
def keys(cosign, tmp_path_factory):
    return cosign_pair(cosign, tmp_path_factory.mktemp("keys"))


def compose(tmp_path, *args):
    return invoke(
        ["compose", "--recipe", SINGLE, "-o", tmp_path / "signed.compose.yaml", "--owner", "someone", *args],
        GLM53_ORACLE_PYTHON=None,
    )


def test_the_file_carries_the_key_and_compose_reads_the_verified_label(keys, tmp_path):
    _private, public = keys
    result = compose(tmp_path, "--digest", DIGEST, "--signature-key", public)
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "signed.compose.yaml"
    text = path.read_text()
    assert "\n# Start: python build.py up -f <this file>   (needs the NVIDIA container toolkit)\n" in text
    fingerprint = der_sha256(public)[:16]
    assert f"\n#   Signed image required (ECDSA P-256 key sha256:{fingerprint}): `build.py up` checks" in text
    assert "docker compose -f <this file> up" not in text
    document = yaml.safe_load(text)
    assert document["x-signature-policy"] == {
        "key": public.read_text(),
        "attestations": ["https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"],
    }
    # Real Compose: the extension is accepted, the label says what `up` verified, else "unverified".
    for variables, expected in (({}, "unverified"), ({"STACKBUILD_SIGNATURE_VERIFIED": "sha256:ab (key)"}, None)):
        config = compose_config(path, extra=["--format", "json"], variables=variables)
        assert config.returncode == 0, config.stderr
        labels = yaml.safe_load(config.stdout)["services"]["vllm"]["labels"]
        assert labels[LABEL] == (expected or variables["STACKBUILD_SIGNATURE_VERIFIED"])
    signed = read_signed_file(path)
    assert signed.trust.key.pem == public.read_text() and signed.trust.key.kind == "ECDSA P-256"
    (image,) = signed.images
    assert (image.repository, image.digest) == ("ghcr.io/someone/glm53-flash-dflash2-gb300", DIGEST)


def test_each_node_roles_file_carries_the_keyless_identity():
    recipe = load_recipe(MULTI)
    image = ImagePin("ghcr.io/someone/glm53-flash-dflash2-2x-gb10", "t", DIGEST, "--digest")
    target = ServeTarget(recipe, image, signature=signature_trust(None, IDENTITY, ISSUER))
    for command in role_commands(recipe):
        text = target_role_text(target, command)
        assert f"# Start: python build.py up -f <this file>   (on the {command.role} machine;" in text
        document = yaml.safe_load(text)
        assert document["x-signature-policy"]["identity"] == IDENTITY
        assert document["x-signature-policy"]["issuer"] == ISSUER
        (service,) = document["services"].values()
        assert service["labels"][LABEL] == "${STACKBUILD_SIGNATURE_VERIFIED:-unverified}"


def test_what_cannot_be_checked_is_refused_before_writing(keys, tmp_path):
    private, public = keys
    unpinned = compose(tmp_path, "--signature-key", public)
    assert unpinned.exit_code == 2
    assert_refused(unpinned, 2, "compose --signature-key/--signature-identity: the image is not pinned by digest")
    not_public = compose(tmp_path, "--digest", DIGEST, "--signature-key", private)
    assert not_public.exit_code == 46
    assert_refused(not_public, 46, "holds a private key")
    assert not (tmp_path / "signed.compose.yaml").exists()


def _signed_file(tmp_path, policy, image=f"ghcr.io/someone/x:t@{DIGEST}"):
    path = tmp_path / "f.compose.yaml"
    document = {"name": "x", "services": {"vllm": {"image": image}}}
    if policy is not None:
        document["x-signature-policy"] = policy
    path.write_text(yaml.safe_dump(document))
    return path


def test_reading_back_refuses_a_file_up_cannot_check(keys, tmp_path):
    _private, public = keys
    attestations = ["https://cyclonedx.org/bom"]
    with pytest.raises(UsageError, match="no x-signature-policy in the file"):
        read_signed_file(_signed_file(tmp_path, None))
    with pytest.raises(PublicKeyInvalid, match=r"x-signature-policy\.key: no PEM block"):
        read_signed_file(_signed_file(tmp_path, {"key": "edited", "attestations": attestations}))
    with pytest.raises(UsageError, match="neither a key nor an identity and issuer"):
        read_signed_file(_signed_file(tmp_path, {"identity": IDENTITY, "attestations": attestations}))
    good = {"key": public.read_text(), "attestations": attestations}
    with pytest.raises(UsageError, match="service vllm's image 'ghcr.io/someone/x:t' is not pinned by digest"):
        read_signed_file(_signed_file(tmp_path, good, image="ghcr.io/someone/x:t"))
    assert read_signed_file(_signed_file(tmp_path, good)).images == (ImageReference("ghcr.io/someone/x", "t", DIGEST),)
