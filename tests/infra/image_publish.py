"""An image made of layer tarballs, pushed to the test registry and pulled into the engine.

    publish_image(ref, config, layers, credentials) -> the manifest's digest
    registry_holds(ref, credentials)                -> the digest ref names, when the registry has it whole

Each layer is compressed once (``gzip -1 -n``: fast, and the same bytes every time) and kept
beside its tarball with its digest (image_archive.file_digest), so a layer two images share (the
amd64 rootfs) and a cached layer are compressed once. The blobs, the config
(image_archive.config_document) and an OCI manifest are laid out as an OCI image layout and
`skopeo copy` pushes them as they are, converted to a Docker schema 2 manifest. The engine then
pulls the image and pushes it back, which sends no layer (it knows each one's blob from the pull),
only the manifest as the engine writes it: the recorded digest is the one a later `docker push` of
the base under another name gives. `docker push` alone would compress every layer again, at the
engine's slower default level, on every run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from image_archive import ImageConfig, Layer, config_document, file_digest

GZIP = ("gzip", "-1", "-n")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def log(msg: str) -> None:
    print(f"[image_publish] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Blob:
    """A file as the registry stores it: its path, sha256 digest and size."""

    path: Path
    digest: str
    size: int

    def descriptor(self, media_type: str) -> dict:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size}


def compressed(layer: Path) -> Blob:
    """LAYER.gz, written once beside the layer tarball (again only when the layer is newer)."""
    path = layer.with_name(layer.name + ".gz")
    if not path.exists() or path.stat().st_mtime < layer.stat().st_mtime:
        t0 = time.time()
        fd, part = tempfile.mkstemp(dir=layer.parent, prefix=path.name, suffix=".part")
        with os.fdopen(fd, "wb") as out:
            gzip = subprocess.run([*GZIP, "-c", str(layer)], stdout=out)
        if gzip.returncode != 0:
            os.unlink(part)
            raise SystemExit(f"[image_publish] gzip of {layer} failed (exit {gzip.returncode})")
        # Two builds may compress a shared layer at once: the bytes are the same, the last rename wins.
        os.replace(part, path)
        sizes = f"{layer.stat().st_size >> 20} MiB -> {path.stat().st_size >> 20} MiB"
        log(f"compressed {layer.name} ({sizes}) in {time.time() - t0:.0f} s")
    return Blob(path, file_digest(path), path.stat().st_size)


def _bytes_blob(directory: Path, data: bytes) -> Blob:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = directory / "blobs" / "sha256" / digest.split(":")[1]
    path.write_bytes(data)
    return Blob(path, digest, len(data))


def oci_layout(directory: Path, config: ImageConfig, layers: list[Layer]) -> None:
    """An OCI image layout in directory: the compressed layers linked in, the config and manifest written."""
    with ThreadPoolExecutor(max_workers=len(layers)) as pool:
        blobs = list(pool.map(compressed, [layer.path for layer in layers]))
        diff_ids = list(pool.map(file_digest, [layer.path for layer in layers]))
    (directory / "blobs" / "sha256").mkdir(parents=True)
    for blob in blobs:
        link = directory / "blobs" / "sha256" / blob.digest.split(":")[1]
        if not link.exists():
            link.symlink_to(blob.path.resolve())
    config_blob = _bytes_blob(directory, config_document(config, layers, diff_ids))
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_blob.descriptor(OCI_CONFIG),
        "layers": [blob.descriptor(OCI_LAYER_GZIP) for blob in blobs],
    }
    manifest_blob = _bytes_blob(directory, json.dumps(manifest, sort_keys=True).encode())
    index = {"schemaVersion": 2, "manifests": [manifest_blob.descriptor(OCI_MANIFEST)]}
    (directory / "index.json").write_text(json.dumps(index))
    (directory / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def _basic_token(credentials: dict) -> str:
    """``user:password`` in base64: a docker config's "auth" and an HTTP Basic authorization."""
    return base64.b64encode(f"{credentials['username']}:{credentials['password']}".encode()).decode()


