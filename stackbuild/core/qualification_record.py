"""The qualification record attached to an image: an in-toto Statement (v1) with this project's predicate.

One definition, one writer, one reader: `build.py qualify --attach IMAGE@DIGEST` makes a
:class:`QualificationRecord` from a measurement (stackbuild/serve/qualify/record.py) and pushes
:meth:`~QualificationRecord.statement` as an artifact referring to the image's manifest digest;
`build.py verify` reads every such artifact back with :meth:`QualificationRecord.from_statement` and lists them.

The predicate holds what a reader needs to trust the figures: the recipe (name, sha256 of the file;
none when qualify was not given one), the hardware the recipe names, the served flags (the recipe's
`vllm serve` argv), the vLLM version the server reported, when it was measured, the verdict (pass or
fail: a failing qualification is recorded too, with its findings in the result), the key figures
(decode tok/s, acceptance, per-position acceptance) and the whole result JSON `qualify --json`
prints (its schema id inside: stackbuild/serve/qualify/result.py SCHEMA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from stackbuild.core.in_toto import MEDIA_TYPE, STATEMENT_TYPE
from stackbuild.core.reference import DIGEST_RE

PREDICATE_TYPE = "urn:glm53-dflash2-images:qualification/v1"
# The artifact's type in the registry (one artifact per qualification; several may refer to one image);
# the document itself is an in-toto statement (its layer's media type).
ARTIFACT_TYPE = "application/vnd.glm53.qualification.v1+json"
DOCUMENT_MEDIA_TYPE = MEDIA_TYPE
VERDICTS = ("pass", "fail")


class RecordInvalid(ValueError):
    """A document that is not a qualification statement of this definition (the key at fault named)."""


@dataclass(frozen=True)
class QualificationRecord:
    repository: str  # the subject's repository (registry/name)
    digest: str  # the subject: the image's manifest digest (sha256:...)
    qualified_on: str  # UTC, YYYY-MM-DDTHH:MM:SSZ
    verdict: str  # "pass" | "fail"
    url: str  # the server measured
    model: str
    vllm_version: Optional[str]
    recipe_name: Optional[str]
    recipe_sha256: Optional[str]
    hardware: Mapping[str, Any]  # the recipe's: gpu, compute capability, platform, tensor-parallel size, nodes
    served_flags: tuple[str, ...]  # the recipe's `vllm serve` argv
    decode_tokens_per_s: float
    speculation_configured: bool
    acceptance_rate: Optional[float]
    mean_accepted_length: Optional[float]
    acceptance_per_position: tuple[float, ...]
    findings: tuple[str, ...]  # why the verdict is fail (empty for pass)
    result: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # qualify --json

    def statement(self) -> dict:
        return {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.repository, "digest": {"sha256": self.digest.removeprefix("sha256:")}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "qualifiedOn": self.qualified_on,
                "verdict": self.verdict,
                "server": {"url": self.url, "model": self.model, "vllmVersion": self.vllm_version},
                "recipe": (
                    {"name": self.recipe_name, "sha256": self.recipe_sha256} if self.recipe_name is not None else None
                ),
                "hardware": dict(self.hardware),
                "servedFlags": list(self.served_flags),
                "figures": {
                    "decodeTokensPerS": self.decode_tokens_per_s,
                    "speculationConfigured": self.speculation_configured,
                    "acceptanceRate": self.acceptance_rate,
                    "meanAcceptedLength": self.mean_accepted_length,
                    "acceptancePerPosition": list(self.acceptance_per_position),
                },
                "findings": list(self.findings),
                "result": dict(self.result),
            },
        }

    @classmethod
    def from_statement(cls, document: Any) -> "QualificationRecord":
        """The record a statement holds; :class:`RecordInvalid` naming the first key that is not as written."""
        r = _Reader(document, "")
        if r.text("_type") != STATEMENT_TYPE or r.text("predicateType") != PREDICATE_TYPE:
            raise RecordInvalid(
                f"not an in-toto statement with the {PREDICATE_TYPE} predicate "
                f"({document.get('_type')}, {document.get('predicateType')})"
            )
        subjects = r.items("subject")
        if len(subjects) != 1:
            raise RecordInvalid(f"subject: {len(subjects)} entries, expected one")
        subject = _Reader(subjects[0], "subject[0].")
        digest = "sha256:" + subject.mapping("digest").text("sha256")
        if not DIGEST_RE.match(digest):
            raise RecordInvalid("subject[0].digest.sha256: not 64 lowercase hex digits")
        p = r.mapping("predicate")
        verdict = p.text("verdict")
        if verdict not in VERDICTS:
            raise RecordInvalid(f"predicate.verdict: {verdict!r}, expected one of {', '.join(VERDICTS)}")
        server, figures = p.mapping("server"), p.mapping("figures")
        recipe = p.mapping("recipe", optional=True)
        return cls(
            repository=subject.text("name"),
            digest=digest,
            qualified_on=p.text("qualifiedOn"),
            verdict=verdict,
            url=server.text("url"),
            model=server.text("model"),
            vllm_version=server.text("vllmVersion", optional=True),
            recipe_name=recipe.text("name") if recipe else None,
            recipe_sha256=recipe.text("sha256", optional=True) if recipe else None,
            hardware=MappingProxyType(dict(p.mapping("hardware").data)),
            served_flags=tuple(p.strings("servedFlags")),
            decode_tokens_per_s=figures.number("decodeTokensPerS"),
            speculation_configured=figures.boolean("speculationConfigured"),
            acceptance_rate=figures.number("acceptanceRate", optional=True),
            mean_accepted_length=figures.number("meanAcceptedLength", optional=True),
            acceptance_per_position=tuple(figures.numbers("acceptancePerPosition")),
            findings=tuple(p.strings("findings")),
            result=MappingProxyType(dict(p.mapping("result").data)),
        )

    def summary(self) -> dict:
        """What `verify` lists: when, the verdict, the key figures, the recipe and the server."""
        return {
            "qualified_on": self.qualified_on,
            "verdict": self.verdict,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "acceptance_per_position": list(self.acceptance_per_position),
            "recipe": self.recipe_name,
            "recipe_sha256": self.recipe_sha256,
            "model": self.model,
            "vllm_version": self.vllm_version,
            "url": self.url,
            "findings": list(self.findings),
        }


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line of `verify`'s text output from a :meth:`QualificationRecord.summary` (as verify's JSON holds it)."""
    rate = summary.get("acceptance_rate")
    line = (
        f"qualification {summary['qualified_on']}: {summary['verdict']}, decode "
        f"{summary['decode_tokens_per_s']:.1f} tok/s, acceptance {'n/a' if rate is None else f'{rate:.1%}'} "
        f"({summary['model']}, recipe {summary.get('recipe') or 'none'}, vLLM {summary.get('vllm_version') or '?'})"
    )
    if summary.get("recipe_matches_image") is False:
        line += "; measured with another recipe file than the image was built from"
    return line


