"""`build.py qualify`'s options turned into a qualification: the recipe's facts, the API key, the outputs, and
the record `--attach` pushes (stackbuild/image/qualification.py pushes it)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from geometry import Behaviour
from stackbuild.core.errors import OutputError, UsageError
from stackbuild.core.qualification_record import QualificationRecord
from stackbuild.core.recipe import load_recipe
from stackbuild.core.reference import ImageReference
from stackbuild.serve.qualify import allocation, measure, report, result_file
from stackbuild.serve.qualify import server_log as server_log_mod
from stackbuild.serve.qualify.client import Server
from stackbuild.serve.qualify.record import qualification_record
from stackbuild.serve.qualify.result import Qualification
from stackbuild.serve.qualify.run import BaselineResult, Target, qualify

# The variable the generated compose env file and vLLM's --api-key read (docs/serving.md).
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"


@dataclass(frozen=True)
class QualifyRun:
    """A qualification measured: the result, its table (for stderr), the files written, and the record made
    for the image it is to be attached to (None without one)."""

    result: Qualification
    text: str
    written: tuple[Path, ...]
    record: Optional[QualificationRecord] = None


def target_of(
    recipe_path: Path, model: Optional[str], allow_degenerate: bool, behaviour: Behaviour, server_log
) -> Target:
    """The recipe's facts and the gate's prediction for the vLLM ``behaviour`` the server runs."""
    from stackbuild.core.gate import recipe_geometry

    recipe = load_recipe(recipe_path)
    run = recipe_geometry(recipe, vllm_behaviour=behaviour)
    cache = run.report.with_drafter.prefix_cache
    return Target(
        recipe=str(recipe.path),
        predicted=allocation.predict(recipe, run),
        server_log=server_log_mod.read(server_log) if server_log is not None else None,
        model=model or recipe.serving.served_model_name,
        model_source="--model" if model else "the recipe's serving.served_model_name (--model names another)",
        max_model_len=recipe.serving.max_model_len,
        speculation=recipe.serving.num_speculative_tokens > 0,
        prefix_caching=bool(cache and cache.can_hit),
        hit_alignment_tokens=cache.hit_alignment_tokens if cache else None,
        min_decode_tokens_per_s=recipe.qualify.min_decode_tokens_per_s,
        min_acceptance=recipe.qualify.min_acceptance,
        allow_degenerate=allow_degenerate,
    )


def api_key(var: Optional[str]) -> Optional[str]:
    """The key in ``var``; with no --api-key-env, VLLM_API_KEY's, or none when it is unset (a server without a
    key). A variable named with --api-key-env must be set."""
    if var is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or None
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable is not set or empty")
    return value


def check_out_dir(out_dir: Optional[Path]) -> None:
    """Before anything is measured: --out is a writable directory, or one that can be made (its nearest existing
    ancestor a writable directory); it is made when the result is written."""
    if out_dir is None:
        return
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"--out {out_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK):
        raise OutputError(f"--out {out_dir}: {existing} is not writable")


def run_qualify(
    *,
    url,
    recipe_path,
    model,
    behaviour,
    server_log,
    api_key_env,
    baseline_url,
    baseline_result,
    out_dir,
    max_tokens,
    runs,
    warmup,
    ready_timeout,
    prefix_blocks,
    allow_degenerate,
    subject: Optional[ImageReference] = None,
    notify=lambda line: None,
) -> QualifyRun:
    """The qualification the options ask for, written under ``out_dir`` when given; with ``subject``, the
    record of it for that image. ``notify(line)``: each notice as it is decided (stderr)."""
    if baseline_url and baseline_result:
        raise UsageError("--baseline-url and --baseline-result: give one baseline, not both")
    key = api_key(api_key_env)
    target = target_of(recipe_path, model, allow_degenerate, behaviour, server_log)
    check_out_dir(out_dir)
    settings = measure.Settings(
        max_tokens=max_tokens, warmup=warmup, runs=runs, ready_timeout_s=ready_timeout, prefix_blocks=prefix_blocks
    )
    if baseline_result is not None:
        baseline = BaselineResult(baseline_result, result_file.read(baseline_result))
    else:
        baseline = Server(baseline_url, key, role="--baseline-url") if baseline_url else None
    result = qualify(Server(url, key), target, settings, baseline, notify)
    written = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = result_file.write(result, out_dir / report.JSON_NAME)
        written += [path, report.figure(result, out_dir / report.FIGURE_NAME)]
    record = qualification_record(result, recipe_path, subject) if subject is not None else None
    return QualifyRun(result, report.table(result), tuple(written), record)
