"""The YAML text of every generated file (compose files, Kubernetes manifests): one style.

Block style, keys in the order the document builds them, lists indented under their key,
no line folding (a long argv element stays on one line), a multi-line string (the health
probe's script) as a literal block, and no anchors or aliases: an object the document uses
twice is written out twice (some consumers, kubectl's strict decoding among them, refuse
or mishandle aliases).
"""

from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)

    def ignore_aliases(self, data) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = (
        "|"
        if "\n" in value and value.endswith("\n") and not any(line != line.rstrip() for line in value.splitlines())
        else None
    )
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def dump_yaml(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=2**16, allow_unicode=True)
