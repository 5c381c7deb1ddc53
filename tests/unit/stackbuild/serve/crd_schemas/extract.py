"""Write the schema extracts in this directory from the controllers' CRD files (SOURCES.md says which).

    python tests/unit/stackbuild/serve/crd_schemas/extract.py CRD.yaml VERSION KEEP OUT.json

Takes the CRD's ``openAPIV3Schema`` of VERSION, drops every ``description`` and the ``status``, and keeps
under each path of KEEP (a JSON object: dotted property path -> the property names kept there) only
those properties; everything else of the schema is as the CRD has it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def _strip(node):
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _at(schema: dict, path: str) -> dict:
    """The schema of the property at ``path`` (dots; ``[]`` steps into an array's items)."""
    node = schema
    for part in filter(None, path.split(".")):
        items = part.endswith("[]")
        node = node["properties"][part.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def extract(crd: dict, version: str, keep: dict[str, list[str]]) -> dict:
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strip(found["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    for path, names in keep.items():
        node = _at(schema, path)
        node["properties"] = {k: v for k, v in node["properties"].items() if k in names}
        if "required" in node:
            node["required"] = [k for k in node["required"] if k in names]
    return schema


if __name__ == "__main__":
    source, version, keep, out = sys.argv[1:5]
    schema = extract(yaml.safe_load(Path(source).read_text()), version, json.loads(keep))
    Path(out).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
