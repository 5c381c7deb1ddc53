"""What the planner's answer does not depend on (the platform vLLM detects in this process), and
what it refuses: a target config transformers refuses, an engine-core key it does not have, a target
kind it does not run (needs an importable vLLM)."""

from __future__ import annotations

import os
import sys

import pytest
from infra.fixtures import in_ci
from support.repo import REPO

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm.v1.core.kv_cache_planning  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM's own planning code is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402
from plan_agreement import BEHAVIOUR, SEED, N, agree, imported_vllm_version  # noqa: E402,F401

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.oracle.plan import (  # noqa: E402
    plan_with_vllm,
)

_PLAN_IN_A_FRESH_INTERPRETER = """import json, sys
import geometry
from geometry.oracle import record
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import blocks_per_request, plan_with_vllm
from vllm.platforms import current_platform

out = {"geometry": geometry.__file__, "platform": type(current_platform).__name__, "plans": []}
for data in json.load(sys.stdin):
    inputs = GeometryInputs.from_json(data)
    try:
        per_request = blocks_per_request(inputs)
    except Exception as exc:
        per_request = f"{type(exc).__name__}: {exc}"
    out["plans"].append({"report": record.comparable(plan_with_vllm(inputs)),
                         "blocks_per_request": per_request})
print("PLANS " + json.dumps(out, default=str))
"""

# The seeded sample's draws with the drafter's backend pinned as the recipes pin it (the automatic choice is
# not what these tests are about; tests/agreement/test_plan_agreement.py compares every draw).
CASES = {
    case_id: data
    for case_id, data in C.draws(C.sample(N, SEED), BEHAVIOUR, imported_vllm_version()).items()
    if data.get("drafter_attention_backend") == "FLASH_ATTN"
}


def _plan_in_a_fresh_interpreter(cases: list, target_device) -> dict:
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    if target_device is not None:
        env["VLLM_TARGET_DEVICE"] = target_device
    run = subprocess.run(
        [sys.executable, "-c", _PLAN_IN_A_FRESH_INTERPRETER],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("PLANS "))[len("PLANS ") :])
    assert out["geometry"].startswith(str(REPO / "geometry")), out["geometry"]
    return out


def _first_with_a_sliding_window_drafter(model_type: str) -> dict:
    return next(
        c
        for c in CASES.values()
        if c["target_config"]["model_type"] == model_type
        and c["drafter_config"] is not None
        and "sliding_attention" in c["drafter_config"].get("layer_types", ())
    )


