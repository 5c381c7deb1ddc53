"""What a person reads: the table `qualify` prints on stderr, and its PNG figure."""

from __future__ import annotations

from pathlib import Path

from stackbuild.serve.qualify.result import KvCacheCheck, Latency, Qualification, Throughput

FIGURE_NAME = "qualify.png"
JSON_NAME = "qualify.json"


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _latency(name: str, lat: Latency) -> str:
    return f"{name} {_ms(lat.mean_ms)}/{_ms(lat.median_ms)}/{_ms(lat.p99_ms)} ms"


def _throughput_lines(label: str, t: Throughput) -> list[str]:
    lines = [
        f"{label}: {t.url} ({t.model}), ready in {t.readiness_s:.1f} s, speculation "
        f"{'on' if t.speculation_configured else 'off'}, {t.e2e_output_tokens_per_s:.1f} output tok/s end-to-end "
        f"(stream false, {t.run_tokens} tokens a run); streamed mean/median/p99: "
        f"{_latency('TTFT', t.ttft)}, {_latency('TPOT', t.tpot)}, {_latency('ITL', t.itl)}"
    ]
    for c in t.classes:
        lines.append(
            f"  {c.prompt_class:<8} {c.e2e_output_tokens_per_s:>9.1f} tok/s  {c.output_tokens:>6} tokens in "
            f"{c.runs} runs  TTFT {_ms(c.ttft.mean_ms)} ms  TPOT {_ms(c.tpot.mean_ms)} ms  ITL {_ms(c.itl.mean_ms)} ms"
        )
    return lines


def _kv_lines(kv: KvCacheCheck) -> list[str]:
    lines = [f"KV cache against the gate ({kv.recipe}, vLLM {kv.gate_vllm_version} {kv.behaviour}):"]
    for f in kv.figures:
        lines.append(
            f"  {f.name:<18} served {_n(f.served):>12}  gate {_n(f.predicted):>12}  "
            f"{'same' if f.matches else 'DIFFERS'}  ({f.source})"
        )
    if kv.server_log is None:
        lines.append("  (no --server-log: the log's group sizes and KV cache tokens not checked)")
    return lines


