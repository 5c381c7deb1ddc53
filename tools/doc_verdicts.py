"""The verdict sections: the default recipe's verdict, prefix caching, every recipe's verdict, the
pre-flight's exit codes and requests at once (tools/doc_sections.py)."""

from __future__ import annotations

from doc_format import BEHAVIOURS, REPO, _geometry, _gib, _n, _one, _table, _verdict_word

from geometry.model.inputs import GeometryInputs
from geometry.plan.capacity import kv_token_capacity
from geometry.verdict.gate_run import run_gate
from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core import errors
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe


def default_recipe_verdict() -> str:
    """The default recipe, stock vLLM 0.33.0 against the overlay: pages, blocks, capacity, verdict."""
    recipe = load_recipe(DEFAULT_RECIPE)
    gate = gate_input(recipe).to_json()
    runs = {b: _geometry(gate, b) for b in BEHAVIOURS}
    report = runs["overlay"][0]
    columns = {}
    for behaviour, (rep, verdict) in runs.items():
        plan, alone = rep.with_drafter, rep.target_only_same_spec
        kda = {(r.real_page_bytes, r.page_bytes) for r in plan.layers if r.role == "kda"}
        drafter = {(r.block_size, r.real_page_bytes) for r in plan.layers if r.owner == "drafter"}
        columns[behaviour] = dict(
            plan=plan,
            alone=alone,
            verdict=verdict,
            kda=_one(kda, "KDA pages"),
            drafter=_one(drafter, "drafter layers"),
        )
    stock, overlay = columns["stock"], columns["overlay"]
    drafter_rows = [r for r in report.with_drafter.layers if r.owner == "drafter"]
    heads = _one({r.num_kv_heads for r in drafter_rows}, "drafter KV heads")
    head_size = _one({r.head_size for r in drafter_rows}, "drafter head size")
    drafter_dtype = _one({r.dtype for r in drafter_rows}, "drafter dtype")
    per_token = overlay["verdict"].drafter_bytes_per_token
    memory = _gib(report.kv_cache_memory_bytes)

    def cell(behaviour: str, key: str) -> str:
        c = columns[behaviour]
        plan, alone, verdict = c["plan"], c["alone"], c["verdict"]
        if key == "block":
            return f"{_n(plan.block_size)} / {_n(plan.target_attention_page)} B"
        if key == "kda":
            real, padded = c["kda"]
            text = f"{_n(real)} → {_n(padded)} B"
            return "same" if behaviour == "overlay" and c["kda"] == stock["kda"] else text
        if key == "drafter":
            block, page = c["drafter"]
            shown = f"**{_n(block)}**" if block != plan.block_size else _n(block)
            return f"{shown} / {_n(page)} B"
        if key == "bytes":
            return f"{_n(plan.bytes_per_block)} / {_n(alone.bytes_per_block)}"
        if key == "blocks":
            same = " (= without the drafter)" if plan.num_blocks == alone.num_blocks else ""
            return _n(plan.num_blocks) + same
        if key == "slots":
            return _n(plan.tokens_fit)
        if key == "share":
            return f"{round(100 * kv_token_capacity(plan) / kv_token_capacity(alone))} %"
        if key == "verdict":
            exit_code = "" if verdict.passed else f" (exit {errors.GeometryGateFailed.exit_code})"
            return _verdict_word(verdict, bold=True) + exit_code
        raise KeyError(key)

    labels = {
        "block": "target block size / MLA latent page",
        "kda": "KDA state page (real, padded)",
        "drafter": (f"drafter block / page ({heads} KV heads × {head_size}, {drafter_dtype}: {_n(per_token)} B/token)"),
        "bytes": "bytes per block, with / without the drafter",
        "blocks": f"blocks in {memory}",
        "slots": "KV token slots",
        "share": "KV capacity, share of the target alone's",
        "verdict": "verdict",
    }
    intro = (
        f"The default recipe ({recipe.hardware.gpu}, TP{report.tensor_parallel_size}, "
        f"{report.target_kv_dtype} target KV, {drafter_dtype} drafter KV, `num_speculative_tokens` "
        f"{report.num_speculative_tokens}, {memory} for the KV cache), computed from its `configs/`:"
    )
    rows = [(label, cell("stock", key), cell("overlay", key)) for key, label in labels.items()]
    return "\n".join([intro, "", *_table(("", f"stock vLLM {DEFAULT_VERSION}", "with the overlay"), rows)]) + "\n"


