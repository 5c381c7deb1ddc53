"""Plan the KV-cache geometry with the *imported* vLLM (whatever ``vllm`` is on
sys.path: the pristine tree of a series, the image's patched one, or a patched copy
a test points PYTHONPATH at) and return it as a ``GeometryReport``.

vLLM's own code runs from the config on: ``Platform.update_block_size_for_backend``
(on the base ``Platform``; it resolves the model class through vLLM's
``ModelRegistry`` for the mamba state shapes), the runner's ``get_kv_cache_spec``
(``vllm.v1.worker.gpu.attn_utils``, which applies ``customize_attention_spec`` and
tags draft layers), ``resolve_kv_cache_layout``, ``get_kv_cache_groups``,
``get_kv_cache_config_from_groups`` and the engine core's scheduler block sizes.
The config and the layers it reads are built in vllm_config.py and layers.py;
all of it runs under the serving GPU's platform (serving_platform.py), not the
process's.
"""

from __future__ import annotations

import traceback
from dataclasses import replace as dc_replace

from geometry.image_contract import Role
from geometry.model.inputs import GeometryInputs
from geometry.oracle.cpu_shims import model_registry_fallback
from geometry.oracle.layers import register_layers
from geometry.oracle.record import comparable, compare
from geometry.oracle.serving_platform import serving_platform
from geometry.oracle.vllm_config import build_vllm_config
from geometry.plan.prefix_cache import PrefixCache, can_hit
from geometry.plan.report import GeometryReport, GroupRow, LayerRow, Plan
from geometry.plan.simulate import simulate
from geometry.vllm_versions import public_version


def planning(inputs: GeometryInputs):
    """The imported vLLM's planning module (``get_kv_cache_groups``, ``get_kv_cache_config_from_groups``,
    ``_get_kv_cache_bytes_per_block``, ``is_kv_cache_spec_uniform``): where the gate input's release keeps
    it (``VllmRelease.planning_module``), the one place the oracle branches on the release."""
    import importlib

    return importlib.import_module(inputs.vllm.planning_module)


def _build(inputs: GeometryInputs, with_drafter: bool, num_spec: int):
    """The vLLM config, with the layers in its forward context."""
    cfg, hf = build_vllm_config(inputs, with_drafter, num_spec)
    register_layers(inputs, cfg, hf, num_spec, with_drafter)
    return cfg


def _error(exc: BaseException) -> str:
    """``Type: message``; a bare ``assert`` (no message) is named by its statement, the check that failed."""
    text = str(exc)
    if not text and isinstance(exc, AssertionError) and exc.__traceback__ is not None:
        text = (traceback.extract_tb(exc.__traceback__)[-1].line or "").strip()
    return f"{type(exc).__name__}: {text}"


def _plan(inputs: GeometryInputs, with_drafter: bool, num_spec: int, drafter_backends: set | None = None) -> Plan:
    """One planning run; the names of the backends vLLM gave the drafter's layers are added to
    ``drafter_backends``."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    P = planning(inputs)
    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16) as platform:
        try:
            cfg = _build(inputs, with_drafter, num_spec)
        except (AssertionError, ValueError, NotImplementedError) as exc:
            return Plan(None, None, None, None, (), (), None, None, None, None, error=_error(exc))
        if drafter_backends is not None:
            ctx = cfg.compilation_config.static_forward_context
            drafter_backends.update(ctx[n].attn_backend.get_name() for n in ctx if n.startswith("drafter."))
        cache = cfg.cache_config
        rows: tuple = ()
        try:
            with model_registry_fallback():
                platform.update_block_size_for_backend(cfg)
            with set_current_vllm_config(cfg):
                specs = get_kv_cache_spec(cfg)
                layout = _resolve_layout(cfg, specs)
                owners = {n: (Role.DRAFTER if n.startswith("drafter.") else Role.TARGET) for n in specs}
                groups = P.get_kv_cache_groups(cfg, dict(specs))
                final = {}
                for g in groups:
                    gs = g.kv_cache_spec
                    for n in g.layer_names:
                        final[n] = gs.kv_cache_specs[n] if isinstance(gs, UniformTypeKVCacheSpecs) else gs
                rows = _rows(final, owners, specs)
                kvc = P.get_kv_cache_config_from_groups(cfg, groups, inputs.kv_cache_memory_bytes)
                bpb = P._get_kv_cache_bytes_per_block(groups, layout)
            t_rows = [r for r in rows if r.owner is Role.TARGET and r.role in ("mla_latent", "attention")]
            grows = []
            for i, g in enumerate(groups):
                gs = g.kv_cache_spec
                layer_specs = [final[n] for n in g.layer_names]
                grows.append(
                    GroupRow(
                        i,
                        type(layer_specs[0]).__name__,
                        tuple(sorted({_role(n, final[n]) for n in g.layer_names})),
                        tuple(g.layer_names),
                        layer_specs[0].block_size,
                        sum(s.page_size_bytes for s in layer_specs),
                        (
                            any(_is_draft(s) for s in layer_specs)
                            if isinstance(gs, UniformTypeKVCacheSpecs)
                            else _is_draft(gs)
                        ),
                    )
                )
            block_size = cache.block_size
            prefix = _prefix_cache(cfg, kvc)
            return Plan(
                block_size,
                cache.mamba_page_size_padded,
                layout.name,
                _path(P, groups, specs, layout),
                rows,
                tuple(grows),
                bpb,
                kvc.num_blocks,
                kvc.num_blocks * t_rows[0].block_size,
                specs[t_rows[0].name].real_page_size_bytes,  # at the platform's block, before unify
                prefix_cache=prefix,
            )
        except (AssertionError, ValueError, NotImplementedError) as exc:
            return Plan(
                cache.block_size,
                cache.mamba_page_size_padded,
                None,
                None,
                rows,
                (),
                None,
                None,
                None,
                None,
                error=_error(exc),
            )


def _is_draft(spec) -> bool:
    """The spec's draft tag (``KVCacheSpec.is_draft``; a release whose specs carry none tags nothing)."""
    return bool(getattr(spec, "is_draft", False))


