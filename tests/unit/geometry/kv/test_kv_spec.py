"""A KV spec kind's rules live in its class (geometry/kv/kv_spec.py): no other module of the simulator
names a kind, by vLLM's class name or by a kind word, so none can branch on it; and each kind
answers what the grouping, prefix-cache, capacity and request code ask of it."""

from __future__ import annotations

import ast

import pytest
from support.repo import REPO

from geometry.kv.kv_spec import (
    SPEC_KINDS,
    CircularBufferSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    StateBlocks,
    spec_kind,
)

KIND_WORDS = {"full", "mla", "sliding", "circular", "mamba"} | set(SPEC_KINDS)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def test_no_module_but_kv_spec_names_a_kind():
    simulator = [p for p in (REPO / "geometry").rglob("*.py") if "oracle" not in p.parts and p.name != "kv_spec.py"]
    assert len(simulator) > 20
    found = []
    for path in simulator:
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in KIND_WORDS and id(node) not in docs:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}")
    assert found == []


def _spec(cls, **extra):
    attention = dict(num_kv_heads=2, head_size=64, head_size_v=64, dtype_bytes=2, dtype="bfloat16")
    if cls is MambaSpec:
        return MambaSpec(block_size=1024, state_bytes=3000, **extra)
    return cls(block_size=16, **attention, **extra)


@pytest.mark.parametrize(
    "cls, keeps, state, cacheable, fine, draft_kept, rule",
    [
        (FullAttentionSpec, True, False, True, True, False, "per_token"),
        (MLAAttentionSpec, True, False, True, True, False, "per_token"),
        (SlidingWindowSpec, False, False, True, False, True, "window"),
        (CircularBufferSpec, False, False, False, False, True, "fixed"),
        (MambaSpec, False, True, True, True, True, "state"),
    ],
)
def test_each_kind_answers_for_itself(cls, keeps, state, cacheable, fine, draft_kept, rule):
    spec = _spec(cls, sliding_window=128) if cls is SlidingWindowSpec else _spec(cls)
    assert spec_kind(cls.vllm_class) is cls
    assert (cls.keeps_every_token, cls.holds_state, cls.prefix_cacheable) == (keeps, state, cacheable)
    assert (cls.fine_grained_lookup, cls.merge_keeps_draft) == (fine, draft_kept)
    assert spec.per_request(StateBlocks(align=False, speculative=7)).rule == rule


def test_pages_as_vllm_counts_them():
    # 2 heads x (64 + 64) x 2 B = 512 B per token; 16 tokens a block.
    assert _spec(FullAttentionSpec).page_size_bytes == 16 * 512
    # MLA latent: one head of 576 in fp8 is 576 B per token.
    mla = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype_bytes=1, dtype="uint8")
    assert mla.page_size_bytes == 64 * 576
    # The sparse indexer keys: one 132 B state per 4 tokens (index_kpool 4).
    indexer = MLAAttentionSpec(
        block_size=64, num_kv_heads=1, head_size=132, dtype_bytes=1, dtype="uint8", state_tokens=4, cache_role="indexer"
    )
    assert (indexer.page_size_bytes, indexer.bytes_per_token) == (16 * 132, 33)
    assert MambaSpec(block_size=1024, state_bytes=3000, page_size_padded=4096).page_size_bytes == 4096


def test_unify_pads_or_grows_by_kind():
    full, mla, mamba = _spec(FullAttentionSpec), _spec(MLAAttentionSpec), _spec(MambaSpec)
    assert full.unified_to(3 * full.page_size_bytes, "a").block_size == 48  # a multiple: the block grows
    assert full.unified_to(full.page_size_bytes + 8, "a").page_size_padded == full.page_size_bytes + 8
    assert mamba.unified_to(8192, "m").page_size_padded == 8192
    with pytest.raises(Exception, match="cannot be padded"):
        mla.unified_to(mla.page_size_bytes + 8, "model.layers.3.self_attn.mla_attn")
