"""Median wall and CPU seconds of a call repeated: the timing the in-process benches share."""

from __future__ import annotations

import statistics
import time


def median_times(fn, repeats: int) -> tuple[dict, object]:
    """(``{"wall_s", "cpu_s"}`` medians over ``repeats`` calls of ``fn``, what its last call returned)."""
    wall, cpu, got = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        got = fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {"wall_s": round(statistics.median(wall), 4), "cpu_s": round(statistics.median(cpu), 4)}, got
