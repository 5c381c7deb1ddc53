"""KV-cache layout, grouping and bytes per block: ``resolve_kv_cache_layout``,
``get_kv_cache_groups`` (uniform spec / uniform type / packed
(block-outermost) / unified page size) and the byte arithmetic of
``get_kv_cache_config_from_groups`` (stdlib only)."""

from __future__ import annotations

import math
from collections import Counter

from geometry.kv import backends as B
from geometry.kv.kv_spec import KVCacheSpec, SimulatedError, is_uniform_type
from geometry.kv.units import cdiv, round_up
from geometry.model.model import Model


def resolve_layout(model: Model, specs: dict[str, KVCacheSpec]) -> str:
    declared = [b.layouts for b in model.attention_backends if b.layouts is not None]
    if not declared:
        cands = list(B.DEFAULT_LAYOUT_PREFERENCE)
    elif all(d == declared[0] for d in declared):
        cands = list(declared[0])
    else:
        common = set.intersection(*map(set, declared))
        prio = Counter(d[0] for d in declared)
        cands = sorted((lay for lay in B.LAYOUTS if lay in common), key=lambda lay: prio[lay], reverse=True)
        if not cands:
            raise SimulatedError("ValueError", "no KV cache layout every backend supports")
    uniq = set(specs.values())
    shapes = {s.hnc_shape for s in uniq}
    if len(shapes) > 1:
        cands = [lay for lay in cands if B.layout_is_block_compact(lay)]
        if not cands:
            raise SimulatedError("ValueError", "Specs with mixed HNC shapes need a block-compact layout")
    dcp = {s.dcp_sharded for s in uniq if s.in_dcp_layout_check}
    if len(dcp) > 1 and len({s.page_size_bytes for s in uniq}) > 1:
        cands = [lay for lay in cands if B.layout_is_block_outermost(lay)]
        if not cands:
            raise SimulatedError("ValueError", "DCP with a replicated draft needs a block-outer layout")
    return cands[0]


def _packed_groups(specs: dict[str, KVCacheSpec]) -> list[tuple[list[str], list[KVCacheSpec]]]:
    # Buckets of uniform specs: every uniformity rule compares members with
    # the bucket's first spec, so testing a newcomer against the first is enough.
    buckets: list[dict[str, KVCacheSpec]] = []
    for name, spec in specs.items():
        for bucket in buckets:
            first = next(iter(bucket.values()))
            if (
                spec.block_size == first.block_size
                and spec.dcp_sharded == first.dcp_sharded
                and first.uniform_with([spec])
            ):
                bucket[name] = spec
                break
        else:
            buckets.append({name: spec})

    bucketed = []
    for bucket in buckets:
        psl: dict[int, list[str]] = {}  # page size -> layer names
        for name, spec in bucket.items():
            psl.setdefault(spec.page_size_bytes, []).append(name)
        balanced = len({len(v) for v in psl.values()}) == 1
        max_per_page = max(len(v) for v in psl.values())
        bucketed.append((bucket, psl, balanced, max_per_page))

    min_repeats = max((mpp for _, psl, bal, mpp in bucketed if bal and len(psl) > 1), default=0)
    if min_repeats:
        values = [mpp for _, _, bal, mpp in bucketed if bal]
        best_d, best_pad = min_repeats, None
        for d in range(min_repeats, max(values) + 1):
            pad = sum((d - (x % d)) % d for x in values)
            if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
                best_pad, best_d = pad, d
        repeats = best_d if min_repeats <= max(values) else min_repeats
    else:
        repeats = None

    def num_groups_for(mpp: int, balanced: bool) -> int:
        return cdiv(mpp, repeats) if (balanced and repeats is not None) else 1

    def widest(psl: dict[int, list[str]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in psl.items())

    def is_state(bucket: dict[str, KVCacheSpec]) -> bool:
        return next(iter(bucket.values())).packs_as_state(repeats)

    anchor = max(
        (
            widest(psl, len(bucket) if is_state(bucket) else num_groups_for(mpp, bal))
            for bucket, psl, bal, mpp in bucketed
        ),
        default=0,
    )
    groups = []
    for bucket, psl, bal, mpp in bucketed:
        n = num_groups_for(mpp, bal)
        if anchor and is_state(bucket):
            per_block = max(anchor // next(iter(bucket.values())).page_size_bytes, 1)
            n = max(n, cdiv(len(bucket), per_block))
        if n == 1:
            groups.append((list(bucket), list(bucket.values())))
            continue
        pattern = list(zip(*psl.values()))
        for i in range(n):
            names = [nm for rep in pattern[i::n] for nm in rep]
            groups.append((names, [bucket[nm] for nm in names]))
    return groups


def _unify(specs: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    mx = max(pages)
    out = {}
    for name, s in specs.items():
        out[name] = s if s.page_size_bytes == mx else s.unified_to(mx, name)
    return out


def _uniform_page_groups(specs: dict[str, KVCacheSpec]) -> list[tuple[list[str], list[KVCacheSpec]]]:
    same: dict[KVCacheSpec, list[str]] = {}  # layers grouped by equal spec, in first-occurrence order
    for name, sp in specs.items():
        same.setdefault(sp, []).append(name)
    layer_buckets: list[list[str]] = []
    spec_buckets: list[list[KVCacheSpec]] = []
    for s, names in same.items():
        for lb, sb in zip(layer_buckets, spec_buckets):
            if all(sb[0].mergeable(x) for x in sb + [s]):
                lb.extend(names)
                sb.append(s)
                break
        else:
            layer_buckets.append(list(names))
            spec_buckets.append([s])
    mn = min(len(names) for names in layer_buckets)
    mx = max(len(names) for names in layer_buckets)
    group_size = mx if mx < mn * 1.5 else mn
    out = []
    for layers in layer_buckets:
        n = cdiv(len(layers), group_size)
        for i in range(n):
            names = layers[i::n]
            out.append((names, [specs[x] for x in names]))
    return out


def group_kv_cache(
    specs: dict[str, KVCacheSpec], layout: str
) -> tuple[str, list[tuple[list[str], list[KVCacheSpec]]], dict[str, KVCacheSpec]]:
    values = list(specs.values())
    if not specs:
        return "attention_free", [], specs
    if all(v == values[0] for v in values):
        return "uniform", [(list(specs), values)], specs
    if is_uniform_type(values):
        return "uniform_type", [(list(specs), values)], specs
    if B.layout_is_block_outermost(layout) and len({v.page_size_bytes for v in values}) > 1:
        return "packed", _packed_groups(specs), specs
    unified = _unify(specs)  # may raise (no full-allocation fallback with mamba layers)
    return "unified", _uniform_page_groups(unified), unified


def bytes_per_block(groups, layout: str) -> int:
    if not B.layout_is_block_outermost(layout):
        return max(sum(round_up(s.page_size_bytes, s.get_block_stride_alignment()) for s in gs) for _, gs in groups)
    bpb = max(sum(s.page_size_bytes for s in gs) for _, gs in groups)
    return round_up(bpb, math.lcm(*(s.get_block_stride_alignment() for _, gs in groups for s in gs)))


def validate_layout(groups, layout: str) -> None:
    pages = {s.page_size_bytes for _, gs in groups for s in gs}
    if len(pages) == 1:
        return
    if not B.layout_is_block_compact(layout) or (len(groups) > 1 and B.layout_is_layer_compact(layout)):
        raise SimulatedError("ValueError", f"KV cache layout {layout} cannot express mixed page sizes")
