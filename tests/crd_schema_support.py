"""The admission controllers' CRD schema extracts (tests/unit/stackbuild/serve/crd_schemas/, SOURCES.md there)
and a validator that reads them as the API server's strict field validation does."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parent / "unit" / "stackbuild" / "serve" / "crd_schemas"
# apiVersion -> the extract of its kind's schema
BY_API = {
    "policy.sigstore.dev/v1beta1": "clusterimagepolicy.v1beta1.json",
    "kyverno.io/v1": "kyverno.clusterpolicy.v1.json",
}
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def strict(node):
    """The schema with ``additionalProperties: false`` on every object schema that lists its properties
    and does not preserve unknown fields (a structural schema's unknown field, refused as kubectl's
    ``--validate=strict`` refuses it)."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if "properties" in node and not node.get(PRESERVE) and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


# What the API server allows at every custom resource's root beside its schema's own properties.
ROOT = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}


@cache
def validator(api_version: str) -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMAS / BY_API[api_version]).read_text())
    schema["properties"] = {**ROOT, **schema["properties"]}
    schema = strict(schema)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(document: dict) -> list[str]:
    """Every schema error of ``document`` (its apiVersion's extract), as ``path: message``."""
    found = validator(document["apiVersion"]).iter_errors(document)
    out = sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in found)
    return out + metadata_errors(document.get("metadata"))


def metadata_errors(metadata) -> list[str]:
    """The object's metadata against the Kubernetes ObjectMeta schema (kubernetes-validate, strict), as the API
    server checks every object's: carried by a ConfigMap, whose schema holds nothing else required."""
    import kubernetes_validate

    from stackbuild.serve.k8s_validate import KUBERNETES_VERSION

    carrier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    try:
        kubernetes_validate.validate(carrier, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []
