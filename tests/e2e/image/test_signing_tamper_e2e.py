"""Property: any change to a signed attestation's bytes (its in-toto statement or its signature) is refused.

One signed copy of the session's image (tests/signing_support.py); each example puts a bundle with
one byte of the DSSE payload or signature changed in place of the signed SBOM attestation, runs
the product's signature check (stackbuild/image/signature_check.py, stock cosign underneath) against
the test registry, and puts the original back. Every change must end in AttestationTampered, one
line: never a pass, another error, or a traceback.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from signing_support import (
    key_pair,
    put_blob,
    put_manifest,
    referrers_index,
    replace_referrer,
    signed_copy,
    sigstore_entries,
    statement_of,
)

from stackbuild.core.errors import AttestationTampered
from stackbuild.image.connect import connect
from stackbuild.image.cosign import Cosign, TrustPolicy
from stackbuild.image.progress import Progress
from stackbuild.image.registry import registry_client
from stackbuild.image.signature_check import check_signatures

pytestmark = [pytest.mark.docker, pytest.mark.registry]


@pytest.fixture(scope="module")
def target(amd64_build, cosign, registry, tmp_path_factory):
    """(check, registry, copy, (entry, manifest, bundle) of its signed SBOM attestation)."""
    tmp = tmp_path_factory.mktemp("tamper")
    keys = key_pair(cosign, amd64_build.docker_config, tmp / "keys")
    copy = signed_copy(amd64_build, keys, cosign, "tamper", tmp)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DOCKER_CONFIG", str(amd64_build.docker_config))
        progress = Progress(json_lines=True)
        client = registry_client(connect(), copy.repository, progress)
        policy = TrustPolicy(key=keys.public)

        def check():
            return check_signatures(Cosign(str(cosign)), policy, client, None, copy.digest, progress)

        check()  # the untouched copy passes
        (sbom,) = [
            found
            for found in sigstore_entries(registry, copy.repository, copy.digest)
            if (statement_of(found[2]) or {}).get("predicateType") == "https://cyclonedx.org/bom"
        ]
        yield check, registry, copy, sbom


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=st.sampled_from(["payload", "signature"]), position=st.integers(0, 1 << 20), flip=st.integers(1, 255))
def test_a_changed_byte_in_a_signed_attestation_is_refused(target, part, position, flip):
    check, registry, copy, (entry, manifest, bundle) = target
    document = json.loads(bundle)
    envelope = document["dsseEnvelope"]
    holder, key = (envelope, "payload") if part == "payload" else (envelope["signatures"][0], "sig")
    data = bytearray(base64.b64decode(holder[key]))
    data[position % len(data)] ^= flip
    holder[key] = base64.b64encode(bytes(data)).decode()
    tampered = json.dumps(document).encode()
    layer = {**manifest["layers"][0], "digest": put_blob(registry, copy.repository, tampered), "size": len(tampered)}
    digest, size = put_manifest(registry, copy.repository, {**manifest, "layers": [layer]})
    original = referrers_index(registry, copy.repository, copy.digest)
    replace_referrer(registry, copy.repository, copy.digest, entry["digest"], {**entry, "digest": digest, "size": size})
    try:
        with pytest.raises(AttestationTampered) as refused:
            check()
        assert "\n" not in str(refused.value)
    finally:
        put_manifest(registry, copy.repository, original, tag=f"sha256-{copy.digest.removeprefix('sha256:')}")
