"""Pure-Python (stdlib only) re-implementation of the modelled vLLM releases' KV-cache
geometry decisions for hybrid targets with an optional DFlash/DFlash2 drafter,
and for a dense Qwen3 target (full attention only) on a GPU or vLLM's CPU platform.

What it reproduces, in vLLM's order (the module that does it in brackets):

1. ``Glm5NextModelConfig.verify_and_update_config``: ``kv_cache_dtype="auto"`` on
   capability family 100 with a sparse indexer becomes ``fp8`` and a non-MTP
   drafter without its own dtype stays ``auto`` (= the model dtype, bf16);
   on family 120 the sparse MLA layers run ``fp8_ds_mla`` and a drafter
   without its own dtype inherits it (model.py ``resolve_kv_dtypes``).
2. The per-layer specs each layer's ``get_kv_cache_spec`` returns, after the
   runner's ``customize_attention_spec`` (``vllm/v1/worker/gpu/attn_utils.py``),
   for every target layer (KDA/GDN ``MambaSpec``; MLA latent, sparse-indexer
   keys and kpool tail ring for GLM-5.3; ``FullAttentionSpec`` for Qwen3-Next)
   and every drafter layer (``SlidingWindowSpec`` or ``FullAttentionSpec``)
   (the architecture entries of geometry/model/architectures/, drafter.py;
   the spec fields in kv_spec.py).
3. ``Platform.update_block_size_for_backend``: phase 1 (common preferred block
   size of every non-SSM backend in layer order), phase 2
   (``_align_hybrid_block_size`` with the *first* non-SSM backend: for GLM-5.3
   that is the sparse indexer's backend) and the post-check
   ``_check_aligned_block_size`` (block_size.py).
4. ``resolve_kv_cache_layout`` (KpoolTailBackend only takes BLHNC, which makes
   GLM-5.3 block-outermost; other models get LBNHC) (grouping.py).
5. ``get_kv_cache_groups``: uniform spec / uniform type /
   ``_get_packed_kv_cache_groups`` (block-outermost) /
   ``unify_kv_cache_spec_page_size`` + ``_get_kv_cache_groups_uniform_page_size``
   (grouping.py).
6. ``get_kv_cache_config_from_groups``: ``validate_kv_cache_layout``, bytes per
   block (``_get_kv_cache_bytes_per_block`` including block-stride alignment),
   ``num_blocks = memory // bytes_per_block`` (grouping.py and ``_plan`` here).

Two behaviours are modelled: ``stock`` (the pristine release) and ``overlay`` (our
patch series, see geometry/OVERLAY_CONTRACT.md): after hybrid alignment fixes
the target block B, each drafter attention layer gets block ``P / bytes per
token`` where P is the target's own attention page at B (the MLA latent page
when the target has MLA latent layers, else its first full-attention layer's),
when that is an exact integer the drafter backend supports; otherwise stock
behaviour. The release (an entry of geometry/vllm_versions.py; ``gpu_modelled`` says which run on a
GPU) is the gate input's.

The target's backend choices are assumptions; see geometry/kv/backends.py for
what is modelled per GPU family and why. The drafter's automatic choice is
vLLM's selection, modelled in geometry/kv/drafter_backend.py.

Where vLLM would raise, the report carries ``error`` (exception type and
message) instead of numbers.
"""

from __future__ import annotations

from geometry.errors import BadInput
from geometry.image_contract import Behaviour, Role
from geometry.kv.kv_spec import KVCacheSpec, SimulatedError
from geometry.model.inputs import GeometryInputs
from geometry.model.model import Model, build_model
from geometry.plan.block_size import update_block_size
from geometry.plan.grouping import bytes_per_block, group_kv_cache, resolve_layout, validate_layout
from geometry.plan.plan_rows import plan_rows
from geometry.plan.prefix_cache import CacheGroup, PrefixCacheError
from geometry.plan.prefix_cache import resolve as resolve_prefix_cache
from geometry.plan.report import GeometryReport, GroupRow, LayerRow, Plan

__all__ = ["simulate", "GeometryReport", "Plan", "LayerRow", "GroupRow", "SimulatedError"]


def overlay_page(model: Model, specs: dict[str, KVCacheSpec]) -> int | None:
    """P of geometry/OVERLAY_CONTRACT.md: the page of the target's own attention at the aligned
    block, the MLA latent page when the target has MLA latent layers (GLM-5.3, Kimi Linear), else the
    page of its first full-attention layer (Qwen3-Next's GQA layers, a dense Qwen3); None without
    either."""
    target = [layer for layer in model.layers if layer.owner is Role.TARGET]
    for roles in (("mla_latent",), ("attention",)):
        page = next((specs[layer.name].page_size_bytes for layer in target if layer.role in roles), None)
        if page is not None:
            return page
    return None