def test_the_answer_does_not_depend_on_vllms_platform():
    """The same inputs planned under vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu, what the
    pre-flight sets) and under the platform vLLM detects without it (none on a CPU-only host,
    as in the image's build) give the same reports and blocks per request. The CPU platform's
    config hook resets the GDN state to float32 (on AVX512-BF16 CPUs) and turns async
    scheduling off: the oracle must answer for the GPU the image serves on either way."""
    cases = [
        dict(_first_with_a_sliding_window_drafter(kind), vllm_behaviour=BEHAVIOUR)
        for kind in ("glm5_next_text", "kimi_linear", "qwen3_next")
    ]
    on_cpu = _plan_in_a_fresh_interpreter(cases, "cpu")
    detected = _plan_in_a_fresh_interpreter(cases, None)
    assert on_cpu["platform"] == "CpuPlatform"
    assert detected["platform"] != "CpuPlatform", "this vLLM is a CPU build: no second platform here"
    for data, cpu_plan, detected_plan in zip(cases, on_cpu["plans"], detected["plans"]):
        kind = data["target_config"]["model_type"]
        assert cpu_plan["report"] == detected_plan["report"], kind
        assert cpu_plan["blocks_per_request"] == detected_plan["blocks_per_request"], kind
        # The drafter's sliding-window group, by hand (SlidingWindowSpec.max_admission_blocks_per_request):
        # window - 1 tokens plus the tokens in flight, two batches of vLLM's default 2,048 batched
        # tokens (async scheduling, on by default on a GPU), never more than the model length; plus
        # one block for a window that does not start on a block boundary.
        spec_class, block, blocks = cpu_plan["blocks_per_request"][-1]
        assert spec_class == "SlidingWindowSpec", kind
        window = data["drafter_config"]["sliding_window"]
        max_len = data.get("max_model_len") or data["target_config"]["max_position_embeddings"]
        assert blocks == -(-min(window - 1 + 2 * 2048, max_len) // block) + 1, kind


def test_a_target_config_transformers_refuses_is_a_plan_error_naming_the_class():
    """vLLM loads the target's config with transformers' class; one it refuses (a string
    rms_norm_eps: the simulator reads no such field) is no plan, with the class and the field named."""
    data = dict(_first_with_a_sliding_window_drafter("qwen3_next"), vllm_behaviour=BEHAVIOUR)
    data["target_config"] = dict(data["target_config"], rms_norm_eps="x")
    report = plan_with_vllm(GeometryInputs.from_json(data))
    for plan in (report.with_drafter, report.without_drafter, report.target_only_same_spec):
        assert plan.error.startswith("ValueError: Qwen3NextConfig refuses the target config: "), plan.error
        assert "'rms_norm_eps'" in plan.error and "\n" not in plan.error


def test_engine_core_refuses_a_key_it_does_not_have():
    """A misspelt key would leave its default planned: the CLI exits 2 naming it, before
    planning anything (no vLLM import needed for that)."""
    import json
    import subprocess

    from support.engine_core import BadEngineCoreCase, engine_core_plan

    run = subprocess.run(
        [sys.executable, "-m", "support.engine_core_cli", "--engine-core", json.dumps([{"tp": 2}, {"tp_size": 2}])],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")])),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stdout == ""
    assert run.stderr.splitlines()[0].startswith("usage: python -m support.engine_core_cli")
    assert run.stderr.splitlines()[-1].startswith(
        "python -m support.engine_core_cli: error: --engine-core case 1: unknown key 'tp_size' (keys: "
    )
    with pytest.raises(BadEngineCoreCase, match=r"^unknown key 'num_specs' \(keys: "):
        engine_core_plan({"num_specs": 3})


# Architecture lists on which the two target classifiers the simulator once had disagreed
# (model_kind took any listed name starting "Glm5Next" or naming a modelled class, the other the
# first, exactly), plus the plain ones. vLLM decides: it tries the listed architectures in order
# and runs the first its registry has (ModelRegistry.inspect_model_cls).
ARCHITECTURE_LISTS = [
    ["Glm5NextForCausalLM"],
    ["Qwen3NextForCausalLM"],
    ["KimiLinearForCausalLM"],
    ["LlamaForCausalLM", "Qwen3NextForCausalLM"],  # vLLM runs Llama; model_kind said qwen3_next
    ["Glm5NextMTPModel"],  # vLLM's GLM MTP drafter, no target; model_kind said glm5next
    ["Glm5NextForConditionalGeneration"],  # the multimodal model; model_kind said glm5next
    ["NotARegisteredModel", "Qwen3NextForCausalLM"],  # vLLM runs Qwen3-Next: refused, not misread
]


@pytest.mark.parametrize("architectures", ARCHITECTURE_LISTS, ids=["+".join(a) for a in ARCHITECTURE_LISTS])
def test_the_target_kind_is_the_model_vllm_runs_or_a_refusal(architectures):
    """read_target never names a kind other than that of the model vLLM runs; a config listing
    exactly one modelled architecture is that kind. What vLLM would run but the gate cannot tell
    from the config alone (a first architecture it does not know) is refused, never guessed."""
    from vllm.model_executor.models.registry import ModelRegistry

    from geometry.model.architectures import BY_HF_ARCHITECTURE
    from geometry.model.config import ConfigInvalid, read_target

    supported = ModelRegistry.get_supported_archs()
    runs = next((a for a in architectures if a in supported), None)
    assert runs is not None, architectures
    config = {"architectures": architectures, "model_type": "qwen3_next"}
    try:
        kind = read_target(config).kind
    except ConfigInvalid as exc:
        assert exc.key == "architectures"
        assert architectures[0] not in BY_HF_ARCHITECTURE
        return
    assert kind == BY_HF_ARCHITECTURE[runs].kind
    assert runs == architectures[0]
