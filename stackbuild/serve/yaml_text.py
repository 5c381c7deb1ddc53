"""The YAML text of every generated file (compose files, Kubernetes manifests): one style.

Block style, keys in the order the document builds them, lists indented under their key,
no line folding (a long argv element or health-check script stays on one line).
"""
from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def dump_yaml(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=2**16, allow_unicode=True)
