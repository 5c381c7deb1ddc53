"""Run the pre-flight the same way in the image and on the host (stdlib only).

``preflight(...)`` reads the record of what the build checked, runs
:func:`check.check` with everything vLLM prints while it is imported held back
(the outcome must be the first lines of the container's log), and returns the
Outcome. ``main`` is the image's entrypoint: mode, outcome, for a rank of a
multi-node group the agreement with its leader (ranks.py), then ``exec vllm
serve ARGV`` with the environment it was started with.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Sequence

from geometry.image_contract import IMAGE_LABELS, OVERLAY_MANIFEST, PREFLIGHT_CHECKED, payload_path
from geometry.preflight import checked as checked_mod
from geometry.preflight.launch import LaunchUnreadable, launch_of
from geometry.preflight.outcome import EXIT_BAD_MODE, EXIT_SERVE_FLAGS, EXIT_UNCHECKED, PASSED, PREFIX, Outcome, refused

MODE_ENV = "GLM53_PREFLIGHT"
MODES = ("enforce", "warn", "off")
DEFAULT_MODE = "enforce"
# What the image's entrypoint starts once the pre-flight lets it (the base image's own entrypoint).
SERVE_COMMAND = ("vllm", "serve")


def _quietly(work: Callable[[Callable[[str], None]], Outcome]) -> Outcome:
    """Run ``work(say)`` with file descriptors 1 and 2 sent to /dev/null (vLLM logs while it
    imports; nothing is written, so a read-only root filesystem is fine); ``say`` writes a
    line to the real stderr meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    sink = os.open(os.devnull, os.O_WRONLY)

    def say(line: str) -> None:
        os.write(saved[1], (line + "\n").encode())

    os.dup2(sink, 1)
    os.dup2(sink, 2)
    try:
        return work(say)
    except Exception as exc:  # noqa: BLE001 - a bug must still end in one line, not a traceback
        return refused(EXIT_UNCHECKED, f"the pre-flight itself failed: {type(exc).__name__}: {exc}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, sink):
            os.close(fd)


def preflight(
    argv: Sequence[str],
    *,
    checked_path: str,
    overlay_manifest: Optional[str],
    locate: Callable[[str], str] = lambda path: path,
    checked: Optional["checked_mod.CheckedServe"] = None,
    progress: bool = False,
) -> Outcome:
    """The outcome for ``vllm serve ARGV``; ``checked`` given (the host) or read from ``checked_path`` (the image).

    ``overlay_manifest``: the image's overlay manifest, which says whether the installed
    vLLM is patched (None: no manifest, the installed vLLM is stock, as in a host venv).
    ``progress``: say on stderr when the slow path starts (the host; in the image the
    outcome must be the log's first line).
    """

    def work(say: Callable[[str], None]) -> Outcome:
        from geometry.preflight.check import check

        try:
            record = checked if checked is not None else checked_mod.load(checked_path)
        except checked_mod.CheckedUnreadable as exc:
            return refused(EXIT_UNCHECKED, f"the image's record of what the build checked is unusable: {exc}")
        return check(
            argv,
            record,
            locate=locate,
            overlay_manifest=overlay_manifest,
            progress=say if progress else (lambda line: None),
        )

    return _quietly(work)


def _ranks_agree(argv: Sequence[str], outcome: Outcome, payload_dir: str, manifest: str, environment: dict) -> Outcome:
    """A rank of a multi-node group (``--nnodes`` > 1) agrees with its leader; a single node passes at once."""
    from geometry.preflight import ranks

    try:
        launch = launch_of(argv)
    except LaunchUnreadable as exc:
        return refused(EXIT_SERVE_FLAGS, str(exc))
    if launch is None:
        return Outcome(PASSED, ())
    return ranks.agree(
        outcome.fingerprint,
        launch,
        labels_path=payload_path(IMAGE_LABELS, payload_dir),
        overlay_manifest=manifest,
        environ=environment,
        say=_say,
    )


def _report(outcome: Outcome, mode: str) -> Optional[int]:
    """Say the outcome's lines; its exit code when vLLM must not start."""
    for line in outcome.lines:
        _say(line)
    if outcome.passed:
        return None
    if mode == "enforce":
        return outcome.code
    _say(f"{PREFIX} {MODE_ENV}=warn: starting vLLM anyway")
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str], payload_dir: str) -> int:
    """The image's entrypoint: returns an exit code only when vLLM must not start."""
    environment = dict(os.environ)  # vLLM gets exactly this, whatever the check sets for itself
    mode = environment.get(MODE_ENV, DEFAULT_MODE).strip().lower() or DEFAULT_MODE
    if mode not in MODES:
        _say(f"{PREFIX} {MODE_ENV}={environment[MODE_ENV]!r} is not one of {', '.join(MODES)}: vLLM not started")
        return EXIT_BAD_MODE
    if mode == "off":
        _say(f"{PREFIX} off ({MODE_ENV}=off): vLLM starts with a KV geometry nobody checked at start")
    else:
        manifest = payload_path(OVERLAY_MANIFEST, payload_dir)
        outcome = preflight(argv, checked_path=payload_path(PREFLIGHT_CHECKED, payload_dir), overlay_manifest=manifest)
        code = _report(outcome, mode)
        from geometry.preflight.check import asks_for_help

        if code is None and not asks_for_help(argv):
            code = _report(_ranks_agree(argv, outcome, payload_dir, manifest, environment), mode)
        if code is not None:
            return code
    try:
        os.execvpe(SERVE_COMMAND[0], [*SERVE_COMMAND, *argv], environment)
    except OSError as exc:
        _say(f"{PREFIX} cannot start {' '.join(SERVE_COMMAND)}: {exc.strerror}")
        return 127
    return 0  # pragma: no cover - exec does not return
