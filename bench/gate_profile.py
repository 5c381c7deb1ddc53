"""Where the gate step's time goes, from Python's import-time profile inside the image.

The gate's RUN is re-run in a container of the image the build ran it on (its parent
layer in the image's history, so no record or report the gate wrote is there), with
``PYTHONPROFILEIMPORTTIME=1`` (Python's ``-X importtime``). A second container imports
only ``vllm.v1.core.kv_cache_utils``, the floor (and once more with the cyclic GC off,
as the gate runs). Modules the gate imports beyond the
floor's, summed by package, are what the gate adds above it; the rest of its wall time
that is not imports is its own work (planning, simulating, writing the report) and the
container's start: the gate once more under cProfile says which of its own functions
take it.
"""

from __future__ import annotations

import json
import re
import shlex
import time

LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")
FLOOR_MODULE = "vllm.v1.core.kv_cache_utils"


def parse_importtime(stderr: str) -> dict[str, tuple[int, int]]:
    """module -> (self us, cumulative us) from ``-X importtime`` lines (the first import of each)."""
    modules: dict[str, tuple[int, int]] = {}
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match:
            modules.setdefault(match.group(4), (int(match.group(1)), int(match.group(2))))
    return modules


def package_of(module: str, depth: int = 2) -> str:
    return ".".join(module.split(".")[:depth])


def parent_of_step(engine, image_id: str, instruction: str) -> str:
    """The id of the image a build step ran on: the history entry below the step's own."""
    command = instruction.split(" ", 1)[1] if instruction.startswith("RUN ") else instruction
    history = engine.client.api.history(image_id)  # newest first
    for index, entry in enumerate(history):
        if (entry.get("CreatedBy") or "").endswith(command) and index + 1 < len(history):
            parent = history[index + 1].get("Id")
            if parent and parent != "<missing>":
                return parent
    raise RuntimeError(f"no local parent image for the step {instruction[:60]!r} in {image_id[:19]}")


def run_profiled(engine, image: str, command: list[str]) -> tuple[float, dict[str, tuple[int, int]]]:
    """Run ``command`` in a new container of ``image``: wall seconds (container start included) and the profile."""
    start = time.perf_counter()
    container = engine.client.containers.run(
        image,
        command,
        entrypoint=[],
        environment={"PYTHONPROFILEIMPORTTIME": "1"},
        detach=True,
        network_mode="none",
    )
    try:
        status = container.wait()
        seconds = time.perf_counter() - start
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    if status.get("StatusCode") != 0:
        tail = "\n".join(stderr.splitlines()[-5:])
        raise RuntimeError(f"{command[:3]} exited {status.get('StatusCode')} in {image[:19]}:\n{tail}")
    return seconds, parse_importtime(stderr)


# Run inside the image after the profiled gate: the gate's own functions (files outside
# site-packages and the interpreter) by cumulative seconds, as JSON on stdout.
OWN_FUNCTIONS = """
import json, pstats, sys
stats = pstats.Stats(sys.argv[1]).stats
own = {}
for (filename, line, name), (_cc, _nc, _tt, cumulative, _callers) in stats.items():
    if filename.startswith(("<", "~")) or "-packages/" in filename or "/lib/python3" in filename:
        continue
    own[f"{filename.rsplit('/', 1)[-1]}:{name}"] = max(cumulative, own.get(f"{filename.rsplit('/', 1)[-1]}:{name}", 0))
print(json.dumps(dict(sorted(own.items(), key=lambda kv: -kv[1])[:int(sys.argv[2])])))
"""


def own_functions(engine, image: str, command: str, top: int) -> dict[str, float]:
    """The gate's command under cProfile (its first ``python3`` made ``python3 -m cProfile``)."""
    if "python3 " not in command:
        return {}
    profiled = command.replace("python3 ", "python3 -m cProfile -o /tmp/gate.prof ", 1)
    script = f"{profiled} >/dev/null && python3 -c {shlex.quote(OWN_FUNCTIONS)} /tmp/gate.prof {top}"
    output = engine.client.containers.run(
        image, ["/bin/sh", "-c", script], entrypoint=[], remove=True, network_mode="none", stderr=False
    )
    return {name: round(seconds, 3) for name, seconds in json.loads(output.decode().strip().splitlines()[-1]).items()}


def profile_gate(engine, image_id: str, gate_instruction: str, top: int = 12) -> dict:
    parent = parent_of_step(engine, image_id, gate_instruction)
    command = gate_instruction.split(" ", 1)[1]
    gate_s, gate = run_profiled(engine, parent, ["/bin/sh", "-c", command])
    floor_s, floor = run_profiled(engine, parent, ["python3", "-c", f"import {FLOOR_MODULE}"])
    floor_gc_off_s, _ = run_profiled(
        engine, parent, ["python3", "-c", f"import gc; gc.disable(); import {FLOOR_MODULE}"]
    )
    pass_s, _ = run_profiled(engine, parent, ["python3", "-c", "pass"])
    above: dict[str, int] = {}
    for module, (self_us, _cumulative) in gate.items():
        if module not in floor:
            above[package_of(module)] = above.get(package_of(module), 0) + self_us
    gate_imports = sum(self_us for self_us, _ in gate.values())
    floor_imports = sum(self_us for self_us, _ in floor.values())
    return {
        "container_python_pass_s": round(pass_s, 3),
        "gate_s": round(gate_s, 3),
        "gate_imports_s": round(gate_imports / 1e6, 3),
        "gate_not_imports_s": round(gate_s - pass_s - gate_imports / 1e6, 3),
        "floor_s": round(floor_s, 3),
        "floor_imports_s": round(floor_imports / 1e6, 3),
        "floor_gc_off_s": round(floor_gc_off_s, 3),
        "imports_above_floor_s": round(sum(above.values()) / 1e6, 3),
        "imports_above_floor_by_package_s": {
            name: round(us / 1e6, 3) for name, us in sorted(above.items(), key=lambda kv: -kv[1])[:top]
        },
        "gate_own_functions_cumulative_s": own_functions(engine, parent, command, top),
        "floor_module_cumulative_s": round(floor.get(FLOOR_MODULE, (0, 0))[1] / 1e6, 3),
        "torch_cumulative_in_floor_s": round(floor.get("torch", (0, 0))[1] / 1e6, 3),
    }
