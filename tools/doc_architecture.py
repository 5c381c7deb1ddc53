"""docs/architecture.md's generated sections: the import contracts of pyproject.toml and geometry's
public API (tools/doc_sections.py)."""

from __future__ import annotations

import tomllib
from doc_format import REPO, _one, _table


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _layer_modules(contract: dict, layer: str) -> tuple[list[str], str]:
    """A layer's modules (with its container's prefix) and how they stand to each other."""
    separator = "|" if "|" in layer else ":"
    names = [name.strip() for name in layer.split(separator)]
    container = contract.get("containers", [None])
    prefix = f"{_one(set(container), contract['id'] + ' containers')}." if container != [None] else ""
    return [prefix + name for name in names], separator


def _mermaid_layers(contract: dict) -> list[str]:
    ident = contract["id"].replace("-", "_")
    lines, previous = ["```mermaid", "flowchart TD"], []
    for i, layer in enumerate(contract["layers"]):
        modules, _ = _layer_modules(contract, layer)
        nodes = [f"{ident}_{i}_{j}" for j in range(len(modules))]
        lines += [f'    {node}["{module}"]' for node, module in zip(nodes, modules)]
        lines += [f"    {above} --> {below}" for above in previous for below in nodes]
        previous = nodes
    return lines + ["```"]


def import_contracts() -> str:
    """pyproject.toml's import-linter contracts: each layering drawn, the forbidden imports and the acyclic rule."""
    out = []
    forbidden, acyclic = [], []
    for contract in _contracts():
        kind = contract["type"]
        if kind == "layers":
            siblings = []
            for layer in contract["layers"]:
                modules, separator = _layer_modules(contract, layer)
                if len(modules) > 1:
                    how = "never import each other" if separator == "|" else "may import each other"
                    siblings.append(" and ".join(f"`{m}`" for m in modules) + f" {how}")
            out += [
                f"**{contract['name']}** (`{contract['id']}`): a layer imports only the layers below it."
                + (" On one level, " + "; ".join(siblings) + "." if siblings else ""),
                "",
                *_mermaid_layers(contract),
                "",
            ]
        elif kind == "forbidden":
            alone = " (the module itself, not its submodules)" if contract.get("as_packages") is False else ""
            forbidden.append(
                (
                    f"`{contract['id']}`",
                    ", ".join(f"`{m}`" for m in contract["source_modules"]) + alone,
                    ", ".join(f"`{m}`" for m in contract["forbidden_modules"]),
                    contract["name"],
                )
            )
        elif kind == "acyclic_siblings":
            acyclic.append(
                f"`{contract['id']}`: {contract['name']}, under " + ", ".join(f"`{a}`" for a in contract["ancestors"])
            )
        else:
            raise ValueError(f"import contract {contract['id']!r}: no rendering for type {kind!r}")
    out += _table(("contract", "modules", "may not import", "the rule"), forbidden)
    out += ["", *(f"- {line}." for line in acyclic)]
    return "\n".join(out) + "\n"


def _api_groups() -> list[tuple[str, list[str]]]:
    """geometry/__init__.py's public names, grouped by the comments of its ``_API`` table."""
    import io
    import tokenize

    import geometry

    source = (REPO / "geometry" / "__init__.py").read_text()
    groups: list[tuple[str, list[str]]] = []
    inside = False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == "_API" and not inside:
            inside = True
        elif inside and token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if not text.startswith("Each public name"):
                groups.append((text, []))
        elif inside and token.type == tokenize.STRING and token.start[1] == 4:
            groups[-1][1].append(token.string.strip("\"'"))
        elif inside and token.type == tokenize.OP and token.string == "}" and token.start[1] == 0:
            break
    listed = [name for _, names in groups for name in names]
    if listed != list(geometry._API):
        raise ValueError(f"geometry/__init__.py: the grouped names {listed} are not _API's {list(geometry._API)}")
    return groups


def _kind(value) -> str:
    import inspect

    if inspect.ismodule(value):
        return "document (module)"
    if inspect.isclass(value):
        return "exception" if issubclass(value, Exception) else "class"
    return "function" if callable(value) else "constant"


def geometry_api() -> str:
    """The public names of ``geometry`` (geometry/__init__.py ``_API``), in its groups."""
    import geometry

    out = []
    for title, names in _api_groups():
        rows = []
        for name in names:
            module, attribute = geometry._API[name]
            where = f"`{module}`" if attribute is None else f"`{module}.{attribute}`"
            rows.append((f"`{name}`", _kind(getattr(geometry, name)), where))
        out += [f"**{title[0].upper() + title[1:]}**", "", *_table(("name", "kind", "defined in"), rows), ""]
    return "\n".join(out[:-1]) + "\n"
