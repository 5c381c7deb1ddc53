"""Every term `build.py geometry` prints on a shipped recipe has an entry in docs/glossary.md.

An entry is a heading, or a term in backticks on an entry's ``Printed as:`` line. The terms are
read from the output itself (spec classes, backends, roles, dtypes, the layer table's columns, the
layout and grouping) and, for the labels the printers write as prose, from LABELS, each of which
must appear in some output (a label the printers dropped is taken off the list).
"""

from __future__ import annotations

import re

import pytest
from bad_input_helpers import invoke
from support.repo import REPO

GLOSSARY = REPO / "docs" / "glossary.md"
RECIPES = sorted((REPO / "recipes").glob("*/recipe.yaml"))

# Labels the printers write (geometry/verdict/table.py, geometry/plan/concurrency's lines).
LABELS = (
    "kernel block alignment",
    "drafter backend",
    "kernel block",
    "backends (layer order)",
    "mamba page padded to",
    "bytes/block",
    "tokens that fit",
    "KV capacity",
    "target attention page",
    "hits every",
    "hash block",
    "scheduler block",
    "null block",
    "tokens in flight",
    "of them attention",
    "attention KV",
    "below one block",
    "exact-fit drafter block",
    "requests at once",
    "max_num_seqs",
    "(draft)",
)
IDENTIFIER = re.compile(r"\b[A-Z][A-Za-z0-9]*Spec\b|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")


def _outputs() -> dict[str, str]:
    out = {}
    for recipe in RECIPES:
        for extra in ([], ["--stock"]):
            result = invoke(["geometry", "--recipe", recipe, *extra])
            assert result.exit_code in (0, 5), result.stderr
            out[f"{recipe.parent.name} {' '.join(extra)}".strip()] = result.stdout
    return out


def printed_terms(text: str) -> set[str]:
    """The terms one `geometry` output prints, read from where the printers put them."""
    terms = set(IDENTIFIER.findall(text))
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["owner"] and "role" in words:  # the layer table's header
            terms |= {c for c in re.split(r"\s{2,}| (?=stride al\.)", line.strip()) if c}
        elif words[:1] in (["target"], ["drafter"]) and len(words) > 3:  # a layer row: owner, role, spec
            terms.add(words[1])
        if line.startswith("KV dtypes:"):
            terms |= set(re.findall(r"^KV dtypes: target ([a-z0-9_]+), drafter ([a-z0-9_]+)", line)[0])
            terms |= set(re.findall(r"auto \(([a-z0-9_/]+),", line))
        terms |= {f"layout {m}" for m in re.findall(r"layout ([A-Z]+)", line)}
        terms |= {f"grouping {m}" for m in re.findall(r"grouping ([a-z]+)", line)}
        for roles in re.findall(r"roles=([a-z_,]+)", line):
            terms |= set(roles.split(","))
    return terms


def glossary_terms() -> set[str]:
    text = GLOSSARY.read_text()
    terms = {m.strip() for m in re.findall(r"^#{2,3} (.+)$", text, re.M)}
    for line in re.findall(r"^Printed as: (.+)$", text, re.M):
        terms |= set(re.findall(r"`([^`]+)`", line))
    return {t.lower() for t in terms}


@pytest.fixture(scope="module")
def outputs():
    return _outputs()


def test_every_printed_term_has_an_entry(outputs):
    known = glossary_terms()
    missing = {
        name: sorted(
            t for t in printed_terms(text) | {label for label in LABELS if label in text} if t.lower() not in known
        )
        for name, text in outputs.items()
    }
    missing = {name: terms for name, terms in missing.items() if terms}
    assert not missing, f"terms `geometry` prints without a docs/glossary.md entry: {missing}"


def test_every_listed_label_is_still_printed(outputs):
    everything = "\n".join(outputs.values())
    assert [label for label in LABELS if label not in everything] == []


def test_the_terms_the_issue_named_are_read_from_the_output(outputs):
    """The reader finds the terms users asked about, so the check above covers them."""
    found = set().union(*(printed_terms(text) for text in outputs.values()))
    assert {"layout BLHNC", "stride al.", "kpool_tail", "CircularBufferSpec", "grouping packed"} <= found
    assert {"MambaSpec", "sparse_indexer", "FLASH_ATTN", "bfloat16"} <= found


def test_a_term_without_an_entry_is_caught():
    assert "NewSpec" in printed_terms("   target  kda  NewSpec  34  9216\n")
    assert "newspec" not in glossary_terms()