def _prefix_cache(cfg, kvc) -> PrefixCache:
    """What ``EngineCore._initialize_kv_caches`` resolves for the scheduler
    (vllm/v1/engine/core.py): the scheduler's copy of the config, the cache
    block size set to the smallest prefix-cacheable group block, then
    ``resolve_kv_cache_block_sizes`` and ``resolve_cache_hit_alignment_tokens``.
    Changes ``cfg.cache_config.block_size`` as the engine core does."""
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )

    scheduler_cfg = generate_scheduler_kv_cache_config([kvc])
    groups = scheduler_cfg.kv_cache_groups
    if groups:
        participating = [g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable]
        cfg.cache_config.block_size = min(participating or [g.kv_cache_spec.block_size for g in groups])
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(scheduler_cfg, cfg)
    alignment = resolve_cache_hit_alignment_tokens(scheduler_cfg, cfg, scheduler_block, hash_block)
    enabled = bool(cfg.cache_config.enable_prefix_caching)
    return PrefixCache(
        enabled=enabled,
        hash_block_size=hash_block,
        scheduler_block_size=scheduler_block,
        hit_alignment_tokens=alignment,
        can_hit=can_hit(enabled, alignment, cfg.model_config.max_model_len),
    )


def _resolve_layout(cfg, specs):
    """``resolve_kv_cache_layout`` over the attention backends' layouts, as
    the engine core does before planning."""
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    names = [lay.name for lay in get_supported_kv_cache_layouts(get_current_attn_backends(cfg))]
    cfg.cache_config.kv_cache_layout = None
    return resolve_kv_cache_layout(cfg, [names], specs.values())


def _path(P, groups, specs, layout) -> str:
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    if P.is_kv_cache_spec_uniform(specs):
        return "uniform"
    if UniformTypeKVCacheSpecs.from_specs(specs) is not None:
        return "uniform_type"
    if layout.is_block_outermost and len({s.page_size_bytes for s in specs.values()}) > 1:
        return "packed"
    return "unified"


