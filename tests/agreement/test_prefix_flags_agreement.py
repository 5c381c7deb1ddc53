"""``resolve_prefix_caching`` against vLLM 0.34.0's own resolution of the serve
flags: vLLM's serve argument parser, ``EngineArgs.from_cli_args`` and
``EngineArgs.create_engine_config`` (which sets the prefix-caching default
from ``ModelConfig.is_prefix_caching_supported`` and runs
``MambaModelConfig.verify_and_update_config``) on a local config.json.

The engine config is built for the Qwen3-Next and Kimi Linear targets; vLLM
cannot inspect ``Glm5NextForCausalLM`` on a CPU box without torchvision, so for
GLM-5.3 the test checks from vLLM's source that the class is ``IsHybrid``
(what makes vLLM's default "on" for it, as for the other two).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import vllm.engine.arg_utils  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise
    pytest.skip(f"vLLM is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402

from geometry.errors import BadInput  # noqa: E402
from geometry.model.inputs import GeometryInputs, resolve_prefix_caching  # noqa: E402

PREFIX_FLAGS = {None: [], True: ["--enable-prefix-caching"], False: ["--no-enable-prefix-caching"]}
MODE_FLAGS = {None: [], "align": ["--mamba-cache-mode", "align"], "none": ["--mamba-cache-mode", "none"]}


@pytest.fixture(scope="module")
def engine_config():
    """Builds vLLM's engine config for a model directory and serve flags.
    No GPU here: the platform's device type is reported as "cpu" for the
    parser's ``DeviceConfig``."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cls = type(current_platform)
    had = "device_type" in vars(cls)
    old = vars(cls).get("device_type")
    cls.device_type = "cpu"
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())

    def build(model_dir: Path, flags: list[str]):
        args = parser.parse_args(["--model", str(model_dir), "--skip-tokenizer-init", *flags])
        return EngineArgs.from_cli_args(args).create_engine_config()

    yield build
    if had:
        cls.device_type = old
    else:
        del cls.device_type


@pytest.mark.parametrize("target", ["qwen3_next", "kimi_linear"])
def test_resolution_matches_vllm_engine_config(target, engine_config, tmp_path):
    import random

    cfg = C.qwen3_next_target(random.Random(1)) if target == "qwen3_next" else C.kimi_linear_config()
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    seen = set()
    for prefix, pflags in PREFIX_FLAGS.items():
        for mode, mflags in MODE_FLAGS.items():
            vc = engine_config(tmp_path, pflags + mflags).cache_config
            expected = (vc.enable_prefix_caching, vc.mamba_cache_mode)
            assert resolve_prefix_caching(cfg, prefix, mode) == expected, (prefix, mode)
            seen.add(expected)
            if prefix is None and mode is None:
                assert expected == (True, "align")  # the default for hybrid targets
    assert seen == {(True, "align"), (False, "none")}


def test_glm5next_is_hybrid_in_vllm_source():
    import vllm

    src = Path(vllm.__file__).parent / "models" / "glm5next" / "common" / "model.py"
    classes = {n.name: n for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.ClassDef)}
    bases = {getattr(b, "id", None) for b in classes["Glm5NextForCausalLM"].bases}
    assert "IsHybrid" in bases
    target, _ = C.recipe_configs()
    assert resolve_prefix_caching(target, None) == (True, "align")
    assert resolve_prefix_caching(target, False, "align") == (False, "none")


def test_bad_flags_and_inconsistent_inputs():
    target, _ = C.recipe_configs()
    with pytest.raises(BadInput, match="mamba-cache-mode"):
        resolve_prefix_caching(target, None, "all")
    with pytest.raises(BadInput, match="enable_prefix_caching"):
        resolve_prefix_caching(target, "yes")
    with pytest.raises(BadInput, match="not modelled"):
        resolve_prefix_caching({"architectures": ["LlamaForCausalLM"]}, None)
    data = C.recipe_input("stock", mamba_cache_mode="align")
    with pytest.raises(BadInput, match="enable_prefix_caching false"):
        GeometryInputs.from_json(data)
    inputs = GeometryInputs.from_json(dict(data, enable_prefix_caching=True))
    again = GeometryInputs.from_json(json.loads(json.dumps(inputs.to_json())))
    assert (again.enable_prefix_caching, again.mamba_cache_mode) == (True, "align")
