"""End to end: `build.py push --signing-key` signs in the sigstore format, stock cosign verifies it, and
`build.py verify --key` accepts it and refuses every tampering, each with its own exit code.

No new build: the session's amd64 build (``amd64_build``) is tagged into repositories of its own and
pushed again (no layer is sent: the registry mounts them), signed with a key pair stock cosign makes.
Each tampering test works on a copy of its own, since it changes what the registry holds. Debian's
cosign (tests/infra/cosign.py) is the stock tool on the other side; the registry is the test
registry with auth (Distribution, no referrers API: signatures sit under the ``sha256-<hex>`` tag).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from signing_support import (
    INSECURE,
    KEY_OFF,
    PASSPHRASE,
    KeyPair,
    Signed,
    http,
    key_pair,
    push_copy,
    put_blob,
    put_manifest,
    referrers_index,
    replace_referrer,
    signed_copy,
    sigstore_entries,
    statement_of,
    stock,
    verify_key,
)
from stack_e2e import cli, json_events, tag_locally, variant_of

pytestmark = [pytest.mark.docker, pytest.mark.registry]

PROVENANCE = "https://slsa.dev/provenance/v1"


@pytest.fixture(scope="module")
def keys(cosign, amd64_build, tmp_path_factory) -> KeyPair:
    return key_pair(cosign, amd64_build.docker_config, tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def other_keys(cosign, amd64_build, tmp_path_factory) -> KeyPair:
    return key_pair(cosign, amd64_build.docker_config, tmp_path_factory.mktemp("other-keys"))


@pytest.fixture(scope="module")
def signed(amd64_build, keys, cosign, tmp_path_factory) -> Signed:
    return signed_copy(amd64_build, keys, cosign, "signed", tmp_path_factory.mktemp("signed"))


# ---------------------------------------------------------------- what the product signs, stock cosign verifies
def test_stock_cosign_verifies_the_signature_and_both_attestations(signed, keys, cosign, amd64_build):
    config = amd64_build.docker_config
    assert signed.report["signature"]["signed"] is True
    assert signed.report["signature"]["digests"] == [signed.digest]
    events = [e for e in json_events(signed.run.stderr) if e.get("event") == "phase"]
    assert ("sign", "done") in [(e["phase"], e["status"]) for e in events]
    checked = stock(cosign, config, "verify", "--key", str(keys.public), "--insecure-ignore-tlog", *INSECURE,
                    signed.reference)  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    payload = json.loads(checked.stdout)[0]
    assert payload["critical"]["image"]["docker-manifest-digest"] == signed.digest
    for kind, predicate in (
        ("cyclonedx", "https://cyclonedx.org/bom"),
        ("slsaprovenance1", "https://slsa.dev/provenance/v1"),
    ):
        attested = stock(cosign, config, "verify-attestation", "--key", str(keys.public), "--insecure-ignore-tlog",
                         "--type", kind, *INSECURE, signed.reference)  # fmt: skip
        assert attested.returncode == 0, attested.stderr
        statements = [
            json.loads(base64.b64decode(json.loads(line)["payload"])) for line in attested.stdout.splitlines()
        ]
        ours = [s for s in statements if s["predicateType"] == predicate]
        assert ours and all(s["subject"][0]["digest"]["sha256"] == signed.digest.removeprefix("sha256:") for s in ours)


def test_verify_with_the_key_passes_the_signed_image(signed, keys, cosign, amd64_build):
    run = verify_key(amd64_build, signed.reference, keys, cosign, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["verdict"] == "pass" and result["signature"]["signed"] is True
    phases = [e["phase"] for e in json_events(run.stderr) if e["event"] == "phase" and e["status"] == "start"]
    assert phases[0] == "signatures" and phases[1] == "pull"  # the signatures before anything else


def test_no_key_material_in_the_logs_the_report_the_labels_or_the_registry(signed, keys, amd64_build, registry):
    secrets = [PASSPHRASE.encode()]
    secrets += [line.encode() for line in keys.private.read_text().splitlines() if line and "-----" not in line]
    inspected = subprocess.run(["docker", "image", "inspect", signed.report["image_id"]], capture_output=True)
    assert inspected.returncode == 0, inspected.stderr
    places = {
        "stdout": signed.run.stdout.encode(),
        "stderr": signed.run.stderr.encode(),
        "report": json.dumps(signed.report).encode(),
        "image config, labels and history": inspected.stdout,
    }
    for entry in referrers_index(registry, signed.repository, signed.digest)["manifests"]:
        manifest = http(registry, signed.repository, f"manifests/{entry['digest']}")
        places[f"manifest {entry['digest']}"] = manifest.content
        for layer in manifest.json().get("layers", []):
            places[f"blob {layer['digest']}"] = http(
                registry, signed.repository, f"blobs/{layer['digest']}", accept="*/*"
            ).content
    assert len(places) > 6  # SBOM, provenance, two attestations and the signature were searched
    leaks = [(where, secret[:8]) for where, data in places.items() for secret in secrets if secret in data]
    assert leaks == []


# ---------------------------------------------------------------- what stock cosign signs, verify accepts
def test_verify_accepts_what_stock_cosign_signed(amd64_build, keys, cosign, registry, tmp_path):
    unsigned = push_copy(amd64_build, "stock-signed", tmp_path)
    assert unsigned.report["signature"] == {"signed": False}
    notes = [e for e in json_events(unsigned.run.stderr) if e.get("signed") is False]
    assert len(notes) == 1 and "unsigned" in notes[0]["message"]
    config, ref = amd64_build.docker_config, unsigned.reference
    index = referrers_index(registry, unsigned.repository, unsigned.digest)
    documents = {}
    for entry in index["manifests"]:
        (layer,) = http(registry, unsigned.repository, f"manifests/{entry['digest']}").json()["layers"]
        documents[entry["artifactType"]] = http(
            registry, unsigned.repository, f"blobs/{layer['digest']}", accept="*/*"
        ).content
    (tmp_path / "sbom.json").write_bytes(documents["application/vnd.cyclonedx+json"])
    provenance = json.loads(documents["application/vnd.in-toto+json"])["predicate"]
    (tmp_path / "provenance.json").write_text(json.dumps(provenance))
    for args in (
        ("attest", "--type", "cyclonedx", "--predicate", str(tmp_path / "sbom.json")),
        ("attest", "--type", PROVENANCE, "--predicate", str(tmp_path / "provenance.json")),
        ("sign",),
    ):
        done = stock(cosign, config, *args, "--yes", "--key", str(keys.private), *KEY_OFF, *INSECURE, ref,
                     password=PASSPHRASE)  # fmt: skip
        assert done.returncode == 0, done.stderr
    run = verify_key(amd64_build, ref, keys, cosign, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout)["signature"]["signed"] is True


# ---------------------------------------------------------------- the refusals, each its own exit code
def test_an_unsigned_image_is_refused(amd64_build, keys, cosign):
    run = verify_key(amd64_build, amd64_build.report["pushed_reference"], keys, cosign)
    assert run.returncode == 41, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not signed (no signatures found)" in errors[0], run.stderr


def test_another_key_is_refused(amd64_build, signed, other_keys, cosign):
    run = verify_key(amd64_build, signed.reference, other_keys, cosign)
    assert run.returncode == 42, run.stderr
    assert f"no signature verifies with key {other_keys.public}" in run.stderr


def test_a_moved_tag_is_refused_though_it_names_a_valid_image(amd64_build, keys, cosign, tmp_path):
    copy = signed_copy(amd64_build, keys, cosign, "moved", tmp_path)
    tag = amd64_build.report["tags"][0]
    other = variant_of(amd64_build.report["image_id"])  # a valid image of the same recipe, one label more
    tag_locally(other, copy.repository, amd64_build.report["tags"])
    moved = push_copy_of_local(amd64_build, copy.repository, keys, cosign)
    assert moved != copy.digest
    run = verify_key(amd64_build, f"{copy.repository}:{tag}@{copy.digest}", keys, cosign)
    assert run.returncode == 43, run.stderr
    assert f"names {moved}, not {copy.digest}" in run.stderr


def push_copy_of_local(build, repository: str, keys: KeyPair, cosign: Path) -> str:
    """Push (signed, --force over the pinned tag) what the repository's tags name locally; its digest."""
    run = cli(
        "push", "--recipe", str(build.recipe), "--repository", repository, "--json", "--force",
        "--signing-key", str(keys.private), "--signing-passphrase-file", str(keys.passphrase_file),
        "--cosign", str(cosign), docker_config_dir=build.docker_config,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)["pushed_digest"]


