"""What a person reads: the table `qualify` prints on stderr, and its PNG figure."""

from __future__ import annotations

from pathlib import Path

from stackbuild.serve.qualify.result import Qualification, Throughput

FIGURE_NAME = "qualify.png"
JSON_NAME = "qualify.json"


def _throughput_lines(label: str, t: Throughput) -> list[str]:
    lines = [
        f"{label}: {t.url} ({t.model}), ready in {t.readiness_s:.1f} s, "
        f"speculation {'on' if t.speculation_configured else 'off'}, {t.tokens_per_s:.1f} tok/s overall"
    ]
    for c in t.classes:
        lines.append(
            f"  {c.prompt_class:<8} {c.tokens_per_s:>9.1f} tok/s  {c.output_tokens:>6} tokens in "
            f"{c.runs} runs  TTFT {c.ttft_s * 1000:.0f} ms"
        )
    return lines


def table(result: Qualification) -> str:
    lines = _throughput_lines("served", result.served)
    if result.baseline:
        lines += _throughput_lines("baseline", result.baseline)
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
            f"prefix cache: shared {p.shared_prefix_tokens} tokens (k x {p.hit_alignment_tokens}, "
            f"{p.alignment_source}): hits {p.first_hit_tokens} then {p.second_hit_tokens}, "
            f"predicted {p.predicted_hit_tokens}"
        )
    else:
        lines.append(f"prefix cache: not probed ({p.alignment_source})")
    bad = [o for o in result.outputs if o.empty or o.invalid_utf8 or o.degenerate]
    lines.append(f"outputs: {len(result.outputs)} checked, {len(bad)} flagged")
    for e in result.expectations:
        lines.append(f"expect {e.key} >= {e.minimum}: measured {e.measured} ({'met' if e.met else 'NOT met'})")
    lines += [f"warning: {w}" for w in result.warnings]
    lines += [f"FAIL: {f}" for f in result.failures]
    lines.append(f"verdict: {'pass' if result.passed else 'fail'}")
    return "\n".join(lines)


def figure(result: Qualification, path: Path) -> Path:
    """Acceptance per draft position, and decode throughput per prompt class with and without speculation."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
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
        [c.tokens_per_s for c in result.served.classes],
        width,
        label=served_label,
        color="tab:green",
    )
    if result.baseline:
        right.bar(
            [i + shift for i in range(len(names))],
            [c.tokens_per_s for c in result.baseline.classes],
            width,
            label="baseline (without)",
            color="tab:gray",
        )
    right.set_xticks(range(len(names)))
    right.set_xticklabels(names)
    right.set_ylabel("output tokens / s")
    right.set_title("decode throughput (temperature 0, stream false)")
    right.legend()
    fig.suptitle(f"{result.model} at {result.url}: {'pass' if result.passed else 'fail'}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
