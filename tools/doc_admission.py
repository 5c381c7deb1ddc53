"""The worked examples of gate.md: one request's admission, the pool's headroom and what `fit`
finds (tools/doc_sections.py)."""

from __future__ import annotations

from pathlib import Path

from doc_format import REPO, _n, _one

from geometry.verdict.gate_run import run_gate
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

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
    """The default recipe's admission count, worked: the steps, the blocks held per group, the count."""
    from geometry.plan.concurrency import NULL_BLOCKS, request_prefill

    run, at_once = _default_run()
    plan, top = run.report.with_drafter, at_once.max_model_len
    fit = {label: dict(zip(at_once.contexts, fits)) for label, fits in at_once.fits.items()}
    one = fit["with_drafter"][top]
    chunks = request_prefill(plan, run.inputs, "with_drafter", top).chunks
    first, last = _one(set(chunks[:-1]), "prefill steps before the last"), chunks[-1]
    pool = plan.num_blocks - NULL_BLOCKS
    shorter = ", ".join(
        f"{_n(f.admitted)} at {_short(n)} ({_n(f.blocks_per_request)} blocks)"
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
        f"1 + ({_n(pool)} - {_n(one.need_blocks)}) // {_n(one.blocks_per_request)} = {_n(one.admitted)} admitted "
        f"(vLLM logs {_n(plan.num_blocks)} / {_n(one.vllm_blocks_per_request)} = {one.vllm_max_concurrency:.2f}, "
        f"its specs' blocks per request); {shorter}; {_n(bare.admitted)} at {_short(top)} for the target alone "
        f"without speculation ({_held(bare_plan, bare)} = {_n(bare.blocks_per_request)} of "
        f"{_n(bare_plan.num_blocks)} blocks). With prefix caching off (`none`): {_n(off_fit.prefill_chunks)} steps "
        f"of {_n(off_steps)}, {_held(off_run.report.with_drafter, off_fit)} = {_n(off_fit.blocks_per_request)} "
        f"blocks, {_n(off_fit.admitted)} admitted. At {_n(small)} batched tokens {_n(small_fit.admitted)} are admitted "
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
    if found.block_size == at_recipe.block_size:
        against = ": the recipe's block"
    else:
        dominated = (
            "dominated" if at_recipe.block_size not in {c.block_size for c in free.ranked} else "ranked below it"
        )
        against = (
            f", which leaves the recipe's {_n(at_recipe.block_size)} "
            f"({_n(at_recipe.requests_at_max_model_len)}, {_n(at_recipe.kv_tokens)}) {dominated}"
        )
    return (
        f"On the default recipe the first is block {_n(best.block_size)}{with_dtype}: "
        f"{_n(best.requests_at_max_model_len)} requests of {_short(top)} tokens at once (the recipe's: "
        f"{_n(own.requests_at_max_model_len)}), a KV capacity of {_n(best.kv_tokens)} tokens instead of "
        f"{_n(own.kv_tokens)}, prefix-cache hits every {_n(best.hit_alignment_tokens)} tokens instead "
        f"of {_n(own.hit_alignment_tokens)}. Turning prefix caching off gives {_n(off)} at once"
        + (f", as block {_n(same[0].block_size)} with hits does" if same else "")
        + f"; with `--allow serving.enable_prefix_caching` the search tries {_n(opened.evaluated)} settings "
        "(`bench/fit_bench.py` times it beside one `geometry` run)."
        f" The 2x GB10 recipe without `block_size` gets {_n(found.block_size)} "
        f"({_n(found.requests_at_max_model_len)} requests of {_short(gb10_top)}, "
        f"{_n(found.kv_tokens)} tokens){against}.\n"
    )
