"""Requests at once for the lengths a user names, stock and overlay, on the server's pool (stdlib only).

``build.py geometry --lengths PROMPT[:OUTPUT],...`` and the recipe's ``serving.capacity_lengths``
name the lengths; ``--num-gpu-blocks-override`` and ``--kv-cache-memory-bytes`` the pool, as vLLM
applies them (geometry/plan/at_once.py). Each row gives the count (together.py's definition), what
stops one more (a preemption, or one left waiting), and beside it the count the pool gives when each
request keeps what its prefill left it, never decoding (admission.py), with what one request holds
after its prefill and the most it holds while it decodes: where the two counts differ, the decode
phase decides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from geometry.image_contract import Behaviour
from geometry.model.inputs import GeometryInputs
from geometry.plan.at_once import at_once
from geometry.plan.concurrency import ContextTooLong, contexts_for, max_model_len_of
from geometry.plan.concurrency import admitted_requests as after_prefill_count
from geometry.plan.limits import TooMuchToStep
from geometry.plan.report import GeometryReport
from geometry.plan.together import DEFINITION
from geometry.plan.together_state import Workload, workload


def workloads(inputs: GeometryInputs, named: list[tuple[int, int | None]] | None = None) -> list[Workload]:
    """The workloads of the lengths named (``(prompt, output or None)``), else of the default lengths up to
    max_model_len and max_model_len itself; ContextTooLong for one vLLM refuses (a prompt and output longer
    than max_model_len, or an empty prompt or output)."""
    limit = max_model_len_of(inputs)
    chosen = [workload(t, o) for t, o in named] if named else [workload(t) for t in contexts_for(limit)]
    for w in chosen:
        if w.prompt < 1 or w.output < 1:
            raise ContextTooLong(f"length {w.prompt:,}:{w.output:,} needs a prompt token and an output token")
        if w.tokens > limit:
            raise ContextTooLong(
                f"length {w.prompt:,}:{w.output:,} ({w.tokens:,} tokens) is above max_model_len {limit:,} "
                "(vLLM refuses a prompt and max_tokens longer than that)"
            )
    return chosen


@dataclass(frozen=True)
class TogetherRow:
    behaviour: Behaviour
    prompt: int
    output: int
    num_blocks: int | None  # the pool, null block included
    requests: int | None  # the count (None: vLLM cannot plan)
    stopped_by: str | None  # what stops one more
    after_prefill_requests: int | None  # the count if each kept what its prefill left, never decoding
    held_after_prefill: int | None  # blocks one request holds after its prefill
    held_decoding: int | None  # the most it holds while it decodes


@dataclass(frozen=True)
class TogetherReport:
    definition: str
    num_gpu_blocks_override: int | None
    kv_cache_memory_bytes: int | None  # the override (None: the recipe's or the GPU's)
    rows: tuple[TogetherRow, ...]

    def to_json(self) -> dict:
        return {
            "definition": self.definition,
            "num_gpu_blocks_override": self.num_gpu_blocks_override,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "rows": [dict(asdict(r), behaviour=r.behaviour.value) for r in self.rows],
        }

    def lines(self) -> list[str]:
        pool = []
        if self.num_gpu_blocks_override is not None:
            pool.append(f"--num-gpu-blocks-override {self.num_gpu_blocks_override:,}")
        if self.kv_cache_memory_bytes is not None:
            pool.append(f"--kv-cache-memory-bytes {self.kv_cache_memory_bytes:,}")
        out = [
            "== requests sent together (with the drafter)" + (f", pool from {' '.join(pool)}" if pool else ""),
            f"   {self.definition}",
            "   behaviour  prompt+output      blocks  at once  stopped by                 after-prefill count  "
            "held after prefill / decoding",
        ]
        for r in self.rows:
            out.append(
                f"   {r.behaviour.value:9} {r.prompt:>9,}+{r.output:<8,} "
                f"{_fmt(r.num_blocks):>8} {_fmt(r.requests):>8}  "
                f"{(r.stopped_by or '-'):26} {_fmt(r.after_prefill_requests):>19}  "
                f"{_fmt(r.held_after_prefill)} / {_fmt(r.held_decoding)}"
            )
        return out


def _fmt(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def row(report: GeometryReport, inputs: GeometryInputs, work: Workload, num_blocks: int | None = None) -> TogetherRow:
    """One behaviour's row for ``work`` on its with-drafter plan (``num_blocks``: the override)."""
    plan = report.with_drafter
    try:
        got = at_once(plan, inputs, "with_drafter", work, report.behaviour, num_blocks)
    except TooMuchToStep as exc:  # the row says why, the rest of the report stands
        return TogetherRow(
            report.behaviour, work.prompt, work.output, plan.num_blocks, None, str(exc), None, None, None
        )
    pooled = replace(plan, num_blocks=num_blocks) if num_blocks is not None and plan.num_blocks is not None else plan
    before = after_prefill_count(pooled, inputs, "with_drafter", work.prompt + 1, report.behaviour)
    alone = got.alone
    return TogetherRow(
        report.behaviour,
        work.prompt,
        work.output,
        got.num_blocks if got.requests is not None else plan.num_blocks,
        got.requests,
        got.stopped_by if got.requests is not None else None,
        before,
        alone.after_prefill_blocks if alone else None,
        alone.decode_blocks if alone else None,
    )


def together_report(
    runs: dict[Behaviour, tuple[GeometryReport, GeometryInputs]],
    works: list[Workload],
    num_gpu_blocks_override: int | None = None,
    kv_cache_memory_bytes: int | None = None,
) -> TogetherReport:
    """Rows for every behaviour of ``runs`` (report and inputs, the memory override already applied) and
    every workload."""
    rows = tuple(row(rep, inp, w, num_gpu_blocks_override) for b, (rep, inp) in runs.items() for w in works)
    return TogetherReport(DEFINITION, num_gpu_blocks_override, kv_cache_memory_bytes, rows)