def _prefix_caching_runs():
    gate = gate_input(load_recipe(DEFAULT_RECIPE)).to_json()
    return {
        (behaviour, on): _geometry(dict(gate, enable_prefix_caching=on, mamba_cache_mode=_mode(on)), behaviour)
        for behaviour in BEHAVIOURS
        for on in (False, True)
    }


def _mode(on: bool) -> str:
    return "align" if on else "none"


def prefix_caching() -> str:
    """The default recipe with prefix caching off (mamba_cache_mode none) and on (align)."""
    runs = _prefix_caching_runs()
    gate, mode = gate_input(load_recipe(DEFAULT_RECIPE)).to_json(), _mode
    memory = _gib(runs[("overlay", False)][0].kv_cache_memory_bytes)

    def pc(behaviour, on):
        return runs[(behaviour, on)][0].with_drafter.prefix_cache

    def plan(on):
        return runs[("overlay", on)][0].with_drafter

    def capacity(on):
        p = plan(on)
        return f"{_n(p.block_size)} / {_n(p.num_blocks)} / {_n(kv_token_capacity(p))} tokens"

    def hits(on):
        if not on:
            return "no hits"
        overlay, stock = pc("overlay", True), pc("stock", True)
        return f"**{_n(overlay.hit_alignment_tokens)} tokens**; {_n(stock.hit_alignment_tokens)} tokens"

    def blocks(on):
        p = pc("overlay", on)
        if p.hash_block_size == p.scheduler_block_size:
            return f"{_n(p.scheduler_block_size)} / same"
        return f"{_n(p.scheduler_block_size)} / {_n(p.hash_block_size)}"

    def extra_state(on):
        if not on:
            return "0"
        from geometry.plan.concurrency import request_prefill

        def state_blocks(p, on):
            inputs = GeometryInputs.from_json(dict(gate, enable_prefix_caching=on, mamba_cache_mode=mode(on)))
            held = request_prefill(
                p, inputs, "with_drafter", inputs.target.max_model_len(inputs.max_model_len), "overlay"
            ).held
            return [n for g, n in zip(p.groups, held) if g.spec_class == "MambaSpec"]

        def sized(p):
            return [g.per_request.fixed for g in p.groups if g.spec_class == "MambaSpec"]

        more = [a - b for a, b in zip(state_blocks(plan(True), True), state_blocks(plan(False), False))]
        each = _one(set(more), "extra KDA state blocks per group")
        spec = _one({a - b for a, b in zip(sized(plan(True)), sized(plan(False)))}, "extra sized state blocks")
        return (
            f"{_n(sum(more))} ({each} per KDA group: {_n(sum(more) * plan(True).bytes_per_block)} B; "
            f"vLLM's specs count {spec} per group)"
        )

    def verdicts(on):
        return f"{_verdict_word(runs[('overlay', on)][1])}; {_verdict_word(runs[('stock', on)][1])}"

    off_capacity, on_capacity = capacity(False), capacity(True)
    rows = [
        (
            f"block / blocks in {memory} / KV capacity (overlay)",
            off_capacity,
            "same" if on_capacity == off_capacity else on_capacity,
        ),
        ("scheduler block / hash block (overlay)", blocks(False), blocks(True)),
        ("cache hits land every (overlay; stock)", hits(False), hits(True)),
        (
            "KDA state blocks a request of max_model_len holds beyond `none` after its prefill (overlay)",
            extra_state(False),
            extra_state(True),
        ),
        ("verdict (overlay; stock)", verdicts(False), verdicts(True)),
    ]
    return "\n".join(_table(("", "prefix caching off (`none`)", "on (`align`, vLLM's default)"), rows)) + "\n"


# The recipes, and the one variant the gate documents: the GB10 recipe at vLLM's own block.
RECIPE_ROWS = (
    ("glm53-flash-dflash2-gb300", {}),
    ("glm53-flash-dflash2-sm100", {}),
    ("glm53-flash-dflash2-2x-gb10", {}),
    ("glm53-flash-dflash2-2x-gb10", {"block_size": None}),
)


