"""The README's default-recipe geometry table, read from README.md.

Tests compare these numbers with hand arithmetic and with vLLM's own planner,
so the README cannot drift from what vLLM does.  A row that is missing or
does not parse fails the test that reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
TABLE_INTRO = "The default recipe (GB300, TP1,"
PREFIX_TABLE_INTRO = "| | prefix caching off (`none`) | on (`align`, vLLM's default) |"


@dataclass(frozen=True)
class Column:
    """One column of the table: stock vLLM 0.33.0 or with the overlay."""

    target_block: int
    mla_page: int
    kda_real_page: int
    kda_padded_page: int
    drafter_block: int
    drafter_page: int
    bytes_per_block_with: int
    bytes_per_block_without: int
    blocks: int
    kv_token_slots: int
    passed: bool


@dataclass(frozen=True)
class DefaultRecipeTable:
    drafter_bytes_per_token: int  # from the drafter row's label
    stock: Column
    overlay: Column


def numbers(cell: str) -> list[int]:
    """The integers in a cell, ignoring a trailing ``(= ...)`` explanation."""
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", cell.split("(=")[0])]


def _rows(text: str, intro: str = TABLE_INTRO) -> dict[str, tuple[str, str]]:
    start = text.index(intro)
    rows: dict[str, tuple[str, str]] = {}
    for line in text[start:].splitlines()[1:]:
        if not line.strip():
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= {"-", " "}:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def _row(rows: dict[str, tuple[str, str]], prefix: str) -> tuple[str, str]:
    (label,) = [label for label in rows if label.startswith(prefix)]
    return rows[label]


def default_recipe_table(text: str | None = None) -> DefaultRecipeTable:
    rows = _rows(README.read_text() if text is None else text)
    (drafter_label,) = [label for label in rows if label.startswith("drafter block / page")]
    (bytes_per_token,) = numbers(drafter_label.split(":")[1])
    columns = []
    for i in (0, 1):
        block, mla = numbers(_row(rows, "target block size / MLA latent page")[i])
        kda = _row(rows, "KDA state page")[i]
        real, padded = numbers(_row(rows, "KDA state page")[0] if kda == "same" else kda)
        d_block, d_page = numbers(_row(rows, "drafter block / page")[i])
        with_, without = numbers(_row(rows, "bytes per block, with / without")[i])
        (blocks,) = numbers(_row(rows, "blocks in 150 GiB")[i])
        (slots,) = numbers(_row(rows, "KV token slots")[i])
        verdict = _row(rows, "verdict")[i]
        assert ("PASS" in verdict) != ("FAIL" in verdict), verdict
        columns.append(Column(block, mla, real, padded, d_block, d_page, with_, without, blocks,
                              slots, "PASS" in verdict))
    return DefaultRecipeTable(bytes_per_token, *columns)


def prefix_caching_rows(text: str | None = None) -> dict[str, tuple[str, str]]:
    """The prefix-caching table's cells: row label -> (off, on), as written."""
    return _rows(README.read_text() if text is None else text, PREFIX_TABLE_INTRO)
