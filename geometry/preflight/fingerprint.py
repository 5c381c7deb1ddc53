"""What one rank's start-time check saw, for the ranks of a multi-node group to compare (stdlib only).

One typed definition: every rank computes its ``Fingerprint`` (check.py the checkpoints,
the geometry and the flags; run.py the image); each worker sends its own to the leader and
gets the leader's back (ranks.py), and both refuse with ``first_difference``. The fields
are in a fixed order, so the first one that differs is well defined; a mapping field
differs at its first key (sorted) whose value differs, named ``field[key]``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Optional

SCHEMA = "glm53-rank-fingerprint/2"
# The image's digest when the deployment pins it (the generated compose files and Kubernetes
# manifests set it from the image reference): a container cannot know its own image's digest.
IMAGE_DIGEST_ENV = "GLM53_IMAGE_DIGEST"
# Gate-input fields not in ``geometry``: the configs (their sha256s are fields) and the KV budget (a field).
_NOT_GEOMETRY = ("target_config", "drafter_config", "kv_cache_memory_bytes")
# Sent, not compared: each rank's KV budget follows its GPU's memory, each rank's check judged its
# own, and vLLM plans every rank with the smallest (the leader says which that is).
NOT_COMPARED = ("kv_cache_memory_bytes",)
_MAX_SHOWN = 96  # characters of one value in the refusal line


class FingerprintUnreadable(ValueError):
    """A fingerprint document that does not have the shape ``to_json`` writes."""


@dataclass(frozen=True)
class Fingerprint:
    # The image (None where it is not known: no labels file in the image, no digest in the environment,
    # no overlay manifest).
    image_labels: Optional[Mapping[str, str]]
    image_digest: Optional[str]
    series_sha256: Optional[str]  # the overlay series the patch step applied (its manifest)
    # The mounted checkpoints: the snapshot commit (None: a plain directory) and the config.json sha256.
    target_revision: Optional[str]
    target_config_sha256: str
    drafter_revision: Optional[str]
    drafter_config_sha256: Optional[str]
    # The geometry this start checked (the gate input without the configs and the KV budget) and the
    # served flags that decide it (ServeFlags).
    geometry: Mapping[str, Any]
    served_flags: Mapping[str, Any]
    kv_cache_memory_bytes: Optional[int] = None  # this rank's KV budget at start (NOT_COMPARED)

    def with_image(
        self, labels: Optional[Mapping[str, str]], digest: Optional[str], series_sha256: Optional[str]
    ) -> "Fingerprint":
        return replace(
            self,
            image_labels=None if labels is None else dict(labels),
            image_digest=digest,
            series_sha256=series_sha256,
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {"schema": SCHEMA}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    def compared_sha256(self) -> str:
        """The sha256 of the compared fields (NOT_COMPARED left out), for a person comparing nodes by hand."""
        data = {k: v for k, v in self.to_json().items() if k not in NOT_COMPARED}
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    @classmethod
    def from_json(cls, data: Any, where: str = "fingerprint") -> "Fingerprint":
        if not isinstance(data, Mapping):
            raise FingerprintUnreadable(f"{where}: not a JSON object")
        if data.get("schema") != SCHEMA:
            raise FingerprintUnreadable(f"{where}: schema {data.get('schema')!r}, this image reads {SCHEMA!r}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names) - {"schema"})
        missing = [n for n in names if n not in data]
        if unknown or missing:
            raise FingerprintUnreadable(
                f"{where}: {'unknown' if unknown else 'missing'} key {(unknown or missing)[0]!r}"
            )
        for name in ("geometry", "served_flags"):
            if not isinstance(data[name], Mapping):
                raise FingerprintUnreadable(f"{where}: {name}: not a JSON object")
        labels = data["image_labels"]
        if labels is not None and not (
            isinstance(labels, Mapping) and all(isinstance(v, str) for v in labels.values())
        ):
            raise FingerprintUnreadable(f"{where}: image_labels: not an object of strings")
        for name in (
            "image_digest",
            "series_sha256",
            "target_revision",
            "target_config_sha256",
            "drafter_revision",
            "drafter_config_sha256",
        ):
            if data[name] is not None and not isinstance(data[name], str):
                raise FingerprintUnreadable(f"{where}: {name}: not a string")
        if data["target_config_sha256"] is None:
            raise FingerprintUnreadable(f"{where}: target_config_sha256: not a string")
        budget = data["kv_cache_memory_bytes"]
        if budget is not None and (type(budget) is not int or budget < 0):
            raise FingerprintUnreadable(f"{where}: kv_cache_memory_bytes: not a number of bytes")
        return cls(**{n: dict(data[n]) if isinstance(data[n], Mapping) else data[n] for n in names})


def of_check(
    *,
    target_revision: Optional[str],
    target_config_sha256: str,
    drafter_revision: Optional[str],
    drafter_config_sha256: Optional[str],
    geometry,
    flags,
) -> Fingerprint:
    """The fingerprint of what the check saw (``geometry``: the GeometryInputs it judged; ``flags``: the
    ServeFlags), the image not yet known. Both pass through JSON, so it equals what another rank reads."""
    gate = {k: v for k, v in geometry.to_json().items() if k not in _NOT_GEOMETRY}
    return Fingerprint(
        image_labels=None,
        image_digest=None,
        series_sha256=None,
        target_revision=target_revision,
        target_config_sha256=target_config_sha256,
        drafter_revision=drafter_revision,
        drafter_config_sha256=drafter_config_sha256,
        geometry=json.loads(json.dumps(gate)),
        served_flags=json.loads(json.dumps(flags.to_json())),
        kv_cache_memory_bytes=geometry.kv_cache_memory_bytes,
    )


@dataclass(frozen=True)
class Difference:
    field: str  # a field name, or field[key] inside a mapping field
    here: str
    there: str


_ABSENT = object()


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return f"{len(value)} entries"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def first_difference(here: Fingerprint, there: Fingerprint) -> Optional[Difference]:
    """The first compared field (in the definition's order) whose values differ; None when they are the same."""
    for f in fields(Fingerprint):
        if f.name in NOT_COMPARED:
            continue
        a, b = getattr(here, f.name), getattr(there, f.name)
        if a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for key in sorted(set(a) | set(b)):
                va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
                if va != vb:
                    return Difference(f"{f.name}[{key}]", _shown(va), _shown(vb))
        return Difference(f.name, _shown(a), _shown(b))
    return None
