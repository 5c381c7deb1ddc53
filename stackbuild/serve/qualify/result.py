"""The record `qualify` writes: one frozen value, versioned by its schema id, with to_json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from stackbuild.serve.qualify.sanity import OutputCheck

SCHEMA = "glm53.qualify/v1"


@dataclass(frozen=True)
class ClassThroughput:
    """Decode throughput of one prompt class: N non-streamed runs after the warm-up, and a streamed run's TTFT."""

    prompt_class: str
    runs: int
    output_tokens: int
    seconds: float
    tokens_per_s: float
    ttft_s: float


@dataclass(frozen=True)
class Throughput:
    """One server's figures over the prompt set."""

    url: str
    model: str
    readiness_s: float  # until the first streamed token of a real generation
    classes: tuple[ClassThroughput, ...]
    tokens_per_s: float  # all classes: output tokens / seconds
    speculation_configured: bool


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding from the /metrics deltas over the throughput runs."""

    configured: bool
    drafts: int
    draft_tokens: int
    accepted: int
    acceptance_rate: Optional[float]  # accepted / draft tokens
    mean_accepted_length: Optional[float]  # 1 + accepted / drafts (the target's own token included)
    accepted_per_position: tuple[int, ...]
    acceptance_per_position: tuple[float, ...]  # accepted at position i / drafts
    per_position_sums_to_accepted: bool


@dataclass(frozen=True)
class PrefixCacheProbe:
    """Two prompts sharing ``shared_prefix_tokens`` = k x the hit alignment; hits from the /metrics deltas."""

    enabled: bool
    hit_alignment_tokens: Optional[int]
    alignment_source: str  # "recipe gate" | "server block_size" | why there is none
    shared_prefix_tokens: int
    predicted_hit_tokens: int
    first_hit_tokens: int
    second_hit_tokens: int
    second_query_tokens: int


@dataclass(frozen=True)
class Expectation:
    """A recipe's qualify.min_* key and what was measured against it."""

    key: str
    minimum: float
    measured: Optional[float]
    met: bool


@dataclass(frozen=True)
class Qualification:
    schema: str
    url: str
    model: str
    recipe: Optional[str]
    vllm_version: Optional[str]
    served: Throughput
    baseline: Optional[Throughput]
    speedup: Optional[float]  # served tok/s / baseline tok/s
    spec_decode: SpecDecode
    prefix_cache: PrefixCacheProbe
    outputs: tuple[OutputCheck, ...]
    expectations: tuple[Expectation, ...]
    failures: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures and all(e.met for e in self.expectations)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["passed"] = self.passed
        return data
