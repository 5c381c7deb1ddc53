"""vLLM's /metrics, read with the Prometheus text parser: snapshots, and the counters qualify takes deltas of."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

from prometheus_client.parser import text_string_to_metric_families

from stackbuild.core.errors import NotVllmServer

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"
GENERATION_TOKENS = "vllm:generation_tokens"
CACHE_CONFIG = "vllm:cache_config_info"


@dataclass(frozen=True)
class Snapshot:
    """The counters of one /metrics scrape, summed over engines: ``(family, position or None) -> value``;
    and the labels of vllm:cache_config_info, one mapping per engine."""

    counters: Mapping[tuple[str, Optional[str]], float]
    cache_configs: tuple[Mapping[str, str], ...]

    @property
    def cache_config(self) -> Mapping[str, str]:
        return self.cache_configs[0] if self.cache_configs else MappingProxyType({})

    @property
    def speculation_configured(self) -> bool:
        """vLLM exports the spec-decode counters only when speculative decoding is configured."""
        return (DRAFTS, None) in self.counters

    @property
    def block_size(self) -> Optional[int]:
        value = self.cache_config.get("block_size")
        return int(value) if value and value.isdigit() else None

    def value(self, family: str, position: Optional[str] = None) -> float:
        return self.counters.get((family, position), 0.0)

    def positions(self) -> tuple[str, ...]:
        found = {pos for fam, pos in self.counters if fam == ACCEPTED_PER_POS and pos is not None}
        return tuple(sorted(found, key=int))


def parse(text: str, where: str) -> Snapshot:
    """A snapshot of a /metrics page; a page without vLLM's counters is NotVllmServer."""
    counters: dict[tuple[str, Optional[str]], float] = {}
    cache_configs: list[Mapping[str, str]] = []
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise NotVllmServer(f"{where}: not Prometheus text ({str(exc)[:120]}): not a vLLM server") from None
    for family in families:
        if family.name == CACHE_CONFIG:
            cache_configs += [MappingProxyType(dict(sample.labels)) for sample in family.samples]
            continue
        if family.type != "counter" or not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):  # the _created series
                continue
            key = (family.name, sample.labels.get("position"))
            counters[key] = counters.get(key, 0.0) + sample.value
    if (GENERATION_TOKENS, None) not in counters:
        raise NotVllmServer(
            f"{where}: no {GENERATION_TOKENS}_total counter: not a vLLM server (qualify reads its /metrics)"
        )
    return Snapshot(counters=MappingProxyType(counters), cache_configs=tuple(cache_configs))


def delta(before: Snapshot, after: Snapshot, family: str, position: Optional[str] = None) -> int:
    return int(round(after.value(family, position) - before.value(family, position)))
