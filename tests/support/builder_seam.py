"""vLLM's ``KVCacheConfigBuilder`` seam, tried: a builder that gives the drafter's attention layers the
block size whose page equals the target's MLA latent page, with no change to vLLM's files, and what the
imported vLLM (run from its tree, ``PYTHONPATH=TREE:REPO:REPO/tests``) does with its groups.

* ``ExactFitDraftBuilder``: vLLM's ``DefaultKVCacheConfigBuilder`` whose ``get_kv_cache_groups`` first
  re-sizes each draft attention spec (``dataclasses.replace`` of the spec the runner reported, block
  ``P / bytes per token``, kept only when exact and unpadded) and then groups as the default does. It
  sees specs only: with the multiprocess executor the engine-core process that calls it holds no
  layers, so the drafter backend's kernel block sizes (the last condition of patch 0001's fit) are
  not checked here.
* ``builder_installed``: the platform hook ``Platform.get_kv_cache_config_builder_cls`` answering the
  builder's qualified name inside the block (a platform that overrides the hook does this; nothing
  in vLLM selects a builder by name).
* ``recipe_plan``: the gate input's specs, as the oracle collects them (the layer objects' own
  ``get_kv_cache_spec``, the V2 runner's collection), grouped and sized by vLLM's Core path
  (``get_kv_cache_groups_from_builder``: the platform's builder and Core's partition check, then
  ``get_kv_cache_configs``) with the builder installed or not.
* ``runner_views``: the KV tensors 0.34.0's ``allocate_kv_cache`` views for that config, on the CPU.

Command line: ``python -m support.builder_seam JSON`` (``{"inputs": gate input, "builder": bool,
"engine_core": engine-core case or null, "platform": bool}``) prints one ``BUILDER_SEAM {json}`` line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import replace

from vllm.v1.core.kv_cache_planning import DefaultKVCacheConfigBuilder
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    HiddenStateCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    SparseCacheRole,
)

BUILDER = "support.builder_seam.ExactFitDraftBuilder"


def target_page(specs: dict) -> int | None:
    """The one page of the target's MLA latent layers (not draft, not the indexer, one state a token)."""
    pages = {
        s.page_size_bytes
        for s in specs.values()
        if isinstance(s, MLAAttentionSpec)
        and not isinstance(s, HiddenStateCacheSpec)
        and not s.is_draft
        and s.cache_role == SparseCacheRole.SPARSE
        and s.tokens_per_state == 1
    }
    return pages.pop() if len(pages) == 1 else None


