"""The qualification statement: what the writer puts in is what the reader takes out, and a document
that is not one is refused naming the key."""

from __future__ import annotations

import copy
import json

import pytest

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.qualification_record import PREDICATE_TYPE, QualificationRecord, RecordInvalid, summary_line

RECORD = QualificationRecord(
    repository="ghcr.io/acme/glm",
    digest="sha256:" + "ab" * 32,
    qualified_on="2026-03-01T09:00:00Z",
    verdict="pass",
    url="http://127.0.0.1:8000",
    model="glm",
    vllm_version=DEFAULT_VERSION,
    recipe_name="gb300",
    recipe_sha256="cd" * 32,
    hardware={"gpu": "GB300", "tensor_parallel_size": 1},
    served_flags=("/models/t", "--port", "8000"),
    decode_tokens_per_s=305.5,
    speculation_configured=True,
    acceptance_rate=0.54,
    mean_accepted_length=4.78,
    acceptance_per_position=(0.9, 0.7, 0.5),
    findings=(),
    result={"schema": "glm53.qualify/v1", "passed": True},
)


def test_a_statement_reads_back_as_the_record_it_was_written_from():
    statement = json.loads(json.dumps(RECORD.statement()))
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"] == [{"name": "ghcr.io/acme/glm", "digest": {"sha256": "ab" * 32}}]
    back = QualificationRecord.from_statement(statement)
    assert back == RECORD
    assert summary_line(back.summary()).startswith(
        "qualification 2026-03-01T09:00:00Z: pass, decode 305.5 tok/s, acceptance 54.0%"
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"), "not an in-toto statement"),
        (lambda s: s["predicate"].update(verdict="maybe"), "predicate.verdict: 'maybe'"),
        (lambda s: s["predicate"]["figures"].pop("decodeTokensPerS"), "predicate.figures.decodeTokensPerS: missing"),
        (
            lambda s: s["predicate"]["figures"].update(acceptanceRate="high"),
            "predicate.figures.acceptanceRate: not a number",
        ),
        (lambda s: s.update(subject=[]), "subject: 0 entries"),
        (lambda s: s["subject"][0]["digest"].update(sha256="xyz"), "subject[0].digest.sha256"),
        (lambda s: s.update(predicate=[]), "predicate: not a JSON object"),
    ],
)
def test_a_document_that_is_not_a_qualification_is_refused_naming_the_key(edit, message):
    statement = copy.deepcopy(RECORD.statement())
    edit(statement)
    with pytest.raises(RecordInvalid, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        QualificationRecord.from_statement(statement)
