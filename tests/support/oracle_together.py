"""Requests sent together, run by the imported vLLM's own engine core and scheduler on the CPU.

The KV cache is planned and the scheduler built as tests/support/oracle_concurrency.py does
(``engine_core_scheduler``: ``EngineCore._initialize_kv_caches``, ``--num-gpu-blocks-override`` applied by
vLLM's own planner). ``sent`` requests of ``prompt`` prompt tokens and ``max_tokens = output``
(``ignore_eos``: the stand-in samples a token that is not the end of sequence) are added at once; the
engine core's loop is stood in for: ``Scheduler.schedule``, steps handed back with
``update_from_output`` as ``EngineCore.step`` (one batch) or ``step_with_batch_queue`` (async
scheduling: ``max_concurrent_batches`` steps in flight) hands them back, a stand-in model output that
samples one token for each request past its prompt, and with a drafter (one batch) the drafts
``post_step`` gives the scheduler: ``num_speculative_tokens`` per request, none accepted. Recorded: the
most requests running together, the first step that preempts (``Request.num_preemptions``), and what
the first request holds after its prefill and while it decodes.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from geometry.model.inputs import GeometryInputs
from geometry.oracle.serving_platform import serving_platform
from support.oracle_concurrency import engine_core_scheduler, holdings

SAMPLED = 7  # the stand-in's token: not an end of sequence (SamplingParams built here carry none)


def send_together(
    inputs: GeometryInputs,
    with_drafter: bool,
    num_spec: int,
    prompt: int,
    output: int,
    sent: int,
    num_gpu_blocks_override: int | None = None,
    max_num_seqs: int | None = None,
    max_steps: int = 200_000,
) -> dict:
    """One run of ``sent`` requests sent together (call it inside ``serving_platform``)."""
    from vllm.config import set_current_vllm_config
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request

    cfg, scheduler, hasher = engine_core_scheduler(
        inputs, with_drafter, num_spec, num_gpu_blocks_override, max_num_seqs
    )
    indexed = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    async_scheduling = cfg.max_concurrent_batches > 1
    drafting = cfg.speculative_config is not None and num_spec > 0 and not async_scheduling
    requests = []
    peak_running = steps = 0
    held = peak_steps = 0  # consecutive steps at peak_running, and the longest such stretch
    preempted_at = None
    after_prefill = decode_peak = 0
    queue: deque = deque()

    def hand_back(item) -> None:
        step, samples = item
        ids = list(step.num_scheduled_tokens)
        index = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if indexed else {}
        sampled = [[SAMPLED] if samples[r] else [] for r in ids]
        scheduler.update_from_output(step, ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled, **index))
        if drafting and step.total_num_scheduled_tokens > 0:
            scheduler.update_draft_token_ids(DraftTokenIds(ids, [[SAMPLED] * num_spec for _ in ids]))

    with set_current_vllm_config(cfg):
        for i in range(sent):
            params = SamplingParams(max_tokens=output, ignore_eos=True)
            # Token ids differ per request: no request hits another's prefix cache.
            r = Request(f"r{i}", [i + 1] * prompt, params, None, block_hasher=hasher)
            scheduler.add_request(r)
            requests.append(r)
        first = requests[0]
        while scheduler.has_requests():
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"{sent} requests did not finish in {max_steps} steps")
            step = scheduler.schedule()
            samples = {rid: not scheduler.requests[rid].is_prefill_chunk for rid in step.num_scheduled_tokens}
            if any(r.num_preemptions for r in requests):
                preempted_at = steps
                break
            if len(scheduler.running) > peak_running:
                peak_running, held, peak_steps = len(scheduler.running), 0, 0
            held = held + 1 if len(scheduler.running) == peak_running else 0
            peak_steps = max(peak_steps, held)
            queue.appendleft((step, samples))
            executed = step.total_num_scheduled_tokens > 0
            if len(queue) >= cfg.max_concurrent_batches or not (executed or scheduler.has_requests()):
                hand_back(queue.pop())
            now = sum(holdings(scheduler, first.request_id))
            if first.num_computed_tokens >= prompt and not after_prefill:
                after_prefill = now
            elif after_prefill and not first.is_finished():
                decode_peak = max(decode_peak, now)
            if not executed and not queue and not scheduler.running and scheduler.waiting:
                break  # one request asks more than the pool: it waits for ever
    return {
        "sent": sent,
        "peak_running": peak_running,
        "preempted_at": preempted_at,
        "all_ran": preempted_at is None and peak_running == sent,
        "peak_steps": peak_steps,
        "after_prefill_blocks": after_prefill,
        "decode_blocks": decode_peak,
        "num_blocks": scheduler.kv_cache_config.num_blocks,
        "steps": steps,
    }


def requests_at_once(
    inputs: GeometryInputs,
    with_drafter: bool,
    num_spec: int,
    prompt: int,
    output: int,
    num_gpu_blocks_override: int | None = None,
    max_num_seqs: int | None = None,
    limit: int = 64,
) -> dict:
    """The largest N whose run all ran, counting up from one, with the runs of N and N + 1."""
    runs = []
    with serving_platform(inputs.capability_family):
        for n in range(1, limit + 1):
            run = send_together(
                inputs, with_drafter, num_spec, prompt, output, n, num_gpu_blocks_override, max_num_seqs
            )
            runs.append(run)
            if not run["all_ran"]:
                return {"requests": n - 1, "runs": runs}
    raise AssertionError(f"more than {limit} requests all ran: raise the limit")
