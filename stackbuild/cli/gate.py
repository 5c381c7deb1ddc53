"""The geometry gate's commands on the host: geometry (the simulator and the gate on a recipe) and fit
(the settings that pass it)."""

from __future__ import annotations

import click

from geometry import KEEPABLE, Behaviour
from stackbuild.cli.options import json_option, recipe_option
from stackbuild.cli.output import print_json
from stackbuild.core.recipe import load_recipe


def _contexts(_ctx, _param, value):
    """``--context 8192,32K,1M`` -> token counts (K = 1,024 tokens, M = 1,048,576)."""
    if value is None:
        return None
    out = []
    for item in value.split(","):
        tokens = _tokens(item)
        if tokens is None:
            raise click.BadParameter(f"{item.strip()!r} is not a positive token count (e.g. 8192, 32K, 1M)")
        out.append(tokens)
    return out


def _tokens(text: str) -> int | None:
    """``8192``, ``32K``, ``1M`` -> tokens (None: not a positive count)."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() and int(digits) >= 1 else None


def _lengths(_ctx, _param, value):
    """``--lengths 6000:200,32K,128K:4096`` -> [(prompt, output or None), ...]: PROMPT:OUTPUT is a prompt and
    its output; a length alone is a prompt and output making that length (the report says how it splits)."""
    if value is None:
        return None
    out = []
    for item in value.split(","):
        prompt, _, output = item.partition(":")
        p, o = _tokens(prompt), (_tokens(output) if output else None)
        if p is None or (output and o is None):
            raise click.BadParameter(f"{item.strip()!r} is not PROMPT[:OUTPUT] in tokens (e.g. 6000:200, 32K, 1M:4K)")
        out.append((p, o))
    return out


@click.command()
@recipe_option
@json_option
@click.option("--stock", is_flag=True, help="Model stock vLLM (no overlay) instead of the patched tree.")
@click.option(
    "--lengths",
    callback=_lengths,
    default=None,
    metavar="PROMPT[:OUTPUT][,...]",
    help="Add 'requests sent together' (stock and overlay): prompt and output lengths in tokens (e.g. "
    "6000:200,32K); a length alone is split into a prompt and an output. With only a pool flag: the 'requests "
    "at once' lengths.",
)
@click.option(
    "--num-gpu-blocks-override",
    type=click.IntRange(min=1),
    default=None,
    help="The pool the server runs with --num-gpu-blocks-override (blocks, null block included).",
)
@click.option(
    "--kv-cache-memory-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="The KV memory the server runs with --kv-cache-memory-bytes (bytes per rank).",
)
@click.option(
    "--context",
    "contexts",
    callback=_contexts,
    default=None,
    metavar="N[,N...]",
    help="Request lengths for 'requests at once' (e.g. 8192,32K,1M); default 32K, 128K, 1M up to "
    "max_model_len, and max_model_len.",
)
def geometry(recipe_path, as_json, stock, lengths, num_gpu_blocks_override, kv_cache_memory_bytes, contexts):
    """Run the KV-geometry simulator and gate for a recipe on the host."""
    from geometry import ContextTooLong
    from stackbuild.core.geometry_report import recipe_report

    recipe = load_recipe(recipe_path)
    try:
        report = recipe_report(
            recipe,
            behaviour=Behaviour.of_stock_flag(stock),
            contexts=contexts,
            lengths=lengths,
            num_gpu_blocks_override=num_gpu_blocks_override,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
        )
    except ContextTooLong as exc:
        raise click.BadParameter(str(exc), param_hint="--lengths" if lengths else "--context") from None
    if as_json:
        print_json(report.to_json())
    else:
        click.echo(report.text())
    report.refuse_failed(rest="the verdict above lists all" if not as_json else "the report's reasons list all")


@click.command()
@recipe_option
@json_option
@click.option("--stock", is_flag=True, help="Model stock vLLM (no overlay) instead of the patched tree.")
@click.option(
    "--keep",
    "keep",
    multiple=True,
    type=click.Choice(KEEPABLE),
    help="Hold this recipe key at the recipe's value (repeatable), e.g. serving.drafter_kv_cache_dtype "
    "to see only settings that keep the drafter's KV precision.",
)
@click.option(
    "--allow",
    "allow",
    multiple=True,
    type=click.Choice(KEEPABLE),
    help="Search this recipe key too (repeatable); serving.enable_prefix_caching is held at the recipe's "
    "value unless allowed, since turning prefix caching off loses every cache hit.",
)
def fit(recipe_path, as_json, stock, keep, allow):
    """Search block size, drafter KV dtype, prefix caching and num_speculative_tokens for settings that
    pass the geometry gate; print the best few and the recipe lines to change.

    Settings rank by the requests of max_model_len tokens that fit at once, then the KV capacity,
    then the prefix-cache hit alignment; a setting another one beats or matches on every measure
    shown (requests, capacity, hit alignment, drafter KV precision, lines to change) is left out.
    Prefix caching stays as the recipe has it unless --allow serving.enable_prefix_caching."""
    from geometry import fit_json as to_json
    from geometry import render_fit_text as render_text
    from stackbuild.core.fit import fit_recipe, refuse_unfit

    recipe = load_recipe(recipe_path)
    result = fit_recipe(recipe, behaviour=Behaviour.of_stock_flag(stock), keep=frozenset(keep), allow=frozenset(allow))
    if as_json:
        print_json(to_json(result))
    else:
        click.echo(render_text(result))
    refuse_unfit(recipe, result)
