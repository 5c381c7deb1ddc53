"""A multi-node recipe's role commands and the one way their slots are filled.

Expectations from vLLM 0.33.0's multi-node launch flags and the 2x GB10 recipe (TP 2 over 2 nodes).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.repo import REPO

from geometry.preflight.checked import HOST_SLOT, MASTER_ADDR_SLOT, NODE_RANK_SLOT
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import (
    LEADER,
    MASTER_PORT,
    WORKER,
    SlotValues,
    ranks_per_node,
    role_commands,
    serve_argv,
    served_flags,
)

MULTI = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml")
SINGLE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")
VALUES = SlotValues(host="10.0.0.5", master_addr="10.0.0.1", node_rank="1")


def test_a_single_node_recipe_has_no_roles():
    assert role_commands(SINGLE) == ()
    assert ranks_per_node(SINGLE) == SINGLE.serving.tensor_parallel_size == 1


def test_filled_puts_each_value_at_its_slot():
    leader, worker = role_commands(MULTI)
    assert (leader.role, worker.role) == (LEADER, WORKER)
    assert set(leader.slots) == {HOST_SLOT, MASTER_ADDR_SLOT} and set(worker.slots) == {
        HOST_SLOT,
        MASTER_ADDR_SLOT,
        NODE_RANK_SLOT,
    }
    base = serve_argv(MULTI)
    host_at = base.index("--host") + 1
    expected_base = base[:host_at] + ["10.0.0.5"] + base[host_at + 1 :]
    assert leader.filled(VALUES) == expected_base + [
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "10.0.0.1",
        "--master-port",
        str(MASTER_PORT),
    ]
    assert worker.filled(VALUES) == expected_base + [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "10.0.0.1",
        "--master-port",
        str(MASTER_PORT),
        "--headless",
    ]
    assert leader.matches(tuple(leader.filled(VALUES))) and worker.matches(tuple(worker.filled(VALUES)))


def test_literal_quotes_the_fixed_elements_only():
    _leader, worker = role_commands(MULTI)
    quoted = worker.filled(SlotValues(host="${H}", master_addr="${A}", node_rank="${R}"), literal=lambda a: f"<{a}>")
    for index, element in enumerate(quoted):
        if index in worker.slots.values():
            assert element in ("${H}", "${A}", "${R}")
        else:
            assert element == f"<{worker.argv[index]}>"


def test_a_worker_needs_a_node_rank_the_leader_does_not():
    leader, worker = role_commands(MULTI)
    no_rank = dataclasses.replace(VALUES, node_rank=None)
    assert "--headless" not in leader.filled(no_rank)
    with pytest.raises(KeyError, match=NODE_RANK_SLOT):
        worker.filled(no_rank)


def test_ranks_per_node_divides_tp_by_nodes():
    four = dataclasses.replace(MULTI, serving=dataclasses.replace(MULTI.serving, nodes=4, tensor_parallel_size=8))
    assert ranks_per_node(four) == 2
    assert [c.nnodes for c in role_commands(four)] == [4, 4]


def test_the_record_holds_what_each_flag_the_argv_writes_says(tmp_path):
    from recipe_copies import copy_recipe

    every = {"max_num_seqs": 7, "max_num_batched_tokens": 4096, "block_size": 64, "enable_prefix_caching": False}
    recipe = load_recipe(copy_recipe(tmp_path, lambda d: d["serving"].update(every)))
    argv, flags = serve_argv(recipe), served_flags(recipe)

    def after(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert flags.model == argv[0] == recipe.target.path
    assert (after("--max-num-seqs"), flags.max_num_seqs) == ("7", 7)
    assert (after("--max-num-batched-tokens"), flags.max_num_batched_tokens) == ("4096", 4096)
    assert (after("--block-size"), flags.block_size) == ("64", 64)
    assert "--no-enable-prefix-caching" in argv and flags.enable_prefix_caching is False
    assert int(after("--tensor-parallel-size")) == flags.tensor_parallel_size
    assert int(after("--max-model-len")) == flags.max_model_len
    assert after("--kv-cache-dtype") == flags.kv_cache_dtype
    assert float(after("--gpu-memory-utilization")) == flags.gpu_memory_utilization
    assert json.loads(after("--speculative-config")) == flags.speculative_config
    assert (after("--tool-call-parser"), after("--reasoning-parser")) == (
        flags.tool_call_parser,
        flags.reasoning_parser,
    )


def test_a_flag_the_argv_leaves_out_is_recorded_as_vllms_default(tmp_path):
    from recipe_copies import copy_recipe

    recipe = load_recipe(
        copy_recipe(
            tmp_path,
            lambda d: [
                d["serving"].pop(k, None)
                for k in (
                    "block_size",
                    "max_num_seqs",
                    "max_num_batched_tokens",
                    "enable_prefix_caching",
                    "tool_call_parser",
                )
            ],
        )
    )
    argv, flags = serve_argv(recipe), served_flags(recipe)
    for flag in (
        "--block-size",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--tool-call-parser",
        "--kv-cache-memory-bytes",
        "--mamba-cache-mode",
    ):
        assert flag not in argv
    assert (
        flags.block_size,
        flags.max_num_seqs,
        flags.max_num_batched_tokens,
        flags.enable_prefix_caching,
        flags.tool_call_parser,
        flags.kv_cache_memory_bytes,
        flags.mamba_cache_mode,
    ) == (None,) * 7