class _Reader:
    """Typed reads from a parsed JSON mapping, each failure naming the key path."""

    def __init__(self, data: Any, prefix: str):
        if not isinstance(data, Mapping):
            raise RecordInvalid(f"{prefix.rstrip('.') or '(top level)'}: not a JSON object")
        self.data, self.prefix = data, prefix

    def _get(self, key: str, optional: bool) -> Any:
        if key not in self.data and not optional:
            raise RecordInvalid(f"{self.prefix}{key}: missing")
        return self.data.get(key)

    def text(self, key: str, optional: bool = False) -> Optional[str]:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise RecordInvalid(f"{self.prefix}{key}: not a string")
        return value

    def number(self, key: str, optional: bool = False) -> Optional[float]:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RecordInvalid(f"{self.prefix}{key}: not a number")
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self._get(key, False)
        if not isinstance(value, bool):
            raise RecordInvalid(f"{self.prefix}{key}: not true or false")
        return value

    def mapping(self, key: str, optional: bool = False) -> Optional["_Reader"]:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        return _Reader(value, f"{self.prefix}{key}.")

    def items(self, key: str) -> list:
        value = self._get(key, False)
        if not isinstance(value, list):
            raise RecordInvalid(f"{self.prefix}{key}: not a list")
        return value

    def strings(self, key: str) -> list[str]:
        value = self.items(key)
        if not all(isinstance(v, str) for v in value):
            raise RecordInvalid(f"{self.prefix}{key}: not a list of strings")
        return value

    def numbers(self, key: str) -> list[float]:
        value = self.items(key)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise RecordInvalid(f"{self.prefix}{key}: not a list of numbers")
        return [float(v) for v in value]
