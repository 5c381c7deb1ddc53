"""Simulator vs vLLM's own code, field by field.

Needs an importable vLLM (requirements/vllm.txt's, CPU torch is enough): run with the oracle
venv, e.g. ``.venv/bin/python -m pytest tests/test_geometry_oracle.py`` after ``make oracle``.
Point PYTHONPATH at a patched vLLM tree to test the overlay instead
(GEOMETRY_ORACLE_BEHAVIOUR=overlay).  The matrix is a seeded sample of the
generated scenarios (GEOMETRY_ORACLE_N, default 300; GEOMETRY_ORACLE_SEED).
A disagreement is a bug in one of them: fix the simulator, or document the
vLLM bug in geometry/README.md.
"""

from __future__ import annotations

import itertools

import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm
    import vllm.v1.core.kv_cache_planning  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM's own planning code is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402
from plan_agreement import BEHAVIOUR, SEED, N, agree, imported_vllm_version, inputs  # noqa: E402,F401

from geometry import gate_main  # noqa: E402
from geometry.errors import BadInput  # noqa: E402
from geometry.image_contract import GATE_REASON_PREFIX  # noqa: E402
from geometry.kv.drafter_backend import DrafterBackendNotModelled  # noqa: E402
from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.oracle.plan import (  # noqa: E402
    compare_reports,
    drafter_backend_names,  # noqa: E402
    plan_with_vllm,
)
from geometry.plan.simulate import simulate  # noqa: E402
from geometry.verdict.gate import check  # noqa: E402
from geometry.vllm_versions import release  # noqa: E402

# The seeded sample (geometry_cases.sample: drawn from the configs' and flags' values, no simulator involved),
# each draw a gate input for the imported vLLM release, compared whatever either side makes of it.
DRAWS = C.draws(C.sample(N, SEED), BEHAVIOUR, imported_vllm_version())
ALIGN_CASES = C.align_matrix(BEHAVIOUR)
GB10_CASES = C.gb10_matrix(BEHAVIOUR)
DENSE_CASES = C.dense_matrix(BEHAVIOUR)
QWEN3_MOE_CASES = C.qwen3_moe_matrix(BEHAVIOUR)


def _refusal_agrees(data: dict, refused: BadInput, tmp_path, capsys) -> None:
    """The simulator refuses ``data``: the in-image gate exits with its bad-input code and the simulator's
    reason as its one line, and vLLM's own code confirms the reason (the only one mapped: the automatic
    drafter backend the simulator does not model is the backend vLLM's selector, ``CudaPlatform`` on the
    family's capability, picks for every drafter layer)."""
    import json

    gate_input = tmp_path / "gate-input.json"
    gate_input.write_text(json.dumps(data))
    assert gate_main.main(["--input", str(gate_input), "--behaviour", "input"]) == gate_main.EXIT_BAD_INPUT
    assert capsys.readouterr().err.splitlines()[-1] == f"{GATE_REASON_PREFIX}bad input: {refused}"
    assert isinstance(refused, DrafterBackendNotModelled), f"no vLLM outcome is mapped to this refusal: {refused}"
    chosen = drafter_backend_names(GeometryInputs.from_json(data))
    assert chosen and set(chosen.values()) == {refused.backend}, chosen


def _simulator_refusal(data: dict) -> BadInput | None:
    try:
        simulate(GeometryInputs.from_json(data))
    except BadInput as exc:
        return exc
    return None


@pytest.mark.parametrize("case_id", list(DRAWS))
def test_sampled_draw_agrees_with_vllm(case_id, tmp_path, capsys):
    """Each draw of the sample, as drawn: planned by the simulator, it is compared with vLLM's three plans field
    by field, each plan refused by both only for the same reason (geometry/oracle/refusals.py reads both
    messages); refused by the simulator as a gate input, the refusal is the gate's one line and vLLM's own code
    confirms what it names."""
    data = DRAWS[case_id]
    refused = _simulator_refusal(data)
    if refused is not None:
        _refusal_agrees(data, refused, tmp_path, capsys)
        return
    sim, vllm, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])
    pinned = data["drafter_config"] is not None and data.get("drafter_attention_backend") not in (None, "auto")
    if pinned and not vllm.with_drafter.error:
        assert vllm.drafter_backend == data["drafter_attention_backend"], vllm.drafter_backend


