"""The signing tests' helpers: key pairs stock cosign makes, signed copies of the session's image, and the
test registry read and written directly (the referrers index under ``sha256-<hex>``, blobs, manifests)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import requests
from stack_e2e import cli, repository_name, tag_locally, unique_repository

from stackbuild.image.registry import MANIFEST_ACCEPT

PASSPHRASE = "sign-e2e-" + uuid.uuid4().hex  # what the grep test looks for
INSECURE = ("--allow-http-registry", "--allow-insecure-registry")
KEY_OFF = ("--use-signing-config=false", "--tlog-upload=false")


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    passphrase_file: Path


@dataclass(frozen=True)
class Signed:
    repository: str
    digest: str
    report: dict
    run: subprocess.CompletedProcess

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


def stock(cosign: Path, config: Path, *args: str, password: str = "") -> subprocess.CompletedProcess:
    """Stock cosign, the registry's credentials from the test's Docker config."""
    env = {**os.environ, "DOCKER_CONFIG": str(config), "COSIGN_PASSWORD": password}
    return subprocess.run(
        [str(cosign), *args], capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL
    )


def key_pair(cosign: Path, config: Path, directory: Path) -> KeyPair:
    directory.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [str(cosign), "generate-key-pair"],
        cwd=directory,
        capture_output=True,
        text=True,
        env={**os.environ, "COSIGN_PASSWORD": PASSPHRASE},
        stdin=subprocess.DEVNULL,
    )
    assert made.returncode == 0, made.stderr
    passphrase = directory / "passphrase"
    passphrase.write_text(PASSPHRASE + "\n")
    return KeyPair(directory / "cosign.key", directory / "cosign.pub", passphrase)


def push_copy(build, stem: str, tmp: Path, *signing: str) -> Signed:
    """The session's image under a repository of its own, pushed (and signed with ``signing``'s options)."""
    repository = unique_repository(build.repository.split("/", 1)[0], stem)
    tag_locally(build.report["image_id"], repository, build.report["tags"])
    report = tmp / f"{stem}-{uuid.uuid4().hex[:6]}.json"
    run = cli(
        "push", "--recipe", str(build.recipe), "--repository", repository, "--json", "--report", str(report),
        *signing, docker_config_dir=build.docker_config,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    return Signed(repository, result["pushed_digest"], result, run)


def signed_copy(build, keys: KeyPair, cosign: Path, stem: str, tmp: Path) -> Signed:
    return push_copy(
        build, stem, tmp, "--signing-key", str(keys.private), "--signing-passphrase-file", str(keys.passphrase_file),
        "--cosign", str(cosign),
    )  # fmt: skip


def verify(build, image: str, *args: str) -> subprocess.CompletedProcess:
    return cli("verify", image, "--recipe", str(build.recipe), *args, docker_config_dir=build.docker_config)


def verify_key(build, image: str, keys: KeyPair, cosign: Path, *args: str) -> subprocess.CompletedProcess:
    return verify(build, image, "--key", str(keys.public), "--cosign", str(cosign), *args)


# ---------------------------------------------------------------- the registry, read directly
def http(registry, repository: str, path: str, accept: str = MANIFEST_ACCEPT, **kw) -> requests.Response:
    method = kw.pop("method", "GET")
    return requests.request(
        method,
        f"http://{registry.address}/v2/{repository_name(repository)}/{path}",
        headers={"Accept": accept, **kw.pop("headers", {})},
        auth=(registry.username, registry.password),
        timeout=60,
        **kw,
    )


def referrers_index(registry, repository: str, digest: str) -> dict:
    found = http(registry, repository, f"manifests/sha256-{digest.removeprefix('sha256:')}")
    assert found.status_code == 200, found.text
    return found.json()


def put_blob(registry, repository: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = http(registry, repository, "blobs/uploads/", method="POST")
    assert start.status_code == 202, start.text
    location = start.headers["Location"]
    url = location if location.startswith("http") else f"http://{registry.address}{location}"
    done = requests.put(
        url,
        params={"digest": digest},
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        auth=(registry.username, registry.password),
        timeout=60,
    )
    assert done.status_code == 201, done.text
    return digest


def put_manifest(registry, repository: str, document: dict, tag: str | None = None) -> tuple[str, int]:
    """PUT the manifest under its digest (or ``tag``); its digest and size."""
    data = json.dumps(document).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    media_type = document.get("mediaType", "application/vnd.oci.image.manifest.v1+json")
    put = http(
        registry,
        repository,
        f"manifests/{tag or digest}",
        method="PUT",
        data=data,
        headers={"Content-Type": media_type},
    )
    assert put.status_code == 201, put.text
    return digest, len(data)


def replace_referrer(registry, repository: str, subject: str, old: str, new: dict) -> None:
    """In ``subject``'s referrers index (the ``sha256-<hex>`` tag), the entry ``old`` replaced by ``new``."""
    index = referrers_index(registry, repository, subject)
    index["manifests"] = [new if e["digest"] == old else e for e in index["manifests"]]
    put_manifest(registry, repository, index, tag=f"sha256-{subject.removeprefix('sha256:')}")


def sigstore_entries(registry, repository: str, digest: str) -> list[tuple[dict, dict, bytes]]:
    """(index entry, manifest, bundle bytes) of each sigstore bundle referring to ``digest``."""
    out = []
    for entry in referrers_index(registry, repository, digest)["manifests"]:
        manifest = http(registry, repository, f"manifests/{entry['digest']}").json()
        if "sigstore" not in manifest.get("artifactType", ""):
            continue
        (layer,) = manifest["layers"]
        out.append((entry, manifest, http(registry, repository, f"blobs/{layer['digest']}", accept="*/*").content))
    return out


def statement_of(bundle: bytes) -> dict | None:
    envelope = json.loads(bundle).get("dsseEnvelope")
    return json.loads(base64.b64decode(envelope["payload"])) if envelope else None
