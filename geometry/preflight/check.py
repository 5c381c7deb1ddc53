"""The pre-flight check itself: argv + mounted configs -> an Outcome.

Fast path (stdlib only): the argv is the one the build checked and both
mounted configs have the sha256 of the recipe's snapshots -> the served flags
are the record's. Otherwise vLLM's own serve parser reads them from the argv.
Either way the mounted checkpoints are then checked from their files, never
loading a weight (mounted.py: identity, completeness, quantization and
precision, drafter wiring, tokenizer), and the KV budget is the one this start
gets (memory.py: the flags, the GPU). The fast path then passes at once when
that budget is the recipe's, or re-judges the build's geometry with it (the
simulator and the gate, no vLLM). The slow path derives every geometry input
from the flags and the mounted configs and runs the simulator, the gate and
the cross-check against the installed vLLM on them, as the build's gate did.
Either way the outcome carries the fingerprint of what was checked (the mounted
commits and config sha256s, the geometry judged, the served flags), which the
ranks of a multi-node group compare (ranks.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Sequence

from geometry.image_contract import Behaviour, Role
from geometry.model.serve_settings import ServeDefaults
from geometry.model.serving_cpu import serving_cpu_avx512_bf16
from geometry.preflight.checked import CheckedServe
from geometry.preflight.checkpoint import CheckpointUnusable
from geometry.preflight.configs import ConfigUnusable, MountedConfig, read_config
from geometry.preflight.fingerprint import Fingerprint, of_check
from geometry.preflight.memory import Budget, kv_budget
from geometry.preflight.mounted import CheckpointMismatch, Mounted, check_mounted
from geometry.preflight.outcome import (
    EXIT_CONFIG,
    EXIT_GEOMETRY,
    EXIT_MISMATCH,
    EXIT_SERVE_FLAGS,
    EXIT_UNCHECKED,
    PASSED,
    PREFIX,
    Outcome,
    refused,
)
from geometry.preflight.serve_flags import ServeFlags, ServeFlagsRejected, parse_serve_flags, prepare_parser_import

# The speculative method the simulator models (DFlash / DFlash2 drafters).
MODELLED_METHOD = "dflash"
# Gate-input fields the argv decides (the rest come from the build: GPU family, behaviour).
_SHOWN = (
    "tensor_parallel_size",
    "kv_cache_dtype",
    "drafter_kv_cache_dtype",
    "num_speculative_tokens",
    "block_size",
    "max_model_len",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "drafter_attention_backend",
    "kv_cache_memory_bytes",
    "max_num_seqs",
    "max_num_batched_tokens",
)


class Unchecked(Exception):
    """The argv asks for something the pre-flight cannot check (one line)."""


def _short(sha: str) -> str:
    return sha[:12]


def _pinned(model) -> str:
    return f"revision {model.revision[:12]}" if model.revision else "revision not pinned"


def snapshot_warnings(checked: CheckedServe, target: MountedConfig, drafter: Optional[MountedConfig]) -> list[str]:
    """One line per mounted config whose bytes are not the recipe's snapshot."""
    out = []
    for mounted, model in ((target, checked.target), (drafter, checked.drafter)):
        if mounted is not None and mounted.sha256 != model.config_sha256:
            out.append(
                f"{PREFIX} warning: {mounted.path} has sha256 {_short(mounted.sha256)}, not that of the "
                f"{mounted.role} snapshot the build checked ({_short(model.config_sha256)}, {model.id} "
                f"{_pinned(model)}): its geometry decides"
            )
    return out


def build_defaults(built, kv_cache_memory_bytes: int) -> ServeDefaults:
    """What the gate input takes where no serve flag says: the build's (``built``, the GeometryInputs the
    build checked: the GPU's capability family, the vLLM behaviour the image has, the machines the TP group
    spans, the batch the build judged, `vllm serve`'s default for the recipe's GPU unless the recipe gave
    one), with the KV budget this start gets and, on vLLM's CPU platform, the CPU this start runs on."""
    return replace(
        ServeDefaults.of(built),
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        cpu_avx512_bf16=serving_cpu_avx512_bf16(built.capability_family),
    )


