"""The rows of a plan: one per layer (its spec's block, heads, dtype and pages) and one per KV-cache
group (its spec class, roles, block, bytes, draft tag and the blocks a request holds) (stdlib only)."""

from __future__ import annotations

from geometry.image_contract import Behaviour
from geometry.kv.kv_spec import KVCacheSpec, StateBlocks
from geometry.model.inputs import GeometryInputs
from geometry.model.model import Model
from geometry.plan.report import GroupRow, LayerRow


def plan_rows(
    model: Model,
    path: str,
    groups,
    specs: dict[str, KVCacheSpec],
    inputs: GeometryInputs,
    num_spec: int,
    behaviour: Behaviour,
) -> tuple[tuple[LayerRow, ...], tuple[GroupRow, ...]]:
    """One LayerRow per layer and one GroupRow per group of a plan of ``inputs`` with ``num_spec``
    speculative tokens, as the ``behaviour`` runs it."""
    rows = []
    for layer in model.layers:
        s = specs[layer.name]
        rows.append(
            LayerRow(
                name=layer.name,
                owner=layer.owner,
                role=layer.role,
                spec_class=s.vllm_class,
                block_size=s.block_size,
                num_kv_heads=s.row_heads[0],
                head_size=s.row_heads[1],
                dtype=s.dtype_name,
                bytes_per_token=s.bytes_per_token,
                real_page_bytes=s.real_page_size_bytes,
                page_bytes=s.page_size_bytes,
                padded=s.page_size_bytes != s.real_page_size_bytes,
                block_stride_alignment=s.get_block_stride_alignment(),
            )
        )
    return tuple(rows), _group_rows(
        model, path, groups, _state(model, inputs, num_spec), _draft_tagged(inputs, behaviour)
    )


def _group_rows(model: Model, path: str, groups, state: StateBlocks, draft_tag: bool) -> tuple[GroupRow, ...]:
    """One GroupRow per group; ``draft_tag``: the release's specs carry ``is_draft`` (else no group is
    a draft group)."""
    roles = {layer.name: layer.role for layer in model.layers}
    return tuple(
        GroupRow(
            i,
            gs[0].vllm_class,
            tuple(sorted({roles[n] for n in names})),
            tuple(names),
            gs[0].block_size,
            sum(s.page_size_bytes for s in gs),
            draft_tag and _group_is_draft(path, gs),
            gs[0].per_request(state),
        )
        for i, (names, gs) in enumerate(groups)
    )


def _group_is_draft(path: str, specs: list[KVCacheSpec]) -> bool:
    """The draft tag the group's spec carries.  Packed groups wrap per-layer
    specs (UniformTypeKVCacheSpecs); the other paths merge the layers into one
    spec, and FullAttentionSpec.merge / MLAAttentionSpec.merge build a fresh
    spec that drops ``is_draft`` (KVCacheSpec.merge deep-copies and keeps it)."""
    if path in ("packed", "uniform_type"):
        return any(s.is_draft for s in specs)
    return specs[0].is_draft and specs[0].merge_keeps_draft


def _state(model: Model, inputs: GeometryInputs, num_spec: int) -> StateBlocks:
    """What each mamba group's ``MambaSpec`` says of a request's blocks: the cache mode, one
    speculative block per speculative token, the prefill-checkpoint blocks
    (``num_prefill_checkpoint_blocks``: one for GLM-5.3's KDA layers under FlashKDA, one when the
    layers export a prefill checkpoint alignment) and that alignment."""
    exported = model.architecture.prefill_checkpoint_alignment
    return StateBlocks(
        align=inputs.mamba_cache_mode == "align",
        speculative=num_spec,
        checkpoint_blocks=max(model.prefill_checkpoint_blocks, int(exported is not None)),
        checkpoint_alignment=model.prefill_checkpoint_alignment or exported,
    )


def _draft_tagged(inputs: GeometryInputs, behaviour: Behaviour) -> bool:
    """Whether a drafter layer's spec carries vLLM's ``is_draft`` tag: the release's own, or the patch
    series' (every series sets it where the release does not: OVERLAY_CONTRACT.md)."""
    return inputs.vllm.spec_draft_tag or behaviour is Behaviour.OVERLAY
