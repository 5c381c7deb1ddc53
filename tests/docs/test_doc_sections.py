"""The generated sections of README.md and docs/ are what their sources give today."""

from __future__ import annotations

import difflib

import doc_sections
import pytest


def test_every_generated_section_is_fresh():
    """One test for every document: a stale table fails with its diff, and one command rewrites it."""
    stale = doc_sections.stale()
    diff = "".join(
        line
        for path, (old, new) in stale.items()
        for line in difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"{path.name} (as is)", f"{path.name} (generated)"
        )
    )
    assert not stale, f"stale generated sections; run `{doc_sections.COMMAND}`:\n{diff}"


def test_each_generated_section_is_in_a_document():
    """Every table the generator knows is shown somewhere, so none is rendered for nobody."""
    shown = {m.group("name") for path in doc_sections.DOCUMENTS for m in doc_sections.BEGIN.finditer(path.read_text())}
    assert shown == set(doc_sections.SECTIONS)


@pytest.mark.parametrize(
    "text,message",
    [
        ("<!-- BEGIN generated: nope -->\n<!-- END generated -->\n", "unknown generated section 'nope'"),
        ("<!-- BEGIN generated: preflight-exit-codes -->\nno end\n", "has no '<!-- END generated -->'"),
    ],
)
def test_a_broken_marker_is_named(text, message):
    with pytest.raises(ValueError, match=message):
        doc_sections.regenerate(text, {})


def test_a_stale_section_is_replaced_and_the_rest_kept():
    text = "before\n<!-- BEGIN generated: preflight-exit-codes -->\n| old |\n<!-- END generated -->\nafter\n"
    fresh = doc_sections.regenerate(text, {})
    assert fresh.startswith("before\n<!-- BEGIN generated: preflight-exit-codes -->\n| code | what failed |\n")
    assert fresh.endswith("<!-- END generated -->\nafter\n") and "| old |" not in fresh
    assert doc_sections.regenerate(fresh, {}) == fresh


def test_the_import_layers_show_every_contract_and_layer():
    """docs/architecture.md's layering is pyproject.toml's contracts: each one named, each layer's modules drawn."""
    text = doc_sections.import_contracts()
    for contract in doc_sections._contracts():
        assert f"`{contract['id']}`" in text
        for layer in contract.get("layers", ()):
            for module in doc_sections._layer_modules(contract, layer)[0]:
                assert f'["{module}"]' in text


def test_the_api_section_lists_every_public_name_once():
    import geometry

    text = doc_sections.geometry_api()
    for name in geometry._API:
        assert text.count(f"| `{name}` |") == 1, name
