"""The pre-flight's verdict and its exit codes (stdlib only).

The codes are entries of the one exit-code table (geometry/errors.py
ExitCode), the build driver's for the same faults: 5 the geometry gate refuses, 11 vLLM's serve parser
refuses the argv; and the pre-flight's own: 16 a config.json or checkpoint file
the argv points at is missing, unreadable or corrupt (a shard missing or
truncated, a safetensors header that does not parse or does not describe
its data, no tokenizer or chat template for a served parser), 26 the checkpoints are whole but not what the
recipe and the argv say (revision, quantization, drafter precision, drafter
wiring), 17 the geometry cannot be checked (a
setup the simulator does not model, the simulator and the installed vLLM
disagree, vLLM missing, the image's record of the build unreadable), 2 an
unknown GLM53_PREFLIGHT mode. A multi-node group (ranks.py): 27 a worker's
fingerprint differs from its leader's (both refuse), 28 a rank of the group is
missing when the window ends: the leader's fingerprint did not reach a worker, or
(on the leader) a worker never fetched it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..errors import ExitCode

if TYPE_CHECKING:
    from geometry.preflight.fingerprint import Fingerprint

PASSED = ExitCode.SUCCESS
EXIT_BAD_MODE = ExitCode.BAD_INPUT
EXIT_GEOMETRY = ExitCode.GEOMETRY
EXIT_SERVE_FLAGS = ExitCode.SERVE_FLAGS
EXIT_CONFIG = ExitCode.MOUNTED_FILE
EXIT_UNCHECKED = ExitCode.UNCHECKED
EXIT_MISMATCH = ExitCode.CHECKPOINT_MISMATCH
EXIT_RANKS_DIFFER = ExitCode.RANKS_DIFFER
EXIT_RANK_MISSING = ExitCode.RANK_MISSING

PREFIX = "pre-flight:"


@dataclass(frozen=True)
class Outcome:
    code: ExitCode
    lines: tuple[str, ...]  # the first one says it all; the rest are details and warnings
    # What this start checked, for the ranks of a group to compare (None: the check stopped before
    # the geometry was known); its image fields are filled where the image is known (run.py).
    fingerprint: Optional["Fingerprint"] = None

    @property
    def passed(self) -> bool:
        return self.code == PASSED


def refused(code: ExitCode, summary: str, *more: str) -> Outcome:
    return Outcome(code, (f"{PREFIX} FAIL: {summary}", *more))