def derive_inputs(flags: ServeFlags, target: MountedConfig, drafter: Optional[MountedConfig], defaults: ServeDefaults):
    """The gate input (geometry.model.inputs.GeometryInputs) for what this argv and these configs will run,
    ``defaults`` for what no flag says; Unchecked for what is not modelled, BadInput for values the
    simulator does not take."""
    from geometry.model.inputs import build_inputs

    spec = flags.speculative_config
    if spec is not None:
        method = spec.get("method")
        if method != MODELLED_METHOD:
            raise Unchecked(f"--speculative-config method {method!r} is not modelled (only {MODELLED_METHOD!r})")
        if not isinstance(spec.get("num_speculative_tokens"), int):
            raise Unchecked("--speculative-config has no num_speculative_tokens: give it explicitly")
    if flags.max_model_len is not None and flags.max_model_len <= 0:
        raise Unchecked(f"--max-model-len {flags.max_model_len} (fit to memory) is not modelled: give a length")
    return build_inputs(
        flags.settings(defaults),
        target_config=target.data,
        drafter_config=drafter.data if drafter is not None else None,
    )


def differences(
    checked: CheckedServe, argv: Sequence[str], inputs, target: MountedConfig, drafter: Optional[MountedConfig]
) -> str:
    """What differs from the build (``inputs``: the GeometryInputs re-checked), in one phrase."""
    out = []
    if not checked.as_built(tuple(argv)):
        out.append("argv edited")
    built = checked.gate_input
    for name in _SHOWN:
        now, then = getattr(inputs, name), getattr(built, name)
        if now != then:
            out.append(f"{name} {now} (build: {then})")
    if target.sha256 != checked.target.config_sha256:
        out.append(f"target config sha256 {_short(target.sha256)}")
    if drafter is None:
        out.append("no drafter")
    elif drafter.sha256 != checked.drafter.config_sha256:
        out.append(f"drafter config sha256 {_short(drafter.sha256)}")
    return ", ".join(out) or "nothing that decides the geometry"


def _read_configs(flags: ServeFlags, locate: Callable[[str], str]):
    """Both mounted configs, each refused (ConfigUnusable) when unreadable or when it is one the
    simulator would misread (geometry.model.config: the same checks the recipe loader and the gate run)."""
    from geometry.model.config import ConfigInvalid, check_drafter, check_target

    target = read_config(Role.TARGET, locate(flags.model), flags.model)
    drafter = None
    if flags.drafter_path is not None:
        drafter = read_config(Role.DRAFTER, locate(flags.drafter_path), flags.drafter_path)
    for mounted, check_one in ((target, check_target), (drafter, check_drafter)):
        if mounted is None:
            continue
        try:
            check_one(mounted.data)
        except ConfigInvalid as exc:
            raise ConfigUnusable(
                f"the {mounted.role} config {mounted.path}: "
                + (f"{exc.key}: {exc.problem}" if exc.key else exc.problem)
            ) from None
    return target, drafter


def _installed_behaviour(manifest: Optional[str]) -> Behaviour:
    from geometry.oracle.installed import overlay_applied

    if manifest is None:
        return Behaviour.STOCK
    applied, _note = overlay_applied(manifest)
    return Behaviour.OVERLAY if applied else Behaviour.STOCK


def asks_for_help(argv: Sequence[str]) -> bool:
    """``vllm serve --help[=GROUP]`` prints vLLM's help and serves nothing."""
    return any(a in ("-h", "--help") or a.startswith("--help=") for a in argv)


