"""Check generated manifests offline: core objects against the Kubernetes schemas
(kubernetes-validate, strict: unknown fields refused), a LeaderWorkerSet against
leaderworkerset.v1.schema.json (written from the LWS API types) with its pod templates
checked as core PodTemplates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from stackbuild.core.errors import ManifestInvalid

# The Kubernetes API version whose schemas the manifests are checked against.
KUBERNETES_VERSION = "1.33.0"
LWS_SCHEMA = Path(__file__).resolve().parent / "leaderworkerset.v1.schema.json"


def _core(obj: dict, where: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        raise ManifestInvalid(
            f"{where}: Kubernetes {KUBERNETES_VERSION} schema: {path or '(top)'}: {' '.join(exc.message.split())}"
        ) from None
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        raise ManifestInvalid(f"{where}: no Kubernetes {KUBERNETES_VERSION} schema: {exc}") from None


def _leaderworkerset(obj: dict, where: str) -> None:
    import jsonschema

    schema = json.loads(LWS_SCHEMA.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(obj))
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path)
        raise ManifestInvalid(f"{where}: LeaderWorkerSet schema: {path or '(top)'}: {' '.join(error.message.split())}")
    templates = obj["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        if key in templates:
            pod_template = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{obj['metadata']['name']}-{key.lower()}"},
                "template": templates[key],
            }
            _core(pod_template, f"{where} spec.leaderWorkerTemplate.{key}")


def validate(objects: Iterable[dict], where: str) -> list[str]:
    """Raise ManifestInvalid (one line) for the first object a schema refuses; what was checked."""
    checked = []
    for obj in objects:
        name = f"{where}: {obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        if obj.get("apiVersion") == "leaderworkerset.x-k8s.io/v1":
            _leaderworkerset(obj, name)
            checked.append(f"{obj['kind']}: {LWS_SCHEMA.name} + Kubernetes {KUBERNETES_VERSION} PodTemplate")
        else:
            _core(obj, name)
            checked.append(f"{obj['kind']}: Kubernetes {KUBERNETES_VERSION}")
    return checked
