"""`build.py geometry`: the recipe's gate run, judged for stock vLLM or the overlay, with the requests of each
length that fit at once, and how the two behaviours compare (geometry/verdict/behaviours.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from geometry import (
    Behaviour,
    BehaviourComparison,
    Concurrency,
    GateRun,
    TogetherReport,
    comparison_lines,
    concurrency,
    figures,
    together_report,
    together_workloads,
)
from geometry import compare_behaviours as compare
from geometry import render_table_text as render_text
from geometry import table_json as to_json
from stackbuild.core.gate import recipe_geometry, refuse_failed
from stackbuild.core.recipe import Recipe


@dataclass(frozen=True)
class RecipeGeometry:
    """The judged behaviour's gate run and requests at once, and stock against overlay."""

    recipe: Recipe
    run: GateRun
    at_once: Concurrency
    versus: BehaviourComparison
    together: Optional[TogetherReport]  # asked with --lengths or a pool flag (each row steps the scheduler)

    def to_json(self) -> dict:
        return {
            **to_json(self.run.report, self.run.verdict, self.at_once),
            "stock_vs_overlay": asdict(self.versus),
            **({"requests_sent_together": self.together.to_json()} if self.together else {}),
        }

    def text(self) -> str:
        return "\n".join(
            [
                render_text(self.run.report, self.run.verdict, self.at_once),
                *comparison_lines(self.versus),
                *(self.together.lines() if self.together else ()),
            ]
        )

    def refuse_failed(self, rest: str) -> None:
        """GeometryGateFailed (exit 5) when the judged run fails; ``rest`` says where its other reasons are."""
        refuse_failed(self.recipe, self.run, rest=rest)


def recipe_report(
    recipe: Recipe,
    *,
    behaviour: Behaviour,
    contexts: Optional[Iterable[int]] = None,
    lengths: Optional[list] = None,
    num_gpu_blocks_override: Optional[int] = None,
    kv_cache_memory_bytes: Optional[int] = None,
) -> RecipeGeometry:
    """Both behaviours' gate runs and requests at once, ``behaviour``'s judged (``contexts``: the request
    lengths, default geometry.plan.concurrency.contexts_for's), and, when any of them is given, requests sent
    together for ``lengths`` (``(prompt, output or None)``; default the default lengths) on the pool of
    ``num_gpu_blocks_override`` / ``kv_cache_memory_bytes``; ContextTooLong for a length vLLM refuses."""
    runs = {
        b: recipe_geometry(recipe, vllm_behaviour=b, kv_cache_memory_bytes=kv_cache_memory_bytes) for b in Behaviour
    }
    at_once = {b: concurrency(r.report, r.inputs, contexts) for b, r in runs.items()}
    versus = compare(*(figures(runs[b].report, runs[b].verdict, at_once[b]) for b in Behaviour))
    together = None
    if lengths or num_gpu_blocks_override is not None or kv_cache_memory_bytes is not None:
        works = together_workloads(runs[behaviour].inputs, lengths)
        together = together_report(
            {b: (r.report, r.inputs) for b, r in runs.items()}, works, num_gpu_blocks_override, kv_cache_memory_bytes
        )
    return RecipeGeometry(recipe, runs[behaviour], at_once[behaviour], versus, together)