def check(
    argv: Sequence[str],
    checked: CheckedServe,
    *,
    locate: Callable[[str], str],
    overlay_manifest: Optional[str],
    progress: Callable[[str], None] = lambda line: None,
) -> Outcome:
    """The verdict for starting ``vllm serve ARGV`` (``locate``: an argv model path -> the directory to read;
    ``progress``: told once when the slow path starts)."""
    argv = tuple(argv)
    if asks_for_help(argv):
        return Outcome(PASSED, (f"{PREFIX} nothing to check: vLLM is asked for its help, it serves nothing",))
    same_argv = checked.as_built(argv)
    fast = False
    try:
        if same_argv:  # the build's argv names the recipe's model paths
            target = read_config(Role.TARGET, locate(checked.target.path), checked.target.path)
            drafter = read_config(Role.DRAFTER, locate(checked.drafter.path), checked.drafter.path)
            fast = target.sha256 == checked.target.config_sha256 and drafter.sha256 == checked.drafter.config_sha256
        if fast:
            flags = checked.flags
        else:
            progress(
                f"{PREFIX} {'the configs differ' if same_argv else 'the argv differs'} from the build's: "
                "re-checking with vLLM's serve parser, the simulator and vLLM's planner (seconds)"
            )
            flags = _parse(argv)
            target, drafter = _read_configs(flags, locate)
        mounted = check_mounted(checked, flags, target, drafter, locate)
    except (ConfigUnusable, CheckpointUnusable) as exc:
        return refused(EXIT_CONFIG, str(exc))
    except CheckpointMismatch as exc:
        return refused(EXIT_MISMATCH, str(exc))
    except ServeFlagsRejected as exc:
        return refused(EXIT_SERVE_FLAGS, f"vLLM's serve parser rejects the argv: {exc}")
    except ModuleNotFoundError as exc:
        return refused(EXIT_UNCHECKED, f"vLLM's serve parser cannot be imported here ({exc}): nothing was checked")
    from geometry.errors import BadInput

    warnings = [*mounted.notices, *snapshot_warnings(checked, target, drafter)]
    budget = kv_budget(
        kv_cache_memory_bytes=flags.kv_cache_memory_bytes,
        gpu_memory_utilization=flags.gpu_memory_utilization,
        tensor_parallel_size=flags.tensor_parallel_size,
        weights_bytes=mounted.tensor_bytes,
        recipe_bytes=checked.gate_input.kv_cache_memory_bytes,
    )
    if budget.kv_cache_memory_bytes <= 0:
        return refused(EXIT_GEOMETRY, f"no memory is left for the KV cache: {budget.source}", *warnings)
    if fast and checked.build_gate_failure is not None:
        return refused(
            EXIT_GEOMETRY,
            "the build's gate failed this geometry and kept the image for comparison "
            f"(build --allow-gate-failure): {checked.build_gate_failure}",
            *warnings,
        )
    if fast:
        judged = checked.gate_input.replace(kv_cache_memory_bytes=budget.kv_cache_memory_bytes)
        if budget.from_recipe:
            outcome = _as_built(checked, target, drafter, mounted, budget, warnings)
        else:
            outcome = _rejudged(checked, target, drafter, mounted, budget, warnings)
        return replace(outcome, fingerprint=fingerprint(mounted, target, drafter, judged, flags))
    try:
        inputs = derive_inputs(flags, target, drafter, build_defaults(checked.gate_input, budget.kv_cache_memory_bytes))
    except Unchecked as exc:
        return refused(EXIT_UNCHECKED, f"{exc}; nothing was checked", *warnings)
    except BadInput as exc:
        return refused(EXIT_UNCHECKED, f"re-check cannot model this: {exc}", *warnings)
    changed = differences(checked, argv, inputs, target, drafter)
    outcome = _geometry(inputs, changed, warnings, overlay_manifest, f"{mounted.summary()}; KV budget: {budget.source}")
    return replace(outcome, fingerprint=fingerprint(mounted, target, drafter, inputs, flags))


def fingerprint(
    mounted: Mounted, target: MountedConfig, drafter: Optional[MountedConfig], judged, flags: ServeFlags
) -> Fingerprint:
    """What this start checked, for the ranks of a group to compare (the image's part is run.py's)."""
    return of_check(
        target_revision=mounted.target.snapshot.commit,
        target_config_sha256=target.sha256,
        drafter_revision=mounted.drafter.snapshot.commit if mounted.drafter is not None else None,
        drafter_config_sha256=drafter.sha256 if drafter is not None else None,
        geometry=judged,
        flags=flags,
    )


def _parse(argv: Sequence[str]) -> ServeFlags:
    prepare_parser_import()
    return parse_serve_flags(argv)


def _as_built_phrase(checked: CheckedServe, target: MountedConfig, drafter: MountedConfig) -> str:
    return (
        f"the geometry the build checked (argv as built, target and drafter config.json "
        f"are the recipe's snapshots {_short(target.sha256)} / {_short(drafter.sha256)}; "
        f"{checked.target.id} {_pinned(checked.target)}, {checked.drafter.id} {_pinned(checked.drafter)})"
    )


