"""The exit codes each `build.py` command returns: one definition, read by each command's `--help`,
by docs/cli.md (tools/cli_reference.py) and by the tests that run the commands.

The codes and their meanings are geometry/errors.py ExitCode; here is only which command returns
which, and what a code means for one command where that says more than the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from geometry import ExitCode

# Every command returns these: success, bad input (the recipe or the command line), a bug.
COMMON = (ExitCode.SUCCESS, ExitCode.BAD_INPUT, ExitCode.INTERNAL)
TABLE_ANCHOR = "docs/cli.md#output-errors-and-exit-codes"


@dataclass(frozen=True)
class CommandExits:
    """The codes one command returns beside COMMON, and what some of them mean for it."""

    codes: tuple[ExitCode, ...] = ()
    when: Mapping[ExitCode, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(code for code in (*self.codes, *self.when) if not isinstance(code, ExitCode))
        if unknown:
            raise ValueError(f"exit codes {unknown} are not entries of geometry/errors.py ExitCode")
        stray = sorted(int(code) for code in set(self.when) - set(self.all))
        if stray:
            raise ValueError(f"exit codes {stray} are explained but not returned")
        object.__setattr__(self, "when", MappingProxyType(dict(self.when)))

    @property
    def all(self) -> tuple[ExitCode, ...]:
        return tuple(sorted(set(COMMON) | set(self.codes)))

    def meaning(self, code: ExitCode) -> str:
        """What ``code`` means for this command: its own words, else the table's title."""
        return self.when.get(code, code.title)

    def epilog(self) -> str:
        """The `--help` paragraph: every code with its meaning, one a line (click keeps ``\\b`` blocks as they are)."""
        lines = [f"  {code:>2}  {self.meaning(code)}" for code in self.all]
        return "\n".join(["\b", "Exit codes:", *lines, f"(all codes: {TABLE_ANCHOR})"])


_REGISTRY = (ExitCode.REGISTRY_AUTH, ExitCode.REGISTRY_UNREACHABLE, ExitCode.TRANSFER_REFUSED)
# verify's refusals with --key or --certificate-identity, checked before anything else it reads.
_SIGNATURES = (
    ExitCode.SIGNER_MISSING,
    ExitCode.UNSIGNED,
    ExitCode.SIGNATURE_INVALID,
    ExitCode.TAG_MOVED,
    ExitCode.ATTESTATION_TAMPERED,
    ExitCode.SBOM_MISMATCH,
)

E = ExitCode  # short, for the table below
COMMAND_EXITS: Mapping[str, CommandExits] = MappingProxyType(
    {
        "render": CommandExits((E.OUTPUT,)),
        "lock": CommandExits((E.ENGINE_TOO_OLD, *_REGISTRY)),
        "record": CommandExits((E.NO_ENGINE, E.ENGINE_TOO_OLD, E.OUTPUT)),
        "geometry": CommandExits(
            (E.GEOMETRY,),
            {E.SUCCESS: "the gate passes", E.GEOMETRY: "the gate refuses the recipe (the check a CI runs on the host)"},
        ),
        "fit": CommandExits(
            (E.GEOMETRY, E.FIT_NOTHING_PASSES),
            {
                E.SUCCESS: "the recipe passes (its settings, or the better ones printed)",
                E.GEOMETRY: "the recipe fails the gate, a printed setting passes (the lines to change are printed)",
            },
        ),
        "build": CommandExits(
            (
                E.NO_ENGINE,
                E.ENGINE_TOO_OLD,
                E.BUILD_STEP,
                E.GEOMETRY,
                E.ARCHITECTURE,
                *_REGISTRY,
                E.SERVE_FLAGS,
                E.ORACLE_BROKEN,
                E.PINNED_TAG_TAKEN,
                E.OUTPUT,
                E.SIGNER_MISSING,
            )
        ),
        "push": CommandExits(
            (E.NO_ENGINE, E.ENGINE_TOO_OLD, E.BUILD_STEP, *_REGISTRY, E.PINNED_TAG_TAKEN, E.OUTPUT, E.SIGNER_MISSING)
        ),
        "index": CommandExits((E.BUILD_STEP, *_REGISTRY, E.PINNED_TAG_TAKEN, E.SIGNER_MISSING)),
        "compose": CommandExits(
            (
                E.NO_ENGINE,
                E.ENGINE_TOO_OLD,
                E.GEOMETRY,
                E.SERVE_FLAGS,
                E.ORACLE_BROKEN,
                E.COMPOSE_INVALID,
                E.OUTPUT,
                E.COMPOSE_VERSION,
                E.PUBLIC_KEY_INVALID,
            ),
            {
                E.NO_ENGINE: "`--engine-api auto`: no Docker engine answers",
                E.ENGINE_TOO_OLD: "`--engine-api`: the engine is older than the oldest supported, or than the API "
                "the file would be written for",
            },
        ),
        "up": CommandExits(
            (
                E.NO_ENGINE,
                E.ENGINE_TOO_OLD,
                *_REGISTRY,
                *(c for c in _SIGNATURES if c != E.TAG_MOVED),
                E.PUBLIC_KEY_INVALID,
            ),
            {
                E.SUCCESS: "every image's signature verifies and `docker compose up` started the file",
                E.NO_ENGINE: "no Docker engine answers, or `docker compose up` failed (its output above the line)",
                E.PUBLIC_KEY_INVALID: "the file's x-signature-policy key is not a PEM public key",
            },
        ),
        "deploy": CommandExits(
            (E.GEOMETRY, E.SERVE_FLAGS, E.ORACLE_BROKEN, E.OUTPUT, E.MANIFEST_INVALID, E.PUBLIC_KEY_INVALID)
        ),
        "preflight": CommandExits(
            (E.GEOMETRY, E.SERVE_FLAGS, E.MOUNTED_FILE, E.UNCHECKED, E.CHECKPOINT_MISMATCH),
            {E.SUCCESS: "every check passes"},
        ),
        "pin": CommandExits((E.MOUNTED_FILE, E.CHECKPOINT_MISMATCH)),
        "verify": CommandExits(
            (E.NO_ENGINE, E.ENGINE_TOO_OLD, *_REGISTRY, E.IMAGE_MISMATCH, *_SIGNATURES),
            {E.SUCCESS: "the image matches its recipe (and with --key or an identity, its signatures verify)"},
        ),
        "qualify": CommandExits(
            (
                *_REGISTRY,
                E.OUTPUT,
                E.SERVER_UNREACHABLE,
                E.NOT_VLLM,
                E.API_KEY_REFUSED,
                E.MODEL_NOT_SERVED,
                E.QUALIFY_FAILED,
                E.BELOW_EXPECTATION,
                E.KV_CACHE_DIFFERS,
                E.CAPACITY_DIFFERS,
            ),
            {
                E.SUCCESS: "everything holds (`--capacity`: the server ran together what the gate predicts, or a peak "
                "the polls could not resolve, said NOT RESOLVED)",
                E.BAD_INPUT: "bad input: the recipe, the command line (`--baseline-url` with "
                "`--baseline-result`), or a `--baseline-result` file that is unreadable, not a qualify result of "
                "this schema (the key named) or of another model than the one measured (read before anything is "
                "measured)",
                E.TRANSFER_REFUSED: "`--attach`: the registry has no manifest of that digest",
            },
        ),
    }
)