def _apply_overlay(model: Model, specs: dict[str, KVCacheSpec], notes: list[str]) -> dict[str, KVCacheSpec]:
    """Our patch series: each drafter attention layer's page == P, the target's own attention page
    (overlay_page), where an exact block its backend runs gives it; otherwise stock behaviour."""
    p = overlay_page(model, specs)
    if p is None or model.drafter_backend is None:
        return specs
    out = dict(specs)
    for layer in model.layers:
        if layer.owner is not Role.DRAFTER:
            continue
        s = specs[layer.name]
        per_token = s.with_block_size(1).real_page_size_bytes
        if p % per_token == 0 and model.drafter_backend.supports_block_size(p // per_token):
            out[layer.name] = s.with_block_size(p // per_token)
        else:
            notes.append(
                f"overlay: no exact drafter block for {layer.name} (P={p}, {per_token} B/token); stock behaviour kept"
            )
    return out


def _target_attention_page(model: Model, specs: dict[str, KVCacheSpec]) -> int | None:
    """The real page of the target's first attention layer (MLA latent or full attention) at the
    block the platform fixed, before grouping: the page a drafter layer must equal. Unify may grow
    that layer's block to a drafter's wider page; the page the drafter had to fit is this one."""
    for layer in model.layers:
        if layer.owner is Role.TARGET and layer.role in ("mla_latent", "attention"):
            return specs[layer.name].real_page_size_bytes
    return None


def _plan(
    inputs: GeometryInputs,
    behaviour: Behaviour,
    with_drafter: bool,
    num_spec: int,
    notes: list[str],
    model: Model | None = None,
) -> tuple[Model | None, Plan]:
    """One planning run; ``model`` None: built from ``inputs`` (returned as
    None when vLLM would raise while building it)."""
    cache = None
    rows: tuple[LayerRow, ...] = ()
    try:
        if model is None:
            model = build_model(inputs, with_drafter, num_spec)
        if model.drafter_error is not None:
            raise model.drafter_error
        if inputs.mamba_cache_mode == "align" and model.architecture.align_mode_not_modelled:
            raise BadInput(model.architecture.align_mode_not_modelled)
        cache = update_block_size(model, inputs)
        specs = {layer.name: layer.build(cache) for layer in model.layers}
        target_page = _target_attention_page(model, specs)  # the drafter's layers do not change it
        if behaviour is Behaviour.OVERLAY and with_drafter:
            specs = _apply_overlay(model, specs, notes)
        layout = resolve_layout(model, specs)
        path, groups, final_specs = group_kv_cache(specs, layout)
        rows, group_rows = plan_rows(model, path, groups, final_specs, inputs, num_spec, behaviour)
        validate_layout(groups, layout)
        bpb = bytes_per_block(groups, layout)
        num_blocks = inputs.kv_cache_memory_bytes // bpb
        t_block = next(
            final_specs[layer.name].block_size
            for layer in model.layers
            if layer.owner is Role.TARGET and layer.role in ("mla_latent", "attention")
        )
        prefix = resolve_prefix_cache(
            [CacheGroup(gs[0]) for _, gs in groups],
            inputs.enable_prefix_caching,
            inputs.mamba_cache_mode,
            model.max_model_len,
        )
        return model, Plan(
            cache.block_size,
            cache.mamba_page_size_padded,
            layout,
            path,
            rows,
            group_rows,
            bpb,
            num_blocks,
            num_blocks * t_block,
            target_page,
            prefix_cache=prefix,
        )
    except PrefixCacheError as exc:
        return model, Plan(
            cache.block_size, cache.mamba_page_size_padded, None, None, rows, (), None, None, None, None, error=str(exc)
        )
    except SimulatedError as exc:
        return model, Plan(
            cache.block_size if cache else None,
            cache.mamba_page_size_padded if cache else None,
            None,
            None,
            rows,
            (),
            None,
            None,
            None,
            None,
            error=str(exc),
        )


def simulate(inputs: GeometryInputs, behaviour: Behaviour | None = None) -> GeometryReport:
    """Reproduce vLLM's KV-cache geometry for ``inputs``, as the ``behaviour``
    runs it (None: the inputs' own)."""
    behaviour = behaviour or inputs.vllm_behaviour
    notes: list[str] = []
    model, with_d = _plan(inputs, behaviour, inputs.has_drafter, inputs.num_speculative_tokens, notes)
    if model is None:  # the model itself cannot be built (vLLM raises at load)
        return GeometryReport(
            behaviour=behaviour,
            model_kind=inputs.target.kind,
            capability_family=inputs.capability_family,
            tensor_parallel_size=inputs.tensor_parallel_size,
            num_speculative_tokens=inputs.num_speculative_tokens,
            target_kv_dtype=inputs.kv_cache_dtype,
            drafter_kv_dtype=inputs.drafter_kv_cache_dtype,
            backends=(),
            kernel_block_alignment=None,
            drafter_backend=None,
            drafter_kernel_block=None,
            with_drafter=with_d,
            without_drafter=with_d,
            target_only_same_spec=with_d,
            kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
            notes=tuple(notes),
            nodes=inputs.nodes,
            requested_block_size=inputs.block_size,
        )
    if inputs.has_drafter:
        n = inputs.num_speculative_tokens
        target = model.target_only()
        if n == 0:
            _, without = _plan(inputs, behaviour, False, 0, notes, target)
            same_spec = without
        else:
            _, without = _plan(inputs, behaviour, False, 0, notes)
            _, same_spec = _plan(inputs, behaviour, False, n, notes, target)
    else:
        without = same_spec = with_d
    backends = model.attention_backends
    db = model.drafter_backend
    return GeometryReport(
        behaviour=behaviour,
        model_kind=model.kind,
        capability_family=inputs.capability_family,
        tensor_parallel_size=inputs.tensor_parallel_size,
        num_speculative_tokens=inputs.num_speculative_tokens,
        target_kv_dtype=model.kv_target,
        drafter_kv_dtype=model.kv_drafter,
        backends=tuple(b.name for b in backends),
        kernel_block_alignment=backends[0].min_kernel_block if backends else None,
        drafter_backend=db.name if db else None,
        drafter_kernel_block=db.min_kernel_block if db else None,
        with_drafter=with_d,
        without_drafter=without,
        target_only_same_spec=same_spec,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
        notes=tuple(notes),
        nodes=inputs.nodes,
        requested_block_size=inputs.block_size,
    )
