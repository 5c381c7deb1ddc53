"""Progress of a build, pull or push, as it happens.

Human lines go to stderr: each build step as it starts (``Step N/M : ...``
and the name we give it), its output indented, and how long it took; pulls
and pushes report each layer's status once per change, not every byte.
With ``--json`` the same events are JSON lines on stderr, so stdout keeps
only the final report.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator, Optional

# The Dockerfile's steps are the contract's, in order: step N is named by its number.
from geometry import ExitCode, contract


class Progress:
    """Receives engine events and phase boundaries; writes them for a person or a program."""

    def __init__(self, json_lines: bool = False, stream: Optional[IO[str]] = None):
        self.json_lines = json_lines
        self.stream = stream or sys.stderr
        self.phase_seconds: dict[str, float] = {}
        self._step: Optional[dict] = None
        self._step_started = 0.0
        self._layer_status: dict[str, str] = {}

    # ---------------------------------------------------------------- output
    def _emit(self, event: dict, text: Optional[str]) -> None:
        if self.json_lines:
            event = {"time": round(time.time(), 3), **event}
            self.stream.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        elif text is not None:
            self.stream.write(text + "\n")
        self.stream.flush()

    def failure(self, exc: Exception) -> None:
        """A machine-readable record of the error (people get the CLI's `error:` line)."""
        if self.json_lines:
            self._emit(
                {
                    "event": "error",
                    "type": type(exc).__name__,
                    "message": str(exc),
                    "exit_code": getattr(exc, "exit_code", ExitCode.INTERNAL),
                },
                None,
            )

    def note(self, message: str, **fields) -> None:
        self._emit({"event": "note", "message": message, **fields}, message)

    # ---------------------------------------------------------------- phases
    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
        self._emit(
            {"event": "phase", "phase": name, "status": "start", "detail": detail},
            f"==> {name}" + (f": {detail}" if detail else ""),
        )
        started = time.monotonic()
        self._layer_status = {}
        ok = False
        try:
            yield
            ok = True
        finally:
            self.end_step()
            seconds = round(time.monotonic() - started, 3)
            self.phase_seconds[name] = round(self.phase_seconds.get(name, 0.0) + seconds, 3)
            status = "done" if ok else "failed"
            self._emit(
                {"event": "phase", "phase": name, "status": status, "seconds": seconds},
                f"<== {name} {status} in {seconds:.1f}s",
            )

    # ----------------------------------------------------------- build steps
    def build_event(self, event: dict) -> None:
        if "step" in event:
            self.end_step()
            self._step = {
                "n": event["step"],
                "total": event["total"],
                "instruction": event["instruction"],
                "name": contract.step_name(event["step"]),
            }
            self._step_started = time.monotonic()
            shown = event["instruction"] if len(event["instruction"]) <= 160 else event["instruction"][:157] + "..."
            self._emit(
                {
                    "event": "step",
                    "step": event["step"],
                    "total": event["total"],
                    "name": self._step["name"],
                    "instruction": event["instruction"],
                },
                f"Step {event['step']}/{event['total']} : {shown}  [{self._step['name']}]",
            )
        elif "output" in event:
            step = self._step["n"] if self._step else None
            self._emit({"event": "output", "step": step, "line": event["output"]}, f"    | {event['output']}")

    def end_step(self, failed: bool = False) -> None:
        if self._step is None:
            return
        seconds = round(time.monotonic() - self._step_started, 3)
        step, self._step = self._step, None
        status = "failed" if failed else "done"
        self._emit(
            {"event": "step_" + status, "step": step["n"], "name": step["name"], "seconds": seconds},
            f"    {step['name']} {status} in {seconds:.1f}s",
        )

    # ------------------------------------------------------------ pull, push
    def layer_event(self, action: str, message: dict) -> None:
        """One message of a pull or push stream; reported when a layer's status changes."""
        status = message.get("status")
        if not status:
            return
        layer = message.get("id", "")
        if layer and self._layer_status.get(layer) == status:
            return
        if layer:
            self._layer_status[layer] = status
        aux = message.get("aux") if isinstance(message.get("aux"), dict) else None
        event = {"event": action, "layer": layer, "status": status}
        if aux:
            event["aux"] = aux
        self._emit(event, f"    {action} {layer + ': ' if layer else ''}{status}")

    def retry_event(self, event: dict) -> None:
        """A transient registry error: which attempt failed, of how many, and the wait before the next."""
        self._emit(
            event,
            f"    {event['what']}: {event['error']} "
            f"(attempt {event['attempt']}/{event['of']}, next in {event['wait_seconds']:g}s)",
        )
