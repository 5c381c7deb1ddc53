"""The target's backend as vLLM's selector picks it (geometry/kv/target_backend.py), one case per rule, each
expectation derived by hand from vLLM 0.34.0's code (0.33.0 ranks and declares these candidates alike)."""

from __future__ import annotations

import pytest

from geometry.kv import backends as B
from geometry.kv import target_backend as T
from geometry.kv.drafter_backend import DrafterAsk
from geometry.kv.kv_spec import SimulatedError
from geometry.oracle import refusals
from geometry.vllm_versions import DEFAULT_VERSION, release


def _attention(family: int, kv: str = "auto", head: int = 128, block: int | None = None) -> DrafterAsk:
    return DrafterAsk(family, head, kv, "bfloat16", False, block, head, kv, release(DEFAULT_VERSION))


def _mla(family: int, head: int, kv: str, block: int | None = None, sparse: bool = True, heads: int = 32):
    return T.MlaAsk(family, head, kv, block, heads, sparse, 128 if not sparse else 256, False)


def test_sm10x_full_attention_is_flashinfer():
    # vllm/platforms/cuda.py:157  if device_capability.major == 10 and not use_non_causal:
    #                             return [..., AttentionBackendEnum.FLASHINFER, AttentionBackendEnum.FLASH_ATTN, ...]
    # flashinfer.py: get_supported_head_sizes -> [64, 128, 256, 512]; kernel blocks [16, 32, 64] (no TRT-LLM);
    # supported_kv_cache_layouts on major 10 -> (LBHNC, BLHNC)
    backend = T.full_attention_backend(_attention(100))
    assert backend is B.FLASHINFER_SM10X
    assert backend.kernel_block_sizes == (16, 32, 64) and backend.layouts == ("LBHNC", "BLHNC")
    # head 96 is not one of FlashInfer's: the next candidate, FLASH_ATTN (FA2 above head 128 on SM10x: 16-bit only)
    assert T.full_attention_backend(_attention(100, head=96)) is B.FLASH_ATTN


def test_sm12x_fp8_full_attention_is_flashinfer():
    # cuda.py:167  else: [FLASH_ATTN, FLASHINFER, ...]; fa_utils: FA2 on SM12x, and
    # flash_attn_supports_kv_cache_dtype takes fp8 only with FA3/FA4 -> FLASH_ATTN "kv_cache_dtype not supported"
    assert T.full_attention_backend(_attention(120, "fp8")) is B.FLASHINFER
    assert T.full_attention_backend(_attention(120)) is B.FLASH_ATTN_FA2
    assert T.full_attention_backend(_attention(90, "fp8")) is B.FLASH_ATTN  # FA3 takes fp8 on SM90


def _refusal(ask: T.MlaAsk) -> tuple:
    with pytest.raises(SimulatedError) as caught:
        T.mla_backend(ask)
    reason = refusals.reason(str(caught.value), refusals.SIMULATOR)
    assert reason is not None and reason[0] == "no valid backend", caught.value
    return reason


def test_a_latent_no_sparse_backend_takes_is_refused():
    # flashinfer_mla_sparse.py:61-65 and flashmla_sparse.py:197-199: head sizes [512, 576]; FA4 sparse: [576];
    # every dense MLA class: is_sparse() False -> backend.py:324-326 "sparse not supported".
    # cuda.py:98-103: fp8 on SM10x -> sparse tail [FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE]
    _, head, kv, per_backend = _refusal(_mla(100, 256, "fp8"))
    assert (head, kv) == (256, "fp8")
    dense = ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
    assert set(per_backend) == set(dense) | {"FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"}
    assert all("sparse" in per_backend[name] for name in dense)
    assert per_backend["FLASHINFER_MLA_SPARSE"] == per_backend["FLASHMLA_SPARSE"] == {"head_size"}
    # SM12x (cuda.py:131-135): TRITON_MLA, FLASHINFER_MLA_SPARSE_SM120 only
    assert set(_refusal(_mla(120, 256, "fp8"))[3]) == {"TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"}
    # SM90 with fp8 (cuda.py:137-152): FLASH_ATTN_MLA_SPARSE takes only 16-bit caches (flashattn_mla_sparse.py:43-47)
    assert _refusal(_mla(90, 256, "fp8"))[3]["FLASH_ATTN_MLA_SPARSE"] == {"kv_cache_dtype"}