def recipe_verdicts() -> str:
    """Every recipe (and the GB10 one at vLLM's own block size), stock and overlay."""
    rows = []
    for name, changes in RECIPE_ROWS:
        recipe = load_recipe(REPO / "recipes" / name / "recipe.yaml")
        gate = dict(gate_input(recipe).to_json(), **changes)
        runs = {b: _geometry(gate, b) for b in BEHAVIOURS}
        (stock, vs), (overlay, vo) = runs["stock"], runs["overlay"]

        def drafter_block(rep):
            return _n(_one({r.block_size for r in rep.with_drafter.layers if r.owner == "drafter"}, name))

        label = f"`{name}`" + (" at vLLM's own block (`block_size` unset)" if "block_size" in changes else "")
        s = recipe.serving
        rows.append(
            (
                label,
                f"{recipe.hardware.gpu}, TP{s.tensor_parallel_size} on {s.nodes} node{'s' * (s.nodes > 1)}",
                _n(overlay.with_drafter.block_size),
                f"{drafter_block(stock)} → {drafter_block(overlay)}",
                f"{_n(stock.bytes_per_block)} / {_n(overlay.bytes_per_block)} / "
                f"{_n(overlay.target_only_same_spec.bytes_per_block)}",
                f"{_n(kv_token_capacity(stock.with_drafter))} / {_n(kv_token_capacity(overlay.with_drafter))} / "
                f"{_n(kv_token_capacity(overlay.target_only_same_spec))}",
                f"{_verdict_word(vs)} / {_verdict_word(vo, bold=True)}",
            )
        )
    header = (
        "recipe",
        "hardware",
        "target block",
        "drafter block (stock → overlay)",
        "bytes per block: stock / overlay / target alone",
        "KV capacity, tokens: stock / overlay / target alone",
        "verdict: stock / overlay",
    )
    return "\n".join(_table(header, rows)) + "\n"


def preflight_exit_codes() -> str:
    """The codes the image's start-time pre-flight exits with (the driver's, for the same faults)."""
    from geometry.preflight import outcome

    rows = [(str(code), code.meaning) for code in sorted(errors.PREFLIGHT_ERRORS)]
    # The ranks of a multi-node group agree in the image only (the host has no group to ask).
    rows += [(str(code), code.meaning) for code in (outcome.EXIT_RANKS_DIFFER, outcome.EXIT_RANK_MISSING)]
    rows.append(
        (
            str(outcome.EXIT_BAD_MODE),
            "an unknown `GLM53_PREFLIGHT` mode, or a `GLM53_FINGERPRINT_PORT` / "
            "`GLM53_FINGERPRINT_TIMEOUT_S` that is not a port / seconds",
        )
    )
    return "\n".join(_table(("code", "what failed"), rows)) + "\n"


def default_recipe_requests() -> str:
    """The default recipe with the overlay: requests of a length at once (the together model), and per plan
    the admission count."""
    from geometry.plan.concurrency import concurrency
    from geometry.plan.together_state import DEFAULT_OUTPUT_TOKENS

    run = run_gate(gate_input(load_recipe(DEFAULT_RECIPE)))
    at_once = concurrency(run.report, run.inputs)
    labels = {
        "with_drafter": "with the drafter",
        "target_only_same_spec": "target alone, same spec",
        "without_drafter": "target alone, no speculation",
    }
    rows = []
    for i, tokens in enumerate(at_once.contexts):
        together = at_once.fits["with_drafter"][i]
        cells = [f"**{_n(together.requests)}** ({_n(together.work.prompt)} + {_n(together.work.output)})"]
        for label in labels:
            fit = at_once.fits[label][i]
            cells.append(f"{_n(fit.admitted)} ({_n(fit.blocks_per_request)} blocks each)")
        rows.append((f"{_n(tokens)} tokens", *cells))
    head = at_once.headroom
    batched = run.inputs.max_num_batched_tokens
    intro = (
        "Requests of a length at once in the default recipe's pool (with the overlay and the drafter): the "
        f"largest N such that N requests sent together all run at once under vLLM {DEFAULT_VERSION}'s scheduler "
        f"without a preemption, a length of N tokens being a prompt and an output of min({_n(DEFAULT_OUTPUT_TOKENS)}, "
        f"N/4) tokens, with the {_n(batched)}-token batches `vllm serve` runs on a "
        f"{load_recipe(DEFAULT_RECIPE).hardware.gpu} ({_n(at_once.in_flight_tokens)} tokens in flight). Beside it, "
        "per plan, the admission count: requests of N tokens admitted and prefilled one after another, each keeping "
        "the blocks its prefill leaves it, until the next is refused:"
    )
    tail = (
        f"Attention KV is {_n(head.attention_bytes_per_token)} B per token; the pool holds "
        f"{_n(head.capacity_tokens)} token slots, {head.share:.2%} of KV memory / bytes per token."
    )
    admitted = (f"admitted, {name}" for name in labels.values())
    return "\n".join([intro, "", *_table(("", "at once, with the drafter", *admitted), rows), "", tail]) + "\n"
