"""What a refusal is for (geometry/oracle/refusals.py), and the oracle record's comparison of two refusals by it
(record.compare): stdlib only, no vLLM."""

from __future__ import annotations

import geometry_cases as C

from geometry.model.inputs import GeometryInputs
from geometry.oracle import record
from geometry.oracle import refusals as R
from geometry.plan.simulate import simulate


def test_a_refusal_for_another_reason_than_vllms_is_a_difference():
    """refusals.py tells refusals apart by what they refuse: another layer, another field or an unread
    message is a difference, where the exception types alone would agree."""
    page = (
        "NotImplementedError: Layer model.layers.{}.self_attn: page size is not divisible by the maximum page "
        "size and cannot be padded. Padding is only supported for non-MLA attention layers."
    )
    assert R.differences("with_drafter", page.format(3), page.format(3)) == []
    assert R.differences("with_drafter", page.format(3), page.format(2))
    selected = "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. "
    dtype, block = "Reason: ['kv_cache_dtype not supported']", "Reason: ['block_size not supported']"
    noted = "Reason: ['kv_cache_dtype not supported', 'FP8 KV cache requires FA3']"
    assert R.differences("p", selected + dtype, selected + noted) == []
    assert R.differences("p", selected + block, selected + dtype)
    assert R.differences("p", "ValueError: something else", "ValueError: something else")
    assert R.differences(
        "p", "AssertionError: drafter KV heads not divisible by TP", "AssertionError: assert heads % tp == 0"
    )


def test_the_oracle_record_compares_refusals_by_reason():
    """record.compare (what the in-image gate holds the simulator to) reads both refusals of a plan: the same
    exception type refusing another layer is a difference, the same refusal phrased by each side is none."""
    page = (
        "NotImplementedError: Layer model.layers.{}.self_attn: page size is not divisible by the maximum page "
        "size and cannot be padded."
    )
    report = record.comparable(simulate(GeometryInputs.from_json(C.dense_matrix("stock")[0])))

    def refusing(layer: int) -> dict:
        return {label: dict(plan, error=page.format(layer)) for label, plan in report.items()}

    assert record.compare(refusing(3), refusing(3)) == ()
    assert len(record.compare(refusing(3), refusing(2))) == len(record.PLANS)
    assert len(record.compare(report, refusing(3))) == len(record.PLANS)
