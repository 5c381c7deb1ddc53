"""The pre-flight's verdict and its exit codes (stdlib only).

The codes are the build driver's for the same faults (stackbuild/errors.py
reads them from here): 5 the geometry gate refuses, 11 vLLM's serve parser
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

if TYPE_CHECKING:
    from geometry.preflight.fingerprint import Fingerprint

PASSED = 0
EXIT_BAD_MODE = 2
EXIT_GEOMETRY = 5
EXIT_SERVE_FLAGS = 11
EXIT_CONFIG = 16
EXIT_UNCHECKED = 17
EXIT_MISMATCH = 26
EXIT_RANKS_DIFFER = 27
EXIT_RANK_MISSING = 28

PREFIX = "pre-flight:"


@dataclass(frozen=True)
class Outcome:
    code: int
    lines: tuple[str, ...]  # the first one says it all; the rest are details and warnings
    # What this start checked, for the ranks of a group to compare (None: the check stopped before
    # the geometry was known); its image fields are filled where the image is known (run.py).
    fingerprint: Optional["Fingerprint"] = None

    @property
    def passed(self) -> bool:
        return self.code == PASSED


def refused(code: int, summary: str, *more: str) -> Outcome:
    return Outcome(code, (f"{PREFIX} FAIL: {summary}", *more))