def _auth_config(directory: Path, credentials: dict) -> None:
    """config.json with the registry's credentials: docker reads it (--config) and skopeo too (--authfile)."""
    token = _basic_token(credentials)
    path = directory / "config.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps({"auths": {credentials["url"]: {"auth": token}}}))


def registry_holds(ref: str, credentials: dict) -> str | None:
    """The digest of the single-platform manifest ref's tag names, when its registry holds that manifest
    and every blob it names; else None (no such tag, an index, a blob missing, no answer)."""
    repository, _, tag = ref.rpartition(":")
    host, _, name = repository.partition("/")
    token = _basic_token(credentials)

    def ask(method: str, path: str):
        headers = {"Authorization": f"Basic {token}", "Accept": f"{DOCKER_MANIFEST}, {OCI_MANIFEST}"}
        request = urllib.request.Request(f"http://{host}/v2/{name}/{path}", method=method, headers=headers)
        return urllib.request.urlopen(request, timeout=30)

    try:
        with ask("GET", f"manifests/{tag}") as answer:
            body, digest = answer.read(), answer.headers.get("Docker-Content-Digest")
        if digest != "sha256:" + hashlib.sha256(body).hexdigest():
            return None
        manifest = json.loads(body)
        for blob in (manifest["config"], *manifest["layers"]):
            with ask("HEAD", f"blobs/{blob['digest']}"):
                pass
    except (OSError, ValueError, KeyError, TypeError):  # urllib.error's HTTPError and URLError are OSErrors
        return None
    return digest


def _docker(auth: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "--config", str(auth), *args], capture_output=True, text=True)


def publish_image(ref: str, config: ImageConfig, layers: list[Layer], credentials: dict) -> str:
    """Push the image to ref's registry, pull it into the engine; the digest ref names there.

    skopeo pushes the blobs; after the pull the engine knows each layer's blob, so its own push
    sends none and only puts the manifest as the engine writes it: ref's digest is then the one any
    later `docker push` of this image under another name gives, as a pushed base's would be.
    """
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="image-publish-") as tmp:
        work = Path(tmp)
        layout, auth = work / "layout", work / "auth"
        auth.mkdir(mode=0o700)
        _auth_config(auth, credentials)
        oci_layout(layout, config, layers)
        t_push = time.time()
        copy = subprocess.run(
            [
                "skopeo",
                "--insecure-policy",  # no /etc/containers/policy.json needed: the test registry is ours
                "copy",
                "--quiet",
                "--format",
                "v2s2",
                "--dest-tls-verify=false",
                "--dest-authfile",
                str(auth / "config.json"),
                f"oci:{layout}",
                f"docker://{ref}",
            ],
            capture_output=True,
            text=True,
        )
        if copy.returncode != 0:
            raise SystemExit(f"[image_publish] skopeo copy to {ref} failed: {copy.stderr.strip()[-1500:]}")
        log(f"pushed {ref} ({len(layers)} layers) in {time.time() - t_push:.0f} s")
        t_pull = time.time()
        pull = _docker(auth, "pull", "-q", "--platform", f"linux/{config.arch}", ref)
        if pull.returncode != 0:
            raise SystemExit(f"[image_publish] docker pull {ref} failed: {pull.stderr.strip()[-1500:]}")
        log(f"pulled {ref} in {time.time() - t_pull:.0f} s")
        push = _docker(auth, "push", ref)
        found = re.search(r"digest: (sha256:[0-9a-f]{64})", push.stdout)
        if push.returncode != 0 or not found:
            raise SystemExit(
                f"[image_publish] docker push {ref} failed: {(push.stderr or push.stdout).strip()[-1500:]}"
            )
    log(f"published {ref} in {time.time() - t0:.0f} s: {found.group(1)}")
    return found.group(1)