def fit_draft_specs(specs: dict) -> dict:
    """``specs`` with each draft attention layer's block set to ``P / bytes per token`` where that is
    exact and the page unpadded; other layers (and drafts without an exact fit) as given."""
    page = target_page(specs)
    if page is None:
        return dict(specs)
    fitted = dict(specs)
    for name, spec in specs.items():
        if not spec.is_draft or not isinstance(spec, (FullAttentionSpec, SlidingWindowSpec)):
            continue
        if isinstance(spec, (MLAAttentionSpec, SlidingWindowMLASpec)) or spec.page_size_padded is not None:
            continue
        per_token, rest = divmod(spec.page_size_bytes, spec.block_size)
        if rest or page % per_token:
            continue
        new = replace(spec, block_size=page // per_token)
        if new.page_size_bytes == page:
            fitted[name] = new
    return fitted


class ExactFitDraftBuilder(DefaultKVCacheConfigBuilder):
    """The default grouping and placement, on the specs with the drafter's blocks fitted."""

    def get_kv_cache_groups(self, vllm_config, kv_cache_spec):
        return super().get_kv_cache_groups(vllm_config, fit_draft_specs(kv_cache_spec))


@contextlib.contextmanager
def builder_installed(qualname: str = BUILDER):
    """Every platform's ``get_kv_cache_config_builder_cls`` answers ``qualname`` inside the block."""
    from vllm.platforms.interface import Platform

    from geometry.oracle.cpu_shims import patched

    with patched(Platform, "get_kv_cache_config_builder_cls", classmethod(lambda cls, vllm_config: qualname)):
        yield


def _groups(config) -> list[dict]:
    from vllm.v1.kv_cache_interface import iter_layer_specs

    rows = []
    for g in config.kv_cache_groups:
        layer_specs = list(iter_layer_specs(g.kv_cache_spec))
        rows.append(
            {
                "layers": list(g.layer_names),
                "type": type(layer_specs[0]).__name__,
                "block_size": g.kv_cache_spec.block_size,
                "bytes": sum(s.page_size_bytes for s in layer_specs),
            }
        )
    return rows


def recipe_plan(data: dict, builder: bool) -> dict:
    """The with-drafter plan of gate input ``data`` by vLLM's Core path (the builder installed or not):
    the runner's draft specs, the groups, bytes per block and blocks, and the runner's KV views."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import get_kv_cache_configs, get_kv_cache_groups_from_builder
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    from geometry.model.inputs import GeometryInputs
    from geometry.oracle.cpu_shims import model_registry_fallback
    from geometry.oracle.plan import _build, _resolve_layout, planning
    from geometry.oracle.serving_platform import serving_platform

    inputs = GeometryInputs.from_json(data)
    with contextlib.ExitStack() as stack:
        platform = stack.enter_context(serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16))
        if builder:
            stack.enter_context(builder_installed())
        cfg = _build(inputs, True, inputs.num_speculative_tokens)
        # What ModelConfig answers and the stand-in lacks: the registry's answer for Glm5NextForCausalLM
        # (no grouping of its own; the default builder reads it) and the length as given (not -1).
        object.__setattr__(cfg.model_config, "supports_kv_cache_grouping", False)
        object.__setattr__(cfg.model_config, "original_max_model_len", cfg.model_config.max_model_len)
        with model_registry_fallback():
            platform.update_block_size_for_backend(cfg)
        with set_current_vllm_config(cfg):
            specs = get_kv_cache_spec(cfg)
            layout = _resolve_layout(cfg, specs)
            groups = get_kv_cache_groups_from_builder(get_kv_cache_config_builder(cfg), cfg, specs)
            (config,) = get_kv_cache_configs(cfg, [specs], [inputs.kv_cache_memory_bytes], groups)
            bytes_per_block = planning(inputs)._get_kv_cache_bytes_per_block(config.kv_cache_groups, layout)
            views = runner_views(config, cfg)
    drafts = sorted(n for n, s in specs.items() if s.is_draft)
    return {
        "runner_draft_blocks": {n: specs[n].block_size for n in drafts},
        "target_page": target_page(specs),
        "groups": _groups(config),
        "bytes_per_block": bytes_per_block,
        "num_blocks": config.num_blocks,
        "draft_view_shapes": {n: views[n] for n in drafts},
        "vllm_file": sys.modules["vllm"].__file__,
    }


def runner_views(config, cfg) -> dict:
    """The shape of each layer's KV view that vLLM's ``allocate_kv_cache`` (the V2 runner's
    ``init_kv_cache``) makes for ``config`` re-planned at one block, on a CPU buffer."""
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.worker.utils import allocate_kv_cache

    one = get_kv_cache_config_builder(cfg).get_kv_cache_config_from_groups(cfg, config.kv_cache_groups, 1)
    views = allocate_kv_cache(one, "cpu", cfg.cache_config.get_resolved_kv_cache_layout())
    return {n: list(v.shape) for n, v in views.items()}


def engine_core(params: dict, builder: bool) -> dict:
    """``support.engine_core.engine_core_summary`` of ``params``, the builder installed or not."""
    from support.engine_core import engine_core_summary

    with builder_installed() if builder else contextlib.nullcontext():
        return engine_core_summary(params)


def cuda_builder() -> dict:
    """What CUDA's platform answers for the builder: whether ``CudaPlatform`` overrides the hook, and the
    qualified name it returns (vLLM's own hook on the base ``Platform`` otherwise)."""
    from geometry.oracle.backend_selection import cuda_platform

    cuda = cuda_platform().CudaPlatform
    return {
        "overrides_hook": "get_kv_cache_config_builder_cls" in vars(cuda),
        "builder": cuda.get_kv_cache_config_builder_cls(None),
    }


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    out = {}
    if request.get("inputs") is not None:
        out["recipe"] = recipe_plan(request["inputs"], request["builder"])
    if request.get("engine_core") is not None:
        out["engine_core"] = engine_core(request["engine_core"], request["builder"])
    if request.get("platform"):
        out["cuda"] = cuda_builder()
    print("BUILDER_SEAM " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