def test_an_altered_attestation_is_refused(amd64_build, keys, cosign, registry, tmp_path):
    copy = signed_copy(amd64_build, keys, cosign, "altered", tmp_path)
    tamper_attestation(registry, copy, lambda statement: statement["predicate"]["metadata"].update(tampered=True))
    run = verify_key(amd64_build, copy.reference, keys, cosign)
    assert run.returncode == 44, run.stderr
    assert "no cyclonedx attestation verifies" in run.stderr


def tamper_attestation(registry, copy: Signed, edit) -> None:
    """Replace the signed CycloneDX attestation's bundle with one whose statement ``edit`` changed (the
    signature left as it was), in place of the original in the referrers index."""
    for entry, manifest, bundle in sigstore_entries(registry, copy.repository, copy.digest):
        statement = statement_of(bundle)
        if not statement or statement["predicateType"] != "https://cyclonedx.org/bom":
            continue
        edit(statement)
        document = json.loads(bundle)
        document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        data = json.dumps(document).encode()
        layer = {**manifest["layers"][0], "digest": put_blob(registry, copy.repository, data), "size": len(data)}
        digest, size = put_manifest(registry, copy.repository, {**manifest, "layers": [layer]})
        replace_referrer(
            registry, copy.repository, copy.digest, entry["digest"], {**entry, "digest": digest, "size": size}
        )
        return
    raise AssertionError("no CycloneDX attestation found to tamper with")