def test_the_sample_has_refusals_and_plans():
    """Both outcomes of the simulator are in the sample (a sample of every draw refused, or none, would leave one
    of the two checks of test_sampled_draw_agrees_with_vllm unexercised), each plan kind (planned, refused by
    both) is compared, and most draws are compared with vLLM's geometry field by field."""
    refused = {case_id for case_id, data in DRAWS.items() if _simulator_refusal(data) is not None}
    compared = [case_id for case_id in DRAWS if case_id not in refused]
    plan_errors = sum(
        bool(getattr(simulate(GeometryInputs.from_json(DRAWS[c])), label).error)
        for c in compared
        for label in ("with_drafter", "without_drafter", "target_only_same_spec")
    )
    summary = (
        f"{len(compared)} of {N} draws compared with vLLM field by field ({plan_errors} of their plans refused by "
        f"the simulator, compared by reason); {len(refused)} draws refused as gate inputs"
    )
    print(summary)
    assert refused or N < 100, summary  # a small GEOMETRY_ORACLE_N may draw none
    assert plan_errors or N < 100, summary
    assert len(compared) >= 0.8 * N, summary


def test_the_sample_is_drawn_without_the_product():
    """The sample is a function of the seed alone: drawing it twice gives the same draws, and drawing it in a fresh
    interpreter imports no module of the product (no simulator could choose, keep or change a draw)."""
    import json
    import subprocess
    import sys

    assert C.sample(N, SEED) == C.sample(N, SEED)
    code = (
        "import json, sys, geometry_cases as C\n"
        f"cases = C.sample({N}, {SEED})\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.split('.')[0] in ('geometry', 'stackbuild')), cases]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=C.REPO,
        env={"PYTHONPATH": f"{C.REPO / 'tests'}", "PATH": "/usr/bin:/bin"},
    )
    product, cases = json.loads(run.stdout)
    assert product == []
    assert [dict(c, vllm_behaviour=BEHAVIOUR, vllm_version=imported_vllm_version()) for c in cases] == list(
        DRAWS.values()
    )


def test_the_sample_draws_the_drafters_backend_both_ways():
    """The drafter's attention_backend is drawn too: unset or "auto" (vLLM's automatic choice) and the pin the
    recipes set, each among the draws with a drafter."""
    drawn = {d.get("drafter_attention_backend") for d in DRAWS.values() if d["drafter_config"] is not None}
    assert drawn == set(C.DRAFTER_ATTENTION_BACKENDS) or N < 100, drawn


@pytest.mark.parametrize("idx", range(len(ALIGN_CASES)))
def test_align_matrix_agrees_with_vllm(idx):
    """Prefix caching on ("align"): TP x num_spec x index_kpool x drafter KV
    dtype and heads, with and without the drafter."""
    sim, vllm, diffs = agree(ALIGN_CASES[idx])
    assert not diffs, "\n".join(diffs[:20])
    assert vllm.with_drafter.prefix_cache is not None or vllm.with_drafter.error


@pytest.mark.parametrize("idx", range(len(GB10_CASES)))
def test_gb10_matrix_agrees_with_vllm(idx):
    """GB10 (family 120): TP 2/4 x target KV x prefix caching x drafter KV."""
    data = GB10_CASES[idx]
    sim, vllm, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])
    alone = vllm.target_only_same_spec
    assert not alone.error  # auto and fp8 both run as fp8_ds_mla
    # fp8_ds_mla rows: 512 B NoPE + 16 B scales + 128 B RoPE, or the SM120 implementation's 528 for
    # GLM-5.3's RoPE-free 512-wide latent where the release sizes rows by the implementation
    assert {r.bytes_per_token for r in alone.layers if r.role == "mla_latent"} == {SM120_ROW}
    d_kv = data["drafter_kv_cache_dtype"]
    if data["drafter_config"] is not None and d_kv not in ("auto", "bfloat16"):
        # inherited fp8_ds_mla, or fp8: FLASH_ATTN (FA2 on SM12x) takes neither
        assert vllm.with_drafter.error.startswith("ValueError")
    else:
        assert not vllm.with_drafter.error