def _as_built(
    checked: CheckedServe,
    target: MountedConfig,
    drafter: MountedConfig,
    mounted: Mounted,
    budget: Budget,
    warnings: list[str],
) -> Outcome:
    return Outcome(
        PASSED,
        (
            f"{PREFIX} PASS: {_as_built_phrase(checked, target, drafter)}; {mounted.summary()}; "
            f"KV budget: {budget.source}",
            *warnings,
        ),
    )


def _fit(verdict) -> str:
    return (
        f"{verdict.num_blocks_with:,} blocks of {verdict.bytes_per_block_with:,} B"
        if verdict.num_blocks_with is not None
        else "no KV blocks"
    )


def _rejudged(
    checked: CheckedServe,
    target: MountedConfig,
    drafter: MountedConfig,
    mounted: Mounted,
    budget: Budget,
    warnings: list[str],
) -> Outcome:
    """The build's geometry with the KV budget this start has: the simulator and the gate's serving
    limits (stdlib; the build's cross-check stands, the pages do not depend on the budget)."""
    from geometry.verdict.gate_run import run_gate

    verdict = run_gate(checked.gate_input.replace(kv_cache_memory_bytes=budget.kv_cache_memory_bytes)).verdict
    if not verdict.passed:
        more = len(verdict.reasons) - 1
        return refused(
            EXIT_GEOMETRY,
            f"with the KV budget at start ({budget.source}): {verdict.reasons[0]}"
            + (f" (and {more} more below)" if more else ""),
            *(f"  - {r}" for r in verdict.reasons[1:]),
            *warnings,
        )
    return Outcome(
        PASSED,
        (
            f"{PREFIX} PASS: {_as_built_phrase(checked, target, drafter)}; {mounted.summary()}; "
            f"{_fit(verdict)} with the KV budget at start: {budget.source}",
            *warnings,
        ),
    )


def _geometry(inputs, changed: str, warnings: list[str], overlay_manifest: Optional[str], mounted: str) -> Outcome:
    """The gate (geometry.verdict.gate_run) on the re-derived ``inputs``, then the cross-check: the installed vLLM
    plans the same inputs and the simulator must agree field by field when it models that vLLM (the
    image: patched; a host venv: stock). A geometry that does not fit is refused without it."""
    from geometry.errors import BadInput
    from geometry.oracle.cross_check import CrossCheck
    from geometry.verdict.gate_run import run_gate

    installed, unreadable = None, None
    try:
        installed = _installed_behaviour(overlay_manifest)
    except ValueError as exc:  # an unreadable overlay manifest: which vLLM is installed is unknown
        unreadable = f"{type(exc).__name__}: {exc}"
    cross_check = None if unreadable else CrossCheck(installed_behaviour=installed, only_if_passed=True)
    try:
        run = run_gate(inputs, cross_check=cross_check)
    except (BadInput, ValueError) as exc:
        return refused(EXIT_UNCHECKED, f"re-check ({changed}) cannot model this: {exc}", *warnings)
    verdict, oracle = run.verdict, run.oracle
    if not verdict.passed:
        more = len(verdict.reasons) - 1
        return refused(
            EXIT_GEOMETRY,
            f"re-checked ({changed}): {verdict.reasons[0]}" + (f" (and {more} more below)" if more else ""),
            *(f"  - {r}" for r in verdict.reasons[1:]),
            *warnings,
        )
    failure = unreadable or oracle.failure
    if failure is not None:
        return refused(
            EXIT_UNCHECKED, f"re-checked ({changed}): the installed vLLM could not plan it: {failure}", *warnings
        )
    diffs = oracle.differences
    if diffs:
        return refused(
            EXIT_UNCHECKED,
            f"re-checked ({changed}): the simulator and the installed vLLM disagree: "
            f"{diffs[0]}" + (f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""),
            *warnings,
        )
    fit = _fit(verdict)
    agrees = (
        "the installed vLLM agrees"
        if installed == inputs.vllm_behaviour
        else f"the installed vLLM ({installed}) agrees with the simulator's {installed} model"
    )
    return Outcome(
        PASSED,
        (f"{PREFIX} PASS: re-checked ({changed}): every drafter page fits, {fit}; {mounted}; {agrees}", *warnings),
    )
