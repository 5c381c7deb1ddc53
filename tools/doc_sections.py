"""The generated sections of README.md and docs/: tables written from the data they show.

A section sits between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated -->``;
its text is what ``SECTIONS[NAME]()`` renders (the simulator and the gate on the recipes,
the pre-flight's exit codes; docs/cli.md is tools/cli_reference.py's), so no document
carries a figure that nothing computes.
tests/docs/test_doc_sections.py holds every section to its source. After a change:

    python tools/doc_sections.py          # rewrite every generated section in place
    python tools/doc_sections.py --check  # exit 1 and a diff when one is stale
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from tools/
    sys.path.insert(0, str(REPO))

from doc_admission import default_recipe_admission, default_recipe_fit, default_recipe_headroom  # noqa: E402
from doc_architecture import _contracts, _layer_modules, geometry_api, import_contracts  # noqa: E402,F401
from doc_engines import supported_engines  # noqa: E402
from doc_served import SERVED_RECORD, served_figures, served_kv_cache  # noqa: E402,F401
from doc_verdicts import (  # noqa: E402
    default_recipe_requests,
    default_recipe_verdict,
    prefix_caching,
    preflight_exit_codes,
    recipe_verdicts,
)
from port_report import exit_code_table as port_exit_codes  # noqa: E402

DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
BEGIN = re.compile(r"^<!-- BEGIN generated: (?P<name>[a-z0-9-]+) -->\n", re.M)
END = "<!-- END generated -->\n"
COMMAND = "python tools/doc_sections.py"


SECTIONS: dict[str, Callable[[], str]] = {
    "default-recipe-verdict": default_recipe_verdict,
    "default-recipe-requests": default_recipe_requests,
    "prefix-caching": prefix_caching,
    "recipe-verdicts": recipe_verdicts,
    "preflight-exit-codes": preflight_exit_codes,
    "served-kv-cache": served_kv_cache,
    "default-recipe-admission": default_recipe_admission,
    "default-recipe-headroom": default_recipe_headroom,
    "default-recipe-fit": default_recipe_fit,
    "import-contracts": import_contracts,
    "geometry-api": geometry_api,
    "port-exit-codes": port_exit_codes,
    "supported-engines": supported_engines,
}


def regenerate(text: str, rendered: dict[str, str]) -> str:
    """``text`` with every generated section replaced by its rendering; an unknown or unclosed one is an error."""
    out, pos = [], 0
    for match in BEGIN.finditer(text):
        name = match.group("name")
        if name not in SECTIONS:
            raise ValueError(f"unknown generated section {name!r} (known: {', '.join(SECTIONS)})")
        end = text.find(END, match.end())
        if end < 0 or BEGIN.search(text, match.end(), end):
            raise ValueError(f"generated section {name!r} has no {END.strip()!r} before the next one")
        if name not in rendered:
            rendered[name] = SECTIONS[name]()
        out += [text[pos : match.end()], rendered[name]]
        pos = end
    return "".join(out) + text[pos:]


def stale(documents=DOCUMENTS) -> dict[Path, tuple[str, str]]:
    """Each document whose generated sections are not what their sources give: path -> (as is, as generated)."""
    rendered: dict[str, str] = {}
    out = {}
    for path in documents:
        text = path.read_text()
        fresh = regenerate(text, rendered)
        if fresh != text:
            out[path] = (text, fresh)
    return out


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    for path, (old, new) in stale().items():
        rel = path.relative_to(REPO)
        if check:
            sys.stdout.writelines(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{rel} (as is)", f"{rel} (generated)")
            )
        else:
            path.write_text(new)
            print(f"rewrote the generated sections of {rel}", file=sys.stderr)
    return 1 if check and stale() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