@pytest.mark.parametrize("idx", range(len(DENSE_CASES)))
def test_dense_matrix_agrees_with_vllm(idx):
    """A dense Qwen3 target (no mamba state, no drafter) on each GPU family and on vLLM's CPU
    platform: family x TP x KV heads x head size x block size x prefix caching."""
    data = DENSE_CASES[idx]
    sim, vllm, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])
    plan = vllm.with_drafter
    assert not plan.error and plan.prefix_cache.hit_alignment_tokens == plan.block_size
    assert check(vllm).passed


# (target head size, target KV cache dtype): FLASH_ATTN's kernel blocks follow the model config's (the
# SM90 FP8 head-512 page, the SM10x head-256 FA4 page), so the targets span them.
_SELECTION_TARGETS = ((128, "auto"), (256, "auto"), (512, "fp8"))
# The fp8_ds_mla row GLM-5.3's latent has on SM120 under the imported release: 656 B, or the
# implementation's 528 (VllmRelease.sm120_ropeless_ds_mla_row_bytes, read from vLLM's source).
SM120_ROW = release(vllm.__version__).sm120_ropeless_ds_mla_row_bytes or 656
# The imported release's entry: its FLASH_ATTN block rule for an SM90 FP8 head-512 cache among its fields.
IMPORTED_RELEASE = release(vllm.__version__)