def test_sm90_16_bit_latent_of_another_width_is_flash_attn_mla_sparse():
    # cuda.py:142-145: head_size != 512 -> sparse tail [FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE, ..._SM90];
    # flashattn_mla_sparse.py:70-71 get_supported_head_sizes -> [] (any), kernel blocks [MultipleOf(64)]
    assert T.mla_backend(_mla(90, 256, "auto")) is B.FLASH_ATTN_MLA_SPARSE
    # 512 wide: FLASHINFER_MLA_SPARSE_SM90 first (cuda.py:142-143)
    assert T.mla_backend(_mla(90, 512, "auto")) == B.sparse_mla_backend(90)


def test_a_user_block_the_mla_backends_do_not_divide():
    # dense, SM10x: FLASHINFER_MLA kernel blocks [32, 64] (flashinfer_mla.py) -> 16 "block_size not supported";
    # TOKENSPEED [32, 64], CUTLASS [128], FLASHMLA [64] fail too, FLASH_ATTN_MLA is SM90 only;
    # TRITON_MLA [MultipleOf(16)] takes 16 (triton_mla.py supports_block_size: block_size % 16 == 0)
    assert T.mla_backend(_mla(100, 512, "auto", 16, sparse=False)) is B.TRITON_MLA
    assert T.mla_backend(_mla(100, 512, "auto", 64, sparse=False)) is B.FLASHINFER_MLA
    # sparse, SM10x fp8: FLASHINFER_MLA_SPARSE [MultipleOf(32)], FLASHMLA_SPARSE 64 -> nothing takes 16
    per_backend = _refusal(_mla(100, 512, "fp8", 16))[3]
    assert per_backend["FLASHINFER_MLA_SPARSE"] == per_backend["FLASHMLA_SPARSE"] == {"block_size"}
    assert T.mla_backend(_mla(100, 512, "fp8", 32)) == B.sparse_mla_backend(100)
    # SM12x: FLASHINFER_MLA_SPARSE_SM120 [MultipleOf(64)]
    assert _refusal(_mla(120, 512, "auto", 16))[3]["FLASHINFER_MLA_SPARSE_SM120"] == {"block_size"}


def test_the_refusal_agrees_with_vllms_message():
    """The simulator's refusal and vLLM's for the same layer (vLLM 0.34.0's ValueError for a 256-wide sparse latent
    with an fp8 cache on SM10x, as its selector raised it) name the same reason."""
    vllm = (
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=256, "
        "dtype=torch.bfloat16, kv_cache_dtype=fp8, block_size=None, use_mla=True, has_sink=False, use_sparse=True, "
        "use_mm_prefix=False). Reasons: {FLASHINFER_MLA: [head_size not supported, sparse not supported, FlashInfer "
        "MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got 256], TOKENSPEED_MLA: [head_size not "
        "supported, sparse not supported], CUTLASS_MLA: [head_size not supported, sparse not supported], "
        "FLASH_ATTN_MLA: [head_size not supported, kv_cache_dtype not supported, sparse not supported, compute "
        "capability not supported], FLASHMLA: [head_size not supported, sparse not supported], TRITON_MLA: [sparse "
        "not supported], FLASHINFER_MLA_SPARSE: [head_size not supported], FLASHMLA_SPARSE: [head_size not supported]}."
    )
    with pytest.raises(SimulatedError) as caught:
        T.mla_backend(_mla(100, 256, "fp8"))
    assert refusals.differences("target backend", str(caught.value), vllm) == []


def test_a_choice_the_simulator_does_not_model_is_refused_as_input():
    # SM10x, dense, qk_nope_head_dim 256: FLASHINFER_MLA's supports_combination refuses it, TOKENSPEED wants
    # DeepSeek R1 dims, then CUTLASS_MLA (kernel blocks [128]) is valid: not modelled
    ask = T.MlaAsk(100, 512, "auto", None, 32, False, 256, False)
    with pytest.raises(T.TargetBackendNotModelled) as caught:
        T.mla_backend(ask)
    assert caught.value.backend == "CUTLASS_MLA"
