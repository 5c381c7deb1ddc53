"""`build.py up -f FILE`: nothing is asked of cosign, the engine or Compose before the file's signature policy
is read and usable, then nothing of Compose before cosign is found and the engine answers; each refusal one
line with its code. (The signature check itself and the start after it: tests/e2e/serve/test_signed_up_e2e.py.)

The engine is a dead socket (bad_input_helpers.invoke); Compose is a stub that records being run, which no
refusal here may reach.
"""

from __future__ import annotations

import yaml
from bad_input_helpers import assert_refused, invoke
from key_pairs import cosign_pair

DIGEST = "sha256:" + "5e" * 32
ATTESTATIONS = ["https://cyclonedx.org/bom", "https://slsa.dev/provenance/v1"]


def signed_file(tmp_path, policy, image=f"127.0.0.1:5000/glm53/flash:t@{DIGEST}"):
    path = tmp_path / "f.compose.yaml"
    document = {"name": "x", "services": {"vllm": {"image": image}}}
    if policy is not None:
        document["x-signature-policy"] = policy
    path.write_text(yaml.safe_dump(document))
    return path


def compose_stub(tmp_path):
    ran = tmp_path / "compose-ran"
    stub = tmp_path / "docker-compose"
    stub.write_text(f'#!/bin/sh\necho "$@" > {ran}\n')
    stub.chmod(0o755)
    return stub, ran


def up(path, tmp_path, *args, **env):
    stub, ran = compose_stub(tmp_path)
    result = invoke(["up", "-f", path, *args], GLM53_COMPOSE_BIN=str(stub), **env)
    assert not ran.exists(), "Compose ran though the check refused"
    return result


def test_a_file_without_a_usable_policy_is_refused_first(tmp_path):
    plain = up(signed_file(tmp_path, None), tmp_path, STACKBUILD_COSIGN=None, PATH=str(tmp_path))
    assert plain.exit_code == 2
    assert_refused(plain, 2, "no x-signature-policy in the file", "compose --signature-key PUB")
    edited = up(signed_file(tmp_path, {"key": "x", "attestations": ATTESTATIONS}), tmp_path, PATH=str(tmp_path))
    assert edited.exit_code == 46
    assert_refused(edited, 46, "x-signature-policy.key: no PEM block")
    policy = {"identity": "https://github.com/o/r/.github/workflows/image.yml@refs/heads/main", "issuer": "x"}
    tag_only = up(signed_file(tmp_path, {**policy, "attestations": []}, image="127.0.0.1:5000/glm53/flash:t"), tmp_path)
    assert tag_only.exit_code == 2
    assert_refused(tag_only, 2, "is not pinned by digest")
    absent = up(tmp_path / "absent.compose.yaml", tmp_path)
    assert absent.exit_code == 2
    assert_refused(absent, 2, "cannot read a compose file")


def test_no_cosign_then_no_engine_refuse_before_compose(cosign, tmp_path):
    _private, public = cosign_pair(cosign, tmp_path)
    path = signed_file(tmp_path, {"key": public.read_text(), "attestations": ATTESTATIONS})
    no_cosign = up(path, tmp_path, STACKBUILD_COSIGN=None, PATH=str(tmp_path))
    assert no_cosign.exit_code == 40
    assert_refused(no_cosign, 40, "checking the signature needs cosign")
    no_engine = up(path, tmp_path, "--cosign", cosign)
    assert no_engine.exit_code == 3
    assert_refused(no_engine, 3)
