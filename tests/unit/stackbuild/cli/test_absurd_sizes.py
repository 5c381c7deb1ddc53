"""Property: any size a recipe gives (lengths, pool, memory, max_model_len, batch, block) ends fast.

Hypothesis sets one size key of the default recipe (or its target's max_position_embeddings) to a
value from 1 to 2**53, the recipe loader's largest integer, spread over every order of magnitude, and
runs `geometry`; where it refuses, `build --dry-run` and `compose -o` run on the same copy. Each refused
run ends within ``SECONDS`` of CPU time and grows the resident memory of the process it runs in by under
``PEAK_BYTES``, in one `error:` line with a documented exit code. Each run is the CLI in a process forked
from the test's (the interpreter as it is, nothing imported again), measured by the kernel's account of
that process (``wait4``): tracing Python's allocations instead slows the model's loops twentyfold.
An accepted `compose` run asks vLLM's `vllm serve` parser (10-20 s of import), so compose runs only
where the gate refuses. The named examples are the sizes that once made
`geometry` walk a prefill chunk by chunk for minutes: a `max_model_len` of 10**11 and a batch of one token.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bad_input_helpers import INPUT_EXIT_CODES, assert_refused, check_command, invoke, with_base_digest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from recipe_copies import copy_recipe
from recipe_copies import set_key as _set

SECONDS = 10.0
PEAK_BYTES = 300 * 1024**2
SIZE_KEYS = (
    "serving.max_model_len",
    "serving.max_num_batched_tokens",
    "serving.max_num_seqs",
    "serving.block_size",
    "serving.num_speculative_tokens",
    "serving.tensor_parallel_size",
    "geometry.kv_cache_memory_gib",
    "target.max_position_embeddings",  # the target's config: max_model_len's default and limit
)
# 1 .. 2**53, every order of magnitude about as likely.
sizes = st.integers(min_value=0, max_value=53).flatmap(
    lambda e: st.integers(min_value=1 << max(e - 1, 0), max_value=1 << e)
)


def _recipe(root: Path, key: str, value: int) -> Path:
    if key.startswith("target."):
        recipe = copy_recipe(root, with_base_digest())
        config = recipe.parent / "configs" / "target.config.json"
        data = json.loads(config.read_text())
        data[key.split(".", 1)[1]] = value
        config.write_text(json.dumps(data))
        return recipe
    return copy_recipe(root, with_base_digest(_set(key, value)))


@dataclass(frozen=True)
class Ran:
    """What ``assert_refused`` reads of a CLI run."""

    exit_code: int
    stdout: str
    stderr: str
    exception: None = None


def _timed(args: list) -> tuple:
    """The run (in a forked child), its CPU seconds and how far it grew the child's resident memory."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, hand back what came out, end without the parent's clean-up
        os.close(read)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # what it was forked with, KiB
        try:
            result = invoke(args)
            escaped = result.exception if not isinstance(result.exception, (SystemExit, type(None))) else None
            payload = (result.exit_code, result.stdout, result.stderr, repr(escaped) if escaped else None, before)
        except BaseException as exc:  # an assertion of invoke's included
            payload = (None, "", "", repr(exc), before)
        with os.fdopen(write, "wb") as out:
            pickle.dump(payload, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as got:
        exit_code, stdout, stderr, failure, before = pickle.load(got)
    _pid, _status, usage = os.wait4(pid, 0)
    assert failure is None, (args, failure)
    return Ran(exit_code, stdout, stderr), usage.ru_utime + usage.ru_stime, (usage.ru_maxrss - before) * 1024


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SIZE_KEYS), sizes)
@example("serving.max_model_len", 10**11)
@example("serving.max_num_batched_tokens", 1)
@example("target.max_position_embeddings", 1 << 53)
def test_a_refused_size_ends_fast_in_one_line(key, value):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recipe = _recipe(root, key, value)
        out = root / "out.compose.yaml"
        result, seconds, peak = _timed(check_command("geometry", recipe, out))
        if not result.exit_code:
            return  # accepted: not a refusal
        for name in ("geometry", "build", "compose"):
            if name != "geometry":
                result, seconds, peak = _timed(check_command(name, recipe, out))
            assert result.exit_code in INPUT_EXIT_CODES, (name, key, value, result.stderr)
            assert_refused(result, result.exit_code)
            assert seconds < SECONDS, (name, key, value, seconds)
            assert peak < PEAK_BYTES, (name, key, value, peak)