def test_an_attestation_for_another_subject_is_refused(amd64_build, keys, cosign, registry, tmp_path):
    """A CycloneDX attestation validly signed with the key, for another image of the repository, put in
    place of the image's own."""
    copy = signed_copy(amd64_build, keys, cosign, "subject", tmp_path)
    other = variant_of(amd64_build.report["image_id"])
    tag_locally(other, copy.repository, ["other"])
    pushed = subprocess.run(
        ["docker", "--config", str(amd64_build.docker_config), "push", f"{copy.repository}:other"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    other_digest = next(w for w in pushed.stdout.split() if w.startswith("sha256:"))
    (tmp_path / "sbom.json").write_text(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.5"}))
    attested = stock(
        cosign, amd64_build.docker_config, "attest", "--yes", "--key", str(keys.private), *KEY_OFF, *INSECURE,
        "--type", "cyclonedx", "--predicate", str(tmp_path / "sbom.json"), f"{copy.repository}@{other_digest}",
        password=PASSPHRASE,
    )  # fmt: skip
    assert attested.returncode == 0, attested.stderr
    (foreign,) = [e for e, _m, b in sigstore_entries(registry, copy.repository, other_digest) if statement_of(b)]
    for entry, _manifest, bundle in sigstore_entries(registry, copy.repository, copy.digest):
        if (statement_of(bundle) or {}).get("predicateType") == "https://cyclonedx.org/bom":
            replace_referrer(registry, copy.repository, copy.digest, entry["digest"], foreign)
    run = verify_key(amd64_build, copy.reference, keys, cosign)
    assert run.returncode == 44, run.stderr


def test_a_replaced_sbom_is_refused(amd64_build, keys, cosign, registry, tmp_path):
    copy = signed_copy(amd64_build, keys, cosign, "sbom", tmp_path)
    index = referrers_index(registry, copy.repository, copy.digest)
    (entry,) = [e for e in index["manifests"] if e.get("artifactType") == "application/vnd.cyclonedx+json"]
    manifest = http(registry, copy.repository, f"manifests/{entry['digest']}").json()
    (layer,) = manifest["layers"]
    sbom = json.loads(http(registry, copy.repository, f"blobs/{layer['digest']}", accept="*/*").content)
    sbom["components"] = sbom["components"][1:]  # one package dropped from the inventory
    data = json.dumps(sbom).encode()
    replaced = {
        **manifest,
        "layers": [{**layer, "digest": put_blob(registry, copy.repository, data), "size": len(data)}],
    }
    digest, size = put_manifest(registry, copy.repository, replaced)
    replace_referrer(registry, copy.repository, copy.digest, entry["digest"], {**entry, "digest": digest, "size": size})
    run = verify_key(amd64_build, copy.reference, keys, cosign)
    assert run.returncode == 45, run.stderr
    assert "the attached SBOM is not the signed one" in run.stderr
