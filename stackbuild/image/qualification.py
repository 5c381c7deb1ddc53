"""Qualification records in the registry: pushed as artifacts referring to an image, and read back.

`build.py qualify --attach IMAGE@DIGEST` asks :func:`attach_target` for the image's manifest before it
measures anything (a digest the registry lacks, refused credentials or an unreachable registry stop it
there), then :func:`attach_qualification` pushes the statement (stackbuild/core/qualification_record.py) the
way the SBOM and the provenance are attached (stackbuild/image/attach.py), keeping the earlier ones.
`build.py verify` lists them with :func:`records`. Credentials: the Docker config, as for a push.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from stackbuild.core.errors import PushError
from stackbuild.core.labels import OCI_CREATED
from stackbuild.core.qualification_record import ARTIFACT_TYPE, DOCUMENT_MEDIA_TYPE, QualificationRecord, RecordInvalid
from stackbuild.core.reference import ImageReference, by_digest
from stackbuild.image.attach import Attached, attach, fetch_documents
from stackbuild.image.connect import connect
from stackbuild.image.engine_api import ContainerEngine
from stackbuild.image.engine_errors import engine_errors
from stackbuild.image.registry import RegistryClient

WHAT = "qualification"


@dataclass(frozen=True)
class AttachTarget:
    """The image a qualification will refer to: its repository's client and its manifest's descriptor."""

    reference: ImageReference
    client: RegistryClient
    descriptor: dict


def attach_target(engine: ContainerEngine, reference: ImageReference) -> AttachTarget:
    """The image's manifest in its registry; PushError (exit 9) when the registry does not have it."""
    client = RegistryClient(reference.repository, plain_http=engine.plain_http(reference.registry))
    found = client.manifest(reference.digest)
    if found is None:
        raise PushError(
            f"qualify --attach {reference}: the registry has no such manifest; nothing was measured or attached"
        )
    return AttachTarget(reference, client, found.descriptor)


def target_of(attach_to: str) -> AttachTarget:
    """The image ``qualify --attach IMAGE@DIGEST`` names, looked up in its registry through the local
    engine's settings (UsageError when it is not a digest reference, the registry's errors as exits 7-9)."""
    reference = by_digest(attach_to, f"qualify --attach {attach_to}")
    with engine_errors(f"qualify --attach {reference}"):
        return attach_target(connect(), reference)


def attach_record(target: AttachTarget, record: QualificationRecord) -> Attached:
    document = json.dumps(record.statement(), sort_keys=True).encode()
    return attach(
        target.client,
        target.descriptor,
        ARTIFACT_TYPE,
        document,
        {OCI_CREATED: record.qualified_on},
        media_type=DOCUMENT_MEDIA_TYPE,
        replace=False,
    )


@dataclass(frozen=True)
class AttachedQualification:
    """A qualification pushed for an image: what ``qualify`` says on stderr and under ``attached`` in its JSON."""

    target: AttachTarget
    attached: Attached
    record: QualificationRecord

    def line(self) -> str:
        return (
            f"attached qualification {self.attached.digest} ({self.record.verdict}) to {self.target.reference} "
            f"({self.attached.via})"
        )

    def to_json(self) -> dict:
        """The image, the artifact pushed, how it was found, the verdict."""
        return {
            "image": str(self.target.reference),
            "artifact": self.attached.digest,
            "found_via": self.attached.via,
            "verdict": self.record.verdict,
        }


def attach_qualification(target: AttachTarget, record: QualificationRecord) -> AttachedQualification:
    """``record`` pushed as an artifact referring to ``target``'s image (earlier ones kept)."""
    return AttachedQualification(target, attach_record(target, record), record)


def records(client: RegistryClient, digest: str) -> tuple[list[QualificationRecord], list[str]]:
    """The qualifications referring to ``digest``, oldest first, and what is wrong with any that cannot be read
    (not JSON, not this project's statement, about another image)."""
    found, _where = fetch_documents(client, digest, ARTIFACT_TYPE, WHAT)
    out, problems = [], []
    for artifact, data in found:
        where = f"qualification {artifact}"
        if not isinstance(data, bytes):
            problems.append(str(data))
            continue
        try:
            record = QualificationRecord.from_statement(json.loads(data))
        except json.JSONDecodeError:
            problems.append(f"{where}: not JSON")
            continue
        except RecordInvalid as exc:
            problems.append(f"{where}: {exc}")
            continue
        if record.digest != digest:
            problems.append(f"{where}: subject is {record.digest}, not the image's {digest}")
            continue
        out.append(record)
    return sorted(out, key=lambda r: r.qualified_on), problems