def _n(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ")"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(result: Qualification) -> str:
    z = result.sizing
    limit = f"max_model_len {z.max_model_len:,}" if z.max_model_len is not None else "no max_model_len given"
    lines = _kv_lines(result.kv_cache) + [
        f"runs: {z.run_tokens} output tokens each (--max-tokens {z.asked_run_tokens}; the server's {limit})"
        + (f", {len(z.skipped_prompts)} prompt(s) skipped" if z.skipped_prompts else "")
    ]
    lines += _throughput_lines("served", result.served)
    if result.baseline:
        lines += _throughput_lines(f"baseline ({result.baseline_source})", result.baseline)
        lines.append(f"speed-up: {result.speedup}x" if result.speedup else "speed-up: n/a")
    s = result.spec_decode
    if s.configured:
        rate = f"{s.acceptance_rate:.1%}" if s.acceptance_rate is not None else "n/a"
        lines.append(
            f"speculation: {s.drafts} drafts, {s.draft_tokens} draft tokens, {s.accepted} accepted "
            f"({rate}), mean accepted length {s.mean_accepted_length}"
        )
        lines.append(
            "  per position: "
            + "  ".join(
                f"{i}:{n} ({r:.0%})" for i, (n, r) in enumerate(zip(s.accepted_per_position, s.acceptance_per_position))
            )
        )
    else:
        lines.append("speculation: not configured")
    p = result.prefix_cache
    if p.shared_prefix_tokens:
        lines.append(
            f"prefix cache: shared {p.shared_prefix_tokens} tokens ({p.blocks} x {p.hit_alignment_tokens}, "
            f"{p.alignment_source}; {p.sizing}): hits {p.first_hit_tokens} then {p.second_hit_tokens}, "
            f"predicted {p.predicted_hit_tokens}"
        )
    else:
        lines.append(f"prefix cache: {p.sizing} ({p.sizing_note or p.alignment_source})")
    bad = [o for o in result.outputs if o.empty or o.invalid_utf8 or o.degenerate]
    lines.append(f"outputs: {len(result.outputs)} checked, {len(bad)} flagged")
    for e in result.expectations:
        lines.append(f"expect {e.key} >= {e.minimum}: measured {e.measured} ({'met' if e.met else 'NOT met'})")
    lines += [f"warning: {w}" for w in result.warnings]
    lines += [f"FAIL: {f}" for f in (*result.kv_cache.differences, *result.failures)]
    lines.append(f"verdict: {'pass' if result.passed else 'fail'}")
    return "\n".join(lines)


def _kv_panel(ax, kv: KvCacheCheck) -> None:
    """Served / gate per figure (1 = what the gate predicts), both numbers written on each bar."""
    figures = [f for f in kv.figures if f.predicted is not None]
    names, ratios, colours, notes = [], [], [], []
    for f in figures:
        served = sum(f.served) if isinstance(f.served, tuple) else f.served
        predicted = sum(f.predicted) if isinstance(f.predicted, tuple) else f.predicted
        names.append(f.name.replace("_", " "))
        ratios.append(served / predicted if served is not None and predicted else 0.0)
        colours.append("tab:green" if f.matches else "tab:red")
        notes.append(f"served {_n(f.served)}\ngate {_n(f.predicted)}")
    ax.bar(range(len(names)), ratios, color=colours)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    for i, (ratio, note) in enumerate(zip(ratios, notes)):
        ax.text(i, ratio / 2 if ratio else 0.05, note, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=15, fontsize=8)
    ax.set_ylim(0, max([1.2, *(r * 1.1 for r in ratios)]))
    ax.set_ylabel("served / gate")
    ax.set_title(f"KV cache: served vs gate ({kv.behaviour})")


def figure(result: Qualification, path: Path) -> Path:
    """The KV cache served against the gate's, acceptance per draft position, and end-to-end output tok/s per
    prompt class with and without speculation."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (kv_ax, left, right) = plt.subplots(1, 3, figsize=(16, 4.5))
    _kv_panel(kv_ax, result.kv_cache)
    s = result.spec_decode
    if s.acceptance_per_position:
        left.bar(range(len(s.acceptance_per_position)), [r * 100 for r in s.acceptance_per_position], color="tab:blue")
        left.set_xticks(range(len(s.acceptance_per_position)))
        left.set_ylim(0, 100)
    else:
        left.text(0.5, 0.5, "speculation not configured", ha="center", va="center", transform=left.transAxes)
    left.set_xlabel("draft position")
    left.set_ylabel("accepted (% of drafts)")
    left.set_title(
        f"acceptance per position ({s.acceptance_rate:.0%} overall)"
        if s.acceptance_rate is not None
        else "acceptance per position"
    )
    names = [c.prompt_class for c in result.served.classes]
    width = 0.4
    shift = width / 2 if result.baseline else 0.0
    served_label = "with speculation" if result.served.speculation_configured else "served"
    right.bar(
        [i - shift for i in range(len(names))],
        [c.e2e_output_tokens_per_s for c in result.served.classes],
        width,
        label=served_label,
        color="tab:green",
    )
    if result.baseline:
        right.bar(
            [i + shift for i in range(len(names))],
            [c.e2e_output_tokens_per_s for c in result.baseline.classes],
            width,
            label="baseline (without)",
            color="tab:gray",
        )
    right.set_xticks(range(len(names)))
    right.set_xticklabels(names)
    right.set_ylabel("output tokens / s (end-to-end)")
    speedup = f", speed-up {result.speedup}x" if result.speedup else ""
    right.set_title(f"output tok/s (temperature 0, stream false{speedup})")
    right.legend()
    fig.suptitle(f"{result.model} at {result.url}: {'pass' if result.passed else 'fail'}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