@pytest.mark.parametrize("family", [90, 100, 120])
def test_the_drafters_automatic_backend_is_the_one_vllms_selector_picks(family):
    """geometry/kv/drafter_backend.py's model of vLLM's automatic choice against vLLM's own
    ``get_attn_backend`` (``CudaPlatform``'s selector on the family's capability), for drafter head
    sizes, KV cache dtypes, causality and user block sizes beyond the sampled matrix's; and, with the
    drafter's backend pinned to FLASH_ATTN (the attention config's ``backend``), whether vLLM's
    selector takes it or raises its ValueError (``selected_backend_error``)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.utils import replace
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import get_attn_backend

    from geometry.kv.drafter_backend import DrafterAsk, select, selected_backend_error
    from geometry.kv.kv_spec import SimulatedError
    from geometry.oracle.backend_selection import clear_selection_cache
    from geometry.oracle.serving_platform import serving_platform
    from geometry.oracle.vllm_config import build_vllm_config

    checked, pinned_checked = set(), set()

    def vllm_selects(cfg, head, kv, **attention) -> str:
        target_attention = cfg.attention_config
        cfg.attention_config = replace(target_attention, **attention)
        try:
            with set_current_vllm_config(cfg):
                return get_attn_backend(head, torch.bfloat16, kv, has_sliding_window=True).get_name()
        except ValueError:
            return "ValueError"
        finally:
            cfg.attention_config = target_attention

    with serving_platform(family):
        for (target_head, target_kv), block in itertools.product(_SELECTION_TARGETS, (None, 16, 64)):
            data = dict(
                C.dense_matrix(BEHAVIOUR)[0],
                target_config=C.qwen3_dense_target(head_dim=target_head),
                capability_family=family,
                kv_cache_dtype=target_kv,
                block_size=block,
            )
            cfg, _ = build_vllm_config(inputs(data), False, 0)
            assert cfg.model_config.get_head_size() == target_head
            clear_selection_cache()  # vLLM's cache of selections is for one model config per process
            for head, kv, non_causal in itertools.product(
                (20, 64, 96, 128, 256, 512),
                ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"),
                (False, True),
            ):
                ask = DrafterAsk(
                    family, head, kv, "bfloat16", non_causal, block, target_head, target_kv, IMPORTED_RELEASE
                )
                try:
                    expected = select(ask)
                except SimulatedError as exc:
                    expected = exc.vllm_type
                got = vllm_selects(cfg, head, kv, use_non_causal=non_causal)
                assert got == expected, ask
                checked.add(got)
                pinned = "FLASH_ATTN" if selected_backend_error("FLASH_ATTN", ask) is None else "ValueError"
                got = vllm_selects(cfg, head, kv, use_non_causal=non_causal, backend=AttentionBackendEnum.FLASH_ATTN)
                assert got == pinned, ("pinned FLASH_ATTN", ask)
                pinned_checked.add(got)
    assert {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "ValueError"} <= checked
    assert pinned_checked == {"FLASH_ATTN", "ValueError"}


def test_dense_cpu_by_hand():
    """vLLM's CPU platform for a dense Qwen3 without a block size, by hand: CpuPlatform asks its
    backend from 128 tokens and CPU_ATTN takes any multiple of 32, so the block is 128; a block of
    one layer holds K and V of 2 KV heads x head 64 in bf16 for 128 tokens; 4 layers share a block.
    On a release whose CPU platform is not modelled, the simulator refuses it and vLLM's own
    CpuPlatform does not start on this x86 machine."""
    if not C.cpu_planned():
        data = dict(C.dense_matrix(BEHAVIOUR)[0], capability_family=0)
        with pytest.raises(BadInput, match="not modelled on the CPU platform"):
            simulate(GeometryInputs.from_json(data))
        from geometry.oracle.serving_platform import serving_platform
        from geometry.oracle.vllm_config import build_vllm_config

        with pytest.raises(RuntimeError, match="requires Triton"), serving_platform(0):
            build_vllm_config(GeometryInputs.from_json(data), False, 0)
        return
    data = dict(C.dense_matrix(BEHAVIOUR)[0], block_size=None, kv_cache_memory_bytes=1 << 30)
    assert data["capability_family"] == 0 and data["tensor_parallel_size"] == 1
    sim, vllm, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])
    per_block = 4 * 2 * 2 * 64 * 2 * 128
    assert vllm.with_drafter.block_size == 128
    assert vllm.with_drafter.bytes_per_block == per_block
    assert vllm.with_drafter.num_blocks == (1 << 30) // per_block
    assert vllm.with_drafter.prefix_cache.hit_alignment_tokens == 128


def _qwen3_moe_id(data: dict) -> str:
    return (
        f"f{data['capability_family']}-tp{data['tensor_parallel_size']}"
        f"-kv{data['target_config']['num_key_value_heads']}"
        f"-{'dflash' if data['drafter_config'] else 'nodrafter'}"
        f"-{'prefix' if data['enable_prefix_caching'] else 'noprefix'}"
    )


@pytest.mark.parametrize("data", QWEN3_MOE_CASES, ids=[_qwen3_moe_id(d) for d in QWEN3_MOE_CASES])
def test_qwen3_moe_matrix_agrees_with_vllm(data):
    """A Qwen3-MoE target, planned by the simulator and by vLLM (Qwen3MoeConfig, vLLM's Attention
    layers): family 100 with and without the DFlash drafter and vLLM's CPU platform, TP 1/2. Each
    input is modelled (no skip), and vLLM plans a cache holding every layer."""
    case = inputs(data)
    sim = simulate(case)
    vllm = plan_with_vllm(case)
    diffs = compare_reports(sim, vllm)
    assert not diffs, "\n".join(diffs[:20])
    assert sim.model_kind == "qwen3_moe"
    # vllm/platforms/cuda.py:157: FLASHINFER first for causal layers on SM10x
    assert sim.backends[0] == ("CPU_ATTN" if data["capability_family"] == 0 else "FLASHINFER")
    n_target = data["target_config"]["num_hidden_layers"]
    n_drafter = data["drafter_config"]["num_hidden_layers"] if data["drafter_config"] else 0
    kv_per_rank = max(1, data["target_config"]["num_key_value_heads"] // data["tensor_parallel_size"])
    for plan, n_layers in ((vllm.with_drafter, n_target + n_drafter), (vllm.without_drafter, n_target)):
        assert not plan.error and plan.num_blocks > 0 and plan.bytes_per_block > 0
        assert len(plan.layers) == n_layers
        target = [r for r in plan.layers if r.owner == "target"]
        assert [r.name for r in target] == [f"model.layers.{i}.self_attn.attn" for i in range(n_target)]
        assert {(r.role, r.num_kv_heads, r.head_size) for r in target} == {("attention", kv_per_rank, 128)}
    if data["drafter_config"] is None:  # with one, the gate weighs the drafter's cost (not asserted here)
        assert check(vllm).passed
