"""`qualify --capacity`: requests at once, asked of a running server and of the gate.

The gate's requests at once N for the length (the definition, geometry's ``AT_ONCE_DEFINITION``), for the
server's ``max_model_len`` (/v1/models) and pool (``num_gpu_blocks`` of ``vllm:cache_config_info``, which
``--num-gpu-blocks-override`` sets), is put to the server in two probes, one after the other: N requests
sent at once, then N + 1 (``--capacity-requests K``: K alone). A probe sends them through the completions
API (the prompt as token ids, one fixed id per request so no request hits another's prefix cache,
``ignore_eos`` and ``max_tokens`` the output) and reads /metrics every POLL_S seconds until all are answered:
``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:num_preemptions_total``,
``vllm:kv_cache_usage_perc`` and the engine steps so far (the count of ``vllm:iteration_tokens_total``, one
per step that produced a token). Its live figure is the most requests running together before the first
preemption, beside the gate's run of the same requests (geometry's ``sent_together``); the server's
requests at once is N when the N all ran together without a preemption and the N + 1 did not. They
differ when a probe's live peak is not the gate's peak, or one preempts and the other does not.

The polls see the running gauge, not every step: a peak the gate's run holds for fewer steps than the
server ran between two polls (a short output on a busy server) can fall between them. Such a probe is sent
again, up to PROBE_ATTEMPTS times in all; a live peak below the gate's that no attempt resolved is not a
difference but unresolved, said as such (exit 0). The polls' spacing, in seconds and in engine steps, and
the attempts are in each probe's line and in capacity.json.

Bounded: at most MAX_REQUESTS requests, each no longer than the server's ``max_model_len``, sent only to
the server at ``--url``, and each probe stopped after ``--capacity-timeout`` seconds.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from prometheus_client.parser import text_string_to_metric_families

from stackbuild.core.errors import CapacityDiffers, NotVllmServer, UsageError

MAX_REQUESTS = 64
PROBE_ATTEMPTS = 3  # sends of one probe whose live peak the polls did not resolve (the module docstring)
POLL_S = 0.1
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions"
STEPS = "vllm:iteration_tokens_total_count"  # the histogram's count: one observation per engine step
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"
JSON_NAME = "capacity.json"
FIGURE_NAME = "capacity.png"
FIRST_TOKEN_ID = 100  # request i's prompt is token FIRST_TOKEN_ID + i, repeated
SCHEMA = "glm53.capacity/v3"


@dataclass(frozen=True)
class Sample:
    """One /metrics read while the requests run (seconds since they were sent)."""

    t: float
    running: int
    waiting: int
    preemptions: int
    kv_usage: float
    steps: Optional[int] = None  # engine steps so far (None: the server does not count them)


def sample(text: str, t: float, where: str) -> Sample:
    """The gauges and the preemption counter of a /metrics page, summed over engines."""
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in (RUNNING, WAITING, KV_USAGE, PREEMPTIONS + "_total", STEPS):
                    found[s.name] = found.get(s.name, 0.0) + s.value
    except (ValueError, TypeError, IndexError) as exc:
        raise NotVllmServer(f"{where}: not Prometheus text ({str(exc)[:120]}): not a vLLM server") from None
    missing = [n for n in (RUNNING, WAITING, PREEMPTIONS + "_total") if n not in found]
    if missing:
        raise NotVllmServer(f"{where}: no {', '.join(missing)} in /metrics: not a vLLM server")
    steps = int(found[STEPS]) if STEPS in found else None
    return Sample(
        t,
        int(found[RUNNING]),
        int(found[WAITING]),
        int(found[PREEMPTIONS + "_total"]),
        found.get(KV_USAGE, 0.0),
        steps,
    )


def num_gpu_blocks(text: str) -> Optional[int]:
    """``num_gpu_blocks`` of ``vllm:cache_config_info`` (None: not exposed)."""
    for family in text_string_to_metric_families(text):
        if family.name == CACHE_CONFIG:
            for s in family.samples:
                value = s.labels.get("num_gpu_blocks", "")
                if value.isdigit():
                    return int(value)
    return None


@dataclass(frozen=True)
class Live:
    peak_running: int  # the most running together before the first preemption
    preemptions: int  # during the probe
    max_waiting: int
    peak_kv_usage: float
    seconds: float
    samples: tuple[Sample, ...]
    poll_s: float = 0.0  # the most seconds between two polls before the first preemption
    poll_steps: Optional[int] = None  # the most engine steps between them (None: the server counts none)


def live(samples: list[Sample], seconds: float) -> Live:
    """The figures of a probe's samples (the first is read before the requests are sent). The polls' spacing
    is taken up to the first poll that saw a preemption: the stretch the peak is read from."""
    base = samples[0].preemptions
    before = [s for s in samples if s.preemptions == base]
    read = samples[: len(before) + 1]
    pairs = list(zip(read, read[1:]))
    counted = all(s.steps is not None for s in read)
    return Live(
        max((s.running for s in before), default=0),
        samples[-1].preemptions - base,
        max(s.waiting for s in samples),
        max(s.kv_usage for s in samples),
        seconds,
        tuple(samples),
        max((b.t - a.t for a, b in pairs), default=0.0),
        max((b.steps - a.steps for a, b in pairs), default=0) if counted else None,
    )


@dataclass(frozen=True)
class Probe:
    """One probe: ``sent`` requests at once, the gate's run of them beside the server's."""

    sent: int
    gate_peak_running: Optional[int]
    gate_preempted_at: Optional[int]
    live: Live
    gate_peak_steps: Optional[int] = None  # the most consecutive steps the gate's run holds its peak
    attempts: int = 1  # the sends of this probe (the last is the one kept)

    @property
    def all_ran(self) -> bool:
        """The server ran every request sent together, without a preemption."""
        return self.live.peak_running == self.sent and self.live.preemptions == 0

    @property
    def peak_unresolved(self) -> bool:
        """The server showed fewer running than the gate's peak, which the gate's run holds for fewer steps
        than the server ran between two polls: the peak may have fallen between them."""
        return (
            self.gate_peak_running is not None
            and self.live.peak_running < self.gate_peak_running
            and self.gate_peak_steps is not None
            and self.live.poll_steps is not None
            and self.live.poll_steps > self.gate_peak_steps
        )

    def unresolved(self, prompt: int, output: int) -> list[str]:
        if not self.peak_unresolved:
            return []
        return [
            f"{self.sent} requests of {prompt:,}+{output:,} tokens: the gate's {self.gate_peak_running} running "
            f"together hold for {self.gate_peak_steps:,} step(s), the server ran up to {self.live.poll_steps:,} "
            f"steps between two polls (seen: {self.live.peak_running}); a longer output holds them longer"
        ]

    def differences(self, prompt: int, output: int) -> list[str]:
        out = []
        if self.gate_peak_running != self.live.peak_running and not self.peak_unresolved:
            out.append(
                f"{self.sent} requests of {prompt:,}+{output:,} tokens: the server ran "
                f"{self.live.peak_running} together before a preemption, the gate predicts {self.gate_peak_running}"
            )
        if (self.gate_preempted_at is not None) != (self.live.preemptions > 0):
            out.append(
                f"{self.sent} requests of {prompt:,}+{output:,} tokens: the server preempted "
                f"{self.live.preemptions} time(s), the gate predicts "
                + ("a preemption" if self.gate_preempted_at is not None else "none")
            )
        return out

    def line(self) -> str:
        held = f" for {self.gate_peak_steps:,} steps" if self.gate_peak_steps is not None else ""
        gate = (
            f"gate: {self.gate_peak_running} run together{held}, "
            + ("none preempted" if self.gate_preempted_at is None else f"preempted at step {self.gate_preempted_at}")
            if self.gate_peak_running is not None
            else "gate: not modelled"
        )
        steps = f", {self.live.poll_steps:,} steps" if self.live.poll_steps is not None else ""
        return (
            f"  {self.sent} sent: {gate}; server: {self.live.peak_running} ran together before a preemption, "
            f"{self.live.preemptions} preemption(s), at most {self.live.max_waiting} waiting, KV use up to "
            f"{self.live.peak_kv_usage:.0%}, {self.live.seconds:.1f} s (polls up to {self.live.poll_s:.2f} s"
            f"{steps} apart" + (f"; attempt {self.attempts}" if self.attempts > 1 else "") + ")"
        )


@dataclass(frozen=True)
class Capacity:
    """The probes of one length on one server (by default the gate's count N sent, then N + 1), and what the
    server showed of requests at once: N when the N requests all ran together and the N + 1 did not."""

    definition: str
    url: str
    model: str
    behaviour: str
    prompt: int
    output: int
    max_model_len: int
    num_gpu_blocks: Optional[int]
    gate_requests_at_once: Optional[int]
    probes: tuple[Probe, ...]

    @property
    def live_requests_at_once(self) -> Optional[int]:
        """The most requests sent together that the server all ran, when a probe of one more did not all run
        (or no more may be sent); None when the probes do not bracket it."""
        ran = [p.sent for p in self.probes if p.all_ran]
        not_ran = [p.sent for p in self.probes if not p.all_ran]
        if not ran:
            return 0 if 1 in not_ran else None
        best = max(ran)
        return best if (best + 1 in not_ran or best == MAX_REQUESTS) else None

    @property
    def unresolved(self) -> tuple[str, ...]:
        """The probes whose live peak the polls may have missed (see the module docstring)."""
        return tuple(u for p in self.probes for u in p.unresolved(self.prompt, self.output))

    @property
    def differences(self) -> tuple[str, ...]:
        out = [d for p in self.probes for d in p.differences(self.prompt, self.output)]
        live = self.live_requests_at_once
        if len(self.probes) > 1 and not out and not self.unresolved and live != self.gate_requests_at_once:
            out.append(
                f"requests at once for {self.prompt:,}+{self.output:,} tokens: the server "
                f"{live if live is not None else 'not bracketed'}, the gate {self.gate_requests_at_once}"
            )
        return tuple(out)

    def to_json(self) -> dict:
        data = {"schema": SCHEMA, **asdict(self)}
        for probe, raw in zip(self.probes, data["probes"]):
            raw["all_ran"] = probe.all_ran
        data["live_requests_at_once"] = self.live_requests_at_once
        data["differences"] = list(self.differences)
        data["unresolved"] = list(self.unresolved)
        return data

    def text(self) -> str:
        live = self.live_requests_at_once
        return "\n".join(
            [
                f"capacity: requests of {self.prompt:,} prompt + {self.output:,} output tokens sent together to "
                f"{self.url} ({self.model}; max_model_len {self.max_model_len:,}, "
                f"num_gpu_blocks {self.num_gpu_blocks if self.num_gpu_blocks is not None else 'not exposed'})",
                f"  {self.definition}",
                f"  requests at once: gate ({self.behaviour}) {self.gate_requests_at_once}, server "
                + (str(live) if live is not None else "not bracketed by these probes"),
                *(p.line() for p in self.probes),
                *(f"  DIFFERS: {d}" for d in self.differences),
                *(f"  NOT RESOLVED: {u}" for u in self.unresolved),
            ]
        )


def sent_counts(gate_count: Optional[int], requested: Optional[int]) -> tuple[int, ...]:
    """The probes' sizes: ``requested`` alone, or the gate's count and one more (within 1..MAX_REQUESTS)."""
    if requested is not None:
        return (requested,)
    n = gate_count or 0
    return tuple(k for k in (n, n + 1) if 1 <= k <= MAX_REQUESTS)


def check_request(prompt: int, output: int, sent: int, max_model_len: int) -> None:
    """UsageError for a probe beyond the bounds (before anything is sent)."""
    if not 1 <= sent <= MAX_REQUESTS:
        raise UsageError(f"--capacity-requests {sent}: between 1 and {MAX_REQUESTS}")
    if prompt + output > max_model_len:
        raise UsageError(
            f"--capacity {prompt}:{output}: {prompt + output:,} tokens is above the server's max_model_len "
            f"{max_model_len:,}"
        )


def probe(server, model: str, prompt: int, output: int, sent: int, timeout_s: float) -> Live:
    """Send the requests at once and read /metrics until they are answered (or ``timeout_s``)."""
    where = f"{server.role} {server.url}/metrics"
    start = time.monotonic()
    samples = [sample(server.metrics_text(), 0.0, where)]
    with ThreadPoolExecutor(max_workers=sent) as pool:
        futures = [
            pool.submit(server.complete_ids, model, [FIRST_TOKEN_ID + i] * prompt, output, ignore_eos=True)
            for i in range(sent)
        ]
        while not all(f.done() for f in futures):
            if time.monotonic() - start > timeout_s:
                raise UsageError(f"--capacity-timeout {timeout_s:g}: the requests were not answered in time")
            time.sleep(POLL_S)
            samples.append(sample(server.metrics_text(), time.monotonic() - start, where))
        for f in futures:
            f.result()  # a request the server refused raises its error here
    samples.append(sample(server.metrics_text(), time.monotonic() - start, where))
    return live(samples, time.monotonic() - start)


def until_resolved(measure: Callable[[], Live], judged: Callable[[Live, int], Probe]) -> Probe:
    """The probe sent (``measure``) until its polls resolve its peak, at most PROBE_ATTEMPTS times; the last
    send is kept."""
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        kept = judged(measure(), attempt)
        if not kept.peak_unresolved:
            break
    return kept


def raise_if_differs(result: Capacity) -> None:
    if result.differences:
        raise CapacityDiffers("\n".join(result.differences))


def figure(result: Capacity, path: Path) -> Path:
    """Per probe, requests running and waiting over time with the gate's run of them, and the KV cache use."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(len(result.probes), 1, figsize=(10, 3.6 * len(result.probes)), squeeze=False)
    for ax, probe in zip(axes[:, 0], result.probes):
        s = probe.live.samples
        ax.step([x.t for x in s], [x.running for x in s], where="post", label="running")
        ax.step([x.t for x in s], [x.waiting for x in s], where="post", label="waiting")
        if probe.gate_peak_running is not None:
            ax.axhline(probe.gate_peak_running, color="tab:red", linestyle="--", label="gate: run together")
        ax.set_xlabel("seconds since the requests were sent")
        ax.set_ylabel("requests")
        kv = ax.twinx()
        kv.plot([x.t for x in s], [x.kv_usage * 100 for x in s], color="tab:gray", alpha=0.6, label="KV cache use")
        kv.set_ylabel("KV cache use (%)")
        kv.set_ylim(0, 100)
        ran = "all ran together" if probe.all_ran else "not all ran together"
        ax.set_title(f"{probe.sent} requests of {result.prompt:,}+{result.output:,} tokens sent together: {ran}")
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run_capacity(
    server, recipe, model: Optional[str], behaviour, prompt: int, output: int, sent: Optional[int], timeout_s: float
) -> Capacity:
    """The probes the options ask for, each beside the gate's run of the same requests for the server's length
    and pool (``sent`` None: the gate's requests at once, then one more, so both sides of the edge show)."""
    from geometry import AT_ONCE_DEFINITION, Workload, at_once, sent_together, simulate
    from stackbuild.core.gate import gate_input

    name = server.pick_model(model or recipe.serving.served_model_name)
    max_len = server.max_model_len(name) or recipe.serving.max_model_len
    blocks = num_gpu_blocks(server.metrics_text())
    inputs = gate_input(recipe, vllm_behaviour=behaviour).replace(max_model_len=max_len)
    plan = simulate(inputs).with_drafter
    work = Workload(prompt, output)
    check_request(prompt, output, sent or 1, max_len)
    count = at_once(plan, inputs, "with_drafter", work, behaviour, blocks).requests
    probes = []
    for n in sent_counts(count, sent):
        predicted = sent_together(plan, inputs, work, behaviour, n, blocks)
        probes.append(
            until_resolved(
                lambda: probe(server, name, prompt, output, n, timeout_s),
                lambda measured, attempt: Probe(
                    n,
                    predicted.peak_running if predicted else None,
                    predicted.preempted_at if predicted else None,
                    measured,
                    predicted.peak_steps if predicted else None,
                    attempt,
                ),
            )
        )
    return Capacity(
        AT_ONCE_DEFINITION,
        server.url,
        name,
        behaviour.value,
        prompt,
        output,
        max_len,
        blocks,
        count,
        tuple(probes),
    )
