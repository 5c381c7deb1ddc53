"""The exit codes each `build.py` command returns: one definition, read by each command's `--help`,
by docs/cli.md (tools/cli_reference.py) and by the tests that run the commands.

The codes' meanings are stackbuild/core/errors.py EXIT_CODES; here is only which command returns
which, and what a code means for one command where that says more than the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from stackbuild.core.errors import EXIT_CODES

# Every command returns these: success, bad input (the recipe or the command line), a bug.
COMMON = (0, 2, 70)
TABLE_ANCHOR = "docs/cli.md#output-errors-and-exit-codes"


@dataclass(frozen=True)
class CommandExits:
    """The codes one command returns beside COMMON, and what some of them mean for it."""

    codes: tuple[int, ...] = ()
    when: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted((set(self.codes) | set(self.when)) - set(EXIT_CODES) - {0})
        if unknown:
            raise ValueError(f"exit codes {unknown} are not in stackbuild/core/errors.py EXIT_CODES")
        stray = sorted(set(self.when) - set(self.all))
        if stray:
            raise ValueError(f"exit codes {stray} are explained but not returned")
        object.__setattr__(self, "when", MappingProxyType(dict(self.when)))

    @property
    def all(self) -> tuple[int, ...]:
        return tuple(sorted(set(COMMON) | set(self.codes)))

    def meaning(self, code: int) -> str:
        """What ``code`` means for this command: its own words, else the table's title."""
        if code in self.when:
            return self.when[code]
        return "done" if code == 0 else EXIT_CODES[code].title

    def epilog(self) -> str:
        """The `--help` paragraph: every code with its meaning, one a line (click keeps ``\\b`` blocks as they are)."""
        lines = [f"  {code:>2}  {self.meaning(code)}" for code in self.all]
        return "\n".join(["\b", "Exit codes:", *lines, f"(all codes: {TABLE_ANCHOR})"])


_REGISTRY = (7, 8, 9)

COMMAND_EXITS: Mapping[str, CommandExits] = MappingProxyType(
    {
        "render": CommandExits((15,)),
        "lock": CommandExits(_REGISTRY),
        "record": CommandExits((3, 15)),
        "geometry": CommandExits(
            (5,), {0: "the gate passes", 5: "the gate refuses the recipe (the check a CI runs on the host)"}
        ),
        "fit": CommandExits(
            (5, 19),
            {
                0: "the recipe passes (its settings, or the better ones printed)",
                5: "the recipe fails the gate, a printed setting passes (the lines to change are printed)",
            },
        ),
        "build": CommandExits((3, 4, 5, 6, *_REGISTRY, 11, 12, 14, 15)),
        "push": CommandExits((3, *_REGISTRY, 14, 15)),
        "index": CommandExits((*_REGISTRY, 14)),
        "compose": CommandExits((5, 11, 12, 13, 15, 29)),
        "deploy": CommandExits((5, 11, 12, 15, 18)),
        "preflight": CommandExits((5, 11, 16, 17, 26), {0: "every check passes"}),
        "pin": CommandExits((16, 26)),
        "verify": CommandExits((3, *_REGISTRY, 10), {0: "the image matches its recipe"}),
        "qualify": CommandExits(
            (*_REGISTRY, 15, 20, 21, 22, 23, 24, 25, 30),
            {0: "everything holds", 9: "`--attach`: the registry has no manifest of that digest"},
        ),
    }
)