def _role(name: str, spec) -> str:
    from vllm.v1.kv_cache_interface import (
        CircularBufferSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    if isinstance(spec, MambaSpec):
        return "kda" if name.endswith(".self_attn") else "gdn"
    if isinstance(spec, CircularBufferSpec):
        return "kpool_tail"
    if isinstance(spec, MLAAttentionSpec):
        return "sparse_indexer" if spec.cache_role.value == "indexer" else "mla_latent"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    return "attention"


def _rows(final: dict, owners: dict, order: dict) -> tuple:
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    rows = []
    for name in order:  # vLLM's layer order
        s = final[name]
        if isinstance(s, MambaSpec):
            dtype = "/".join(str(d).replace("torch.", "") for d in s.dtypes)
            rows.append(
                LayerRow(
                    name,
                    owners[name],
                    _role(name, s),
                    type(s).__name__,
                    s.block_size,
                    0,
                    0,
                    dtype,
                    0,
                    s.real_page_size_bytes,
                    s.page_size_bytes,
                    s.page_size_bytes != s.real_page_size_bytes,
                    s.get_block_stride_alignment(),
                )
            )
            continue
        assert isinstance(s, AttentionSpec)
        tps = int(s.tokens_per_state) if s.tokens_per_state > 0 else 1
        bpt = s.num_heads * s.state_content_size_bytes // tps
        rows.append(
            LayerRow(
                name,
                owners[name],
                _role(name, s),
                type(s).__name__,
                s.block_size,
                s.num_kv_heads,
                s.head_size,
                str(s.dtype).replace("torch.", ""),
                bpt,
                s.real_page_size_bytes,
                s.page_size_bytes,
                s.page_size_bytes != s.real_page_size_bytes,
                s.get_block_stride_alignment(),
            )
        )
    return tuple(rows)


def scheduler_kv_cache_config(inputs: GeometryInputs, with_drafter: bool, num_spec: int):
    """(VllmConfig, the scheduler's KVCacheConfig) of ``inputs`` as vLLM plans them: the platform's
    block size, the specs, the groups, the pool for the KV memory. Call it inside ``serving_platform``."""
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    P = planning(inputs)
    cfg = _build(inputs, with_drafter, num_spec)
    with model_registry_fallback():
        type(current_platform).update_block_size_for_backend(cfg)
    with set_current_vllm_config(cfg):
        specs = get_kv_cache_spec(cfg)
        _resolve_layout(cfg, specs)
        groups = P.get_kv_cache_groups(cfg, dict(specs))
        kvc = P.get_kv_cache_config_from_groups(cfg, groups, inputs.kv_cache_memory_bytes)
    return cfg, generate_scheduler_kv_cache_config([kvc])


def blocks_per_request(inputs: GeometryInputs) -> list[tuple[str, int, int]]:
    """(spec class, block size, blocks) per KV-cache group of the with-drafter
    plan: the blocks one request of ``max_model_len`` tokens draws from the
    shared pool, as ``get_max_concurrency_for_kv_cache_config`` counts them
    (``cdiv(max_memory_usage_bytes, page_size_bytes)`` of the scheduler's
    group spec)."""
    from vllm.config import set_current_vllm_config
    from vllm.utils.math_utils import cdiv

    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16):
        cfg, scheduler = scheduler_kv_cache_config(inputs, inputs.has_drafter, inputs.num_speculative_tokens)
        with set_current_vllm_config(cfg):
            return [
                (
                    type(g.kv_cache_spec).__name__,
                    g.kv_cache_spec.block_size,
                    cdiv(g.kv_cache_spec.max_memory_usage_bytes(cfg), g.kv_cache_spec.page_size_bytes),
                )
                for g in scheduler.kv_cache_groups
            ]


def drafter_backend_names(inputs: GeometryInputs) -> dict[str, str]:
    """The backend vLLM's selector gives each of the drafter's layers for ``inputs`` (the
    with-drafter model), by layer name; ValueError (and AssertionError) as vLLM raises them."""
    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16):
        cfg, hf = build_vllm_config(inputs, True, inputs.num_speculative_tokens)
        register_layers(inputs, cfg, hf, inputs.num_speculative_tokens, True)
        ctx = cfg.compilation_config.static_forward_context
        return {n: layer.attn_backend.get_name() for n, layer in ctx.items() if n.startswith("drafter.")}


def vllm_kv_cache_size_tokens(inputs: GeometryInputs) -> int:
    """What the imported vLLM logs as "<device> KV cache size: N tokens" for the with-drafter plan:
    its own ``get_kv_cache_capacity`` on the worker's KV cache config (max concurrency x max_model_len)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    _require_release(inputs)
    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16):
        cfg, scheduler = scheduler_kv_cache_config(inputs, inputs.has_drafter, inputs.num_speculative_tokens)
        with set_current_vllm_config(cfg):
            return get_kv_cache_capacity(cfg, scheduler)[0]


def _require_release(inputs: GeometryInputs) -> None:
    import vllm

    installed = getattr(vllm, "__version__", "unknown")
    if public_version(installed) != public_version(inputs.vllm_version):
        raise ValueError(f"the imported vLLM is {installed}, the gate input is for vLLM {inputs.vllm_version}")


def plan_with_vllm(inputs: GeometryInputs) -> GeometryReport:
    """The geometry the imported vLLM builds for ``inputs`` (its own
    behaviour: ``inputs.vllm_behaviour`` is ignored here); ValueError when the
    imported vLLM is another release than the one ``inputs`` models."""
    _require_release(inputs)
    drafter_backends: set = set()
    with_d = _plan(inputs, inputs.has_drafter, inputs.num_speculative_tokens, drafter_backends)
    if inputs.has_drafter:
        without = _plan(inputs, False, 0)
        same = _plan(inputs, False, inputs.num_speculative_tokens)
    else:
        without = same = with_d
    sim = simulate(inputs)  # descriptive fields (the target's backend names, dtypes) only
    return dc_replace(
        sim,
        drafter_backend="/".join(sorted(drafter_backends)) or None,  # the one vLLM selected for the drafter
        with_drafter=with_d,
        without_drafter=without,
        target_only_same_spec=same,
        notes=("planned by the imported vLLM",),
    )


def compare_reports(sim: GeometryReport, vllm: GeometryReport) -> tuple[str, ...]:
    """Field-by-field differences (empty when they agree)."""
    return compare(comparable(sim), comparable(vllm))
