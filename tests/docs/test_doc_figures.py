"""The figures the documents give in running text, held to what the simulator computes now.

A table or a paragraph made of figures is a generated section (tools/doc_sections.py); a figure
inside a sentence written by hand is read from the document here and compared with the value the
public API computes on the recipe it names.
"""

from __future__ import annotations

import re

from geometry_cases import post_scenario
from support.repo import REPO

import geometry
from stackbuild.core.gate import gate_input
from stackbuild.core.gpus import KNOWN_GPUS, NO_GPU, serve_batched_tokens
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

GB10 = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
CPU_TINY = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"


def _text(document: str) -> str:
    """The document with every run of whitespace one space (a sentence may wrap anywhere)."""
    return " ".join((REPO / "docs" / document).read_text().split())


def _figures(document: str, pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, _text(document))
    assert found, f"docs/{document} has nothing matching {pattern!r}"
    return found.groups()


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _run(recipe=DEFAULT_RECIPE, **changes) -> geometry.GateRun:
    return geometry.run_gate(
        geometry.GeometryInputs.from_json(dict(gate_input(load_recipe(recipe)).to_json(), **changes))
    )


def test_quickstart_start_up_concurrency_is_the_simulators():
    """vLLM's logged concurrency at max_model_len and the requests the scheduler admits at once."""
    logged, admitted = _figures(
        "quickstart-gb300.md",
        r"count them, ([\d.]+) for 1M tokens; the requests vLLM's scheduler admits at once are the gate's, (\d+):",
    )
    run = _run()
    at_once = geometry.concurrency(run.report, run.inputs)
    assert at_once.max_model_len == 1 << 20
    fit = at_once.fits["with_drafter"][at_once.contexts.index(at_once.max_model_len)]
    assert (float(logged), _number(admitted)) == (fit.vllm_max_concurrency, fit.admitted)


def test_glossary_scheduler_block_of_the_gb10_recipe():
    """With prefix caching off the 2x GB10 recipe's scheduler block is larger than max_model_len."""
    (block,) = _figures("glossary.md", r"\(2x GB10: ([\d,]+) tokens, the lcm of")
    run = _run(GB10)
    assert not run.inputs.enable_prefix_caching
    assert _number(block) == run.report.with_drafter.prefix_cache.scheduler_block_size
    assert _number(block) > geometry.max_model_len_of(run.inputs)


def test_gate_pool_too_small_example_is_the_gates_reason():
    """The example reason of docs/gate.md is what the gate says for the default recipe at that KV memory."""
    (reason,) = _figures("gate.md", r"Each failure gives the numbers, e\.g\. `([^`]+)`")
    memory = _number(re.search(r"the KV cache \(([\d,]+) B at", reason).group(1))
    run = _run(kv_cache_memory_bytes=memory)
    assert not run.verdict.passed
    assert reason in run.verdict.reasons


def test_the_aligned_block_example_is_the_tables_line():
    """docs/gate.md and docs/glossary.md show the table's line for a recipe block vLLM raises."""
    for document in ("gate.md", "glossary.md"):
        given, aligned = _figures(document, r"`block_size (\d+) -> ([\d,]+)")
        run = _run(block_size=_number(given))
        assert _number(aligned) == run.report.with_drafter.block_size
        assert f"block_size {given} -> {aligned} (vLLM's hybrid alignment: " in geometry.render_table_text(
            run.report, run.verdict
        )


def test_the_published_checks_constants_are_the_post_scenarios():
    """The post's constants quoted in docs/gate.md are what the simulator gives for the post's scenario."""
    page, block = _figures("gate.md", r"constants \(MLA page ([\d,]+) B, drafter block ([\d,]+);")
    plan = geometry.simulate(geometry.GeometryInputs.from_json(post_scenario("overlay"))).with_drafter
    assert _number(page) == plan.target_attention_page
    assert {_number(block)} == {r.block_size for r in plan.layers if r.owner == "drafter"}


def test_serving_hit_alignment_of_the_default_recipe():
    (every,) = _figures("serving.md", r"the hit alignment the gate predicts for the recipe \(([\d,]+) tokens on GB300")
    assert _number(every) == _run().report.with_drafter.prefix_cache.hit_alignment_tokens


def test_serving_cpu_tiny_prediction():
    """The CPU serving test's recipe, stock: its blocks, block size, KV memory and hit alignment."""
    blocks, block, gib, hits = _figures(
        "serving.md", r"CPU platform: ([\d,]+) blocks of ([\d,]+) tokens in (\d+) GiB, hits every ([\d,]+) tokens\)"
    )
    run = _run(CPU_TINY, vllm_behaviour="stock")
    plan = run.report.with_drafter
    assert (_number(blocks), _number(block), _number(hits)) == (
        plan.num_blocks,
        plan.block_size,
        plan.prefix_cache.hit_alignment_tokens,
    )
    assert _number(gib) * 2**30 == run.report.kv_cache_memory_bytes


def test_the_batch_vllm_serve_picks_per_gpu():
    """docs/gate.md's max_num_batched_tokens per GPU is stackbuild/core/gpus.py's table (every GPU named once)."""
    (listed,) = _figures("gate.md", r"`EngineArgs\.get_batch_defaults`, by its memory: ([^;]+);")
    named = {}
    for tokens, gpus in re.findall(r"([\d,]+) on ([^,]+(?:, (?![\d])[^,]+)*)", listed):
        for gpu in re.split(r"/| and ", gpus):
            named[gpu.strip()] = _number(tokens)
    known = {gpu.name.replace(" Blackwell", ""): gpu.serve_batched_tokens for gpu in KNOWN_GPUS if gpu is not NO_GPU}
    assert named == known
    (cpu,) = _figures("gate.md", r"([\d,]+) per rank on vLLM's CPU platform")
    assert _number(cpu) == serve_batched_tokens("none", 1)
