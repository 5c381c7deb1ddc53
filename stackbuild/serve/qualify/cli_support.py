"""`build.py qualify`'s options turned into a qualification: the recipe's facts, the API key, the outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from stackbuild.core.errors import UsageError
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.qualify import measure, report
from stackbuild.serve.qualify.client import Server
from stackbuild.serve.qualify.result import Qualification
from stackbuild.serve.qualify.run import Target, qualify


def target_of(recipe_path: Optional[Path], model: Optional[str], allow_degenerate: bool) -> Target:
    if recipe_path is None:
        return Target(model=model, allow_degenerate=allow_degenerate)
    from stackbuild.core.gate import recipe_geometry

    recipe = load_recipe(recipe_path)
    cache = recipe_geometry(recipe).report.with_drafter.prefix_cache
    return Target(
        recipe=str(recipe.path),
        model=model or recipe.serving.served_model_name,
        speculation=recipe.serving.num_speculative_tokens > 0,
        prefix_caching=bool(cache and cache.can_hit),
        hit_alignment_tokens=cache.hit_alignment_tokens if cache else None,
        min_decode_tokens_per_s=recipe.qualify.min_decode_tokens_per_s,
        min_acceptance=recipe.qualify.min_acceptance,
        allow_degenerate=allow_degenerate,
    )


def api_key(var: Optional[str]) -> Optional[str]:
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable is not set or empty")
    return value


def check_out_dir(out_dir: Optional[Path]) -> None:
    from stackbuild.core.errors import OutputError

    if out_dir is not None and not out_dir.is_dir():
        raise OutputError(f"--out {out_dir}: not an existing directory")
    if out_dir is not None and not os.access(out_dir, os.W_OK):
        raise OutputError(f"--out {out_dir}: not writable")


def run_qualify(
    *,
    url,
    recipe_path,
    model,
    api_key_env,
    baseline_url,
    out_dir,
    max_tokens,
    runs,
    warmup,
    ready_timeout,
    prefix_blocks,
    allow_degenerate,
) -> tuple[Qualification, str, list[Path]]:
    check_out_dir(out_dir)
    key = api_key(api_key_env)
    target = target_of(recipe_path, model, allow_degenerate)
    settings = measure.Settings(
        max_tokens=max_tokens, warmup=warmup, runs=runs, ready_timeout_s=ready_timeout, prefix_blocks=prefix_blocks
    )
    baseline = Server(baseline_url, key, role="--baseline-url") if baseline_url else None
    result = qualify(Server(url, key), target, settings, baseline)
    written = []
    if out_dir is not None:
        from stackbuild.core.atomic import replace_text

        path = out_dir / report.JSON_NAME
        replace_text(path, json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
        written += [path, report.figure(result, out_dir / report.FIGURE_NAME)]
    return result, report.table(result), written
