"""Artifacts that refer to an image digest (OCI 1.1 ``subject``), and finding them again.

An artifact is an OCI image manifest with an ``artifactType``, the empty
config, one layer (the document) and ``subject`` = the image's manifest. A
registry with the referrers API says so (``OCI-Subject`` on the manifest
PUT) and lists the artifacts itself; for one without it (Distribution 2.8)
the tag ``sha256-<hex of the subject digest>`` holds an OCI index of the
referring artifacts, which :func:`attach` keeps up to date (one entry per
artifact type, attaching again replaces it: the SBOM and the provenance; or,
with ``replace=False``, one entry per artifact: the qualifications, several
per image). :func:`referring` asks the referrers API first and falls back to
that tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from stackbuild.core.errors import VerifyError
from stackbuild.core.reference import ImageReference
from stackbuild.image.registry import RegistryClient

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"


class NotAttached(VerifyError):
    """No artifact of the type asked for refers to the subject."""

    def __init__(self, message: str, where: str):
        super().__init__(message)
        self.where = where


def fallback_tag(subject_digest: str) -> str:
    algorithm, _, hex_digest = subject_digest.partition(":")
    return f"{algorithm}-{hex_digest}"


@dataclass(frozen=True)
class Attached:
    artifact_type: str
    digest: str  # the artifact manifest's digest
    via: str  # "referrers API" or "tag sha256-..."


def attach(
    client: RegistryClient,
    subject: dict,
    artifact_type: str,
    document: bytes,
    annotations: dict,
    *,
    media_type: Optional[str] = None,
    replace: bool = True,
) -> Attached:
    """Push ``document`` (of ``media_type``; default: ``artifact_type``) as an artifact referring to
    ``subject`` (a manifest descriptor); ``replace``: it takes the place of an earlier one of its type."""
    config = client.push_blob(EMPTY_CONFIG, EMPTY_MEDIA_TYPE)
    layer = client.push_blob(document, media_type or artifact_type)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": config,
        "layers": [layer],
        "subject": subject,
        "annotations": annotations,
    }
    descriptor, response = client.push_manifest(manifest)
    if response.headers.get("OCI-Subject") == subject["digest"]:
        return Attached(artifact_type, descriptor["digest"], "referrers API")
    tag = fallback_tag(subject["digest"])
    found = client.manifest(tag)
    entries = (
        [
            m
            for m in (found.document.get("manifests") or [])
            if m.get("digest") != descriptor["digest"] and not (replace and m.get("artifactType") == artifact_type)
        ]
        if found
        else []
    )
    entries.append({**descriptor, "artifactType": artifact_type, "annotations": annotations})
    client.push_manifest({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, tag)
    return Attached(artifact_type, descriptor["digest"], f"tag {tag}")


def referring(client: RegistryClient, subject_digest: str) -> tuple[list[dict], str]:
    """The descriptors of the artifacts referring to ``subject_digest``, and where they were found."""
    index = client.referrers(subject_digest)
    if index is not None:
        return list(index.get("manifests") or []), "referrers API"
    tag = fallback_tag(subject_digest)
    found = client.manifest(tag)
    return (list(found.document.get("manifests") or []) if found else []), f"tag {tag}"


def fetch_document(client: RegistryClient, subject_digest: str, artifact_type: str, what: str) -> tuple[bytes, str]:
    """The one document of ``artifact_type`` referring to the subject; VerifyError naming what is missing."""
    subject = ImageReference(client.repository, digest=subject_digest)
    descriptors, where = referring(client, subject_digest)
    matching = [d for d in descriptors if d.get("artifactType") == artifact_type]
    if not matching:
        raise NotAttached(f"{subject}: no {what} ({artifact_type}) refers to it ({where})", where)
    if len(matching) > 1:
        raise VerifyError(f"{subject}: {len(matching)} {what} documents refer to it ({where}); expected one")
    return read_artifact(client, subject_digest, matching[0]["digest"], what, where), matching[0]["digest"]


def fetch_documents(
    client: RegistryClient, subject_digest: str, artifact_type: str, what: str
) -> tuple[list[tuple[str, bytes | VerifyError]], str]:
    """Every document of ``artifact_type`` referring to the subject, in the order listed: (artifact
    digest, its bytes or the VerifyError saying why it cannot be read); and where they were found."""
    descriptors, where = referring(client, subject_digest)
    out: list[tuple[str, bytes | VerifyError]] = []
    for descriptor in descriptors:
        if descriptor.get("artifactType") != artifact_type:
            continue
        try:
            out.append((descriptor["digest"], read_artifact(client, subject_digest, descriptor["digest"], what, where)))
        except VerifyError as exc:
            out.append((descriptor["digest"], exc))
    return out, where


def read_artifact(client: RegistryClient, subject_digest: str, artifact_digest: str, what: str, where: str) -> bytes:
    """The document of the artifact manifest ``artifact_digest``, checked to refer to the subject."""
    artifact = ImageReference(client.repository, digest=artifact_digest)
    found = client.manifest(artifact_digest)
    if found is None:
        raise VerifyError(f"{artifact}: the {what} manifest named by {where} is missing")
    manifest = found.document
    if (manifest.get("subject") or {}).get("digest") != subject_digest:
        raise VerifyError(
            f"{artifact}: the {what} manifest's subject is "
            f"{(manifest.get('subject') or {}).get('digest')}, not {subject_digest}"
        )
    layers = manifest.get("layers") or []
    if len(layers) != 1:
        raise VerifyError(f"{artifact}: the {what} artifact has {len(layers)} layers; expected one")
    data: Optional[bytes] = client.blob(layers[0]["digest"])
    if data is None:
        raise VerifyError(
            f"{ImageReference(client.repository, digest=layers[0]['digest'])}: the {what} document is missing"
        )
    return data
