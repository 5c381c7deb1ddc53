"""The record `qualify` writes: one frozen value, versioned by its schema id, with to_json."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Optional, Union

from geometry import Behaviour
from stackbuild.serve.qualify.sanity import OutputCheck

# v3: what was sent sized to the server's max_model_len (sizing, the prefix probe's blocks), and where the
# baseline came from. v2: latency as vLLM's benchmark names it (TTFT, TPOT, ITL from streamed runs;
# end-to-end output tok/s from stream false), token counts from the server's usage, the KV cache checked.
SCHEMA = "glm53.qualify/v3"


@dataclass(frozen=True)
class Latency:
    """One latency over the streamed runs, in milliseconds, as vLLM's benchmark (vllm/benchmarks/serve.py)
    reports it: mean, median and 99th percentile (numpy's linear percentile); None without a sample."""

    samples: int
    mean_ms: Optional[float]
    median_ms: Optional[float]
    p99_ms: Optional[float]


@dataclass(frozen=True)
class ClassThroughput:
    """One prompt class: ``runs`` non-streamed generations (end-to-end output tok/s, the post's figure) and
    ``streamed_runs`` streamed ones (TTFT, TPOT, ITL), each of exactly ``run_tokens`` output tokens."""

    prompt_class: str
    runs: int
    output_tokens: int  # usage.completion_tokens summed over the non-streamed runs
    seconds: float  # their wall time, request sent to answer read
    e2e_output_tokens_per_s: float  # output_tokens / seconds (stream false)
    streamed_runs: int
    ttft: Latency  # request sent to the first chunk carrying a token
    tpot: Latency  # (latency - TTFT) / (usage.completion_tokens - 1) per streamed run
    itl: Latency  # between consecutive token chunks (a chunk may carry several tokens)


@dataclass(frozen=True)
class Throughput:
    """One server's figures over the prompt set."""

    url: str
    model: str
    readiness_s: float  # until a streamed generation reported usage.completion_tokens > 0
    run_tokens: int  # every run's output length: max_tokens = min_tokens, ignore_eos
    classes: tuple[ClassThroughput, ...]
    e2e_output_tokens_per_s: float  # all classes: output tokens / seconds (stream false)
    ttft: Latency  # all classes' streamed runs
    tpot: Latency
    itl: Latency
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


class ProbeSizing(str, enum.Enum):
    """How the prefix-cache probe was sent against the server's max_model_len."""

    AS_ASKED = "as asked"  # --prefix-blocks x the alignment fits
    SIZED = "sized"  # fewer blocks than --prefix-blocks: the most that fit
    SKIPPED = "skipped"  # not even one alignment unit plus the tail and the output fit
    NOT_PROBED = "not probed"  # prefix caching off, or no alignment to probe at

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PrefixCacheProbe:
    """Two prompts sharing ``shared_prefix_tokens`` = k x the hit alignment; hits from the /metrics deltas."""

    enabled: bool
    hit_alignment_tokens: Optional[int]
    alignment_source: str  # "recipe gate" | "server block_size" | why there is none
    sizing: ProbeSizing
    asked_blocks: int  # --prefix-blocks
    blocks: int  # k sent (0: not sent)
    sizing_note: Optional[str]  # why it was sized or skipped (None: as asked, or not probed)
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
class KvFigure:
    """One allocation figure: the gate's prediction and what the server reports (None: not reported)."""

    name: str  # num_gpu_blocks | block_size | group_block_sizes | kv_cache_tokens
    predicted: Union[int, tuple[int, ...], None]  # a tuple for group_block_sizes
    served: Union[int, tuple[int, ...], None]  # None: not reported
    source: str  # "/metrics", or "--server-log FILE"
    matches: bool


@dataclass(frozen=True)
class KvCacheCheck:
    """The server's KV cache against the gate's for the recipe, on the vLLM behaviour named."""

    recipe: str
    behaviour: Behaviour
    gate_vllm_version: str
    server_log: Optional[str]
    log_pool: Optional[str]  # the pool vLLM's log names: GPU, CPU, ...
    figures: tuple[KvFigure, ...]
    differences: tuple[str, ...]  # one line each, both numbers named


@dataclass(frozen=True)
class Sizing:
    """What qualify sent, sized to the server's ``max_model_len`` (its /v1/models entry): every prompt plus
    the run's output tokens fits, a prompt that cannot hold one output token is skipped."""

    max_model_len: Optional[int]  # None: /v1/models gives none (nothing sized)
    asked_run_tokens: int  # --max-tokens
    run_tokens: int  # what every run asked for
    skipped_prompts: tuple[str, ...]  # "<class>: <prompt's first words> (<N> tokens)"
    notices: tuple[str, ...]  # one line each, as stderr printed them (the prefix probe's included)


@dataclass(frozen=True)
class Qualification:
    schema: str
    url: str
    model: str
    recipe: str
    vllm_version: Optional[str]
    sizing: Sizing
    kv_cache: KvCacheCheck
    served: Throughput
    baseline: Optional[Throughput]
    baseline_source: Optional[str]  # "--baseline-url URL" | "--baseline-result FILE"
    speedup: Optional[float]  # served / baseline end-to-end output tok/s
    spec_decode: SpecDecode
    prefix_cache: PrefixCacheProbe
    outputs: tuple[OutputCheck, ...]
    expectations: tuple[Expectation, ...]
    failures: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.kv_cache.differences and not self.failures and all(e.met for e in self.expectations)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["passed"] = self.passed
        return data
