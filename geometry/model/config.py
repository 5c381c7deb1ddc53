"""The target and drafter ``config.json`` as the simulator reads them: the target read
once into a :class:`TargetModel` (its architecture entry and text config), and both checked
before anything reads them (stdlib only).

:func:`read_target` is the one classification of a target (which architecture entry plans it,
or :class:`ConfigInvalid`); everything downstream asks the ``TargetModel``, never the raw dict.

The checks refuse, with the key at fault, a config the simulator would misread: an
architecture it does not model, counts that are missing, zero, negative, fractional, booleans
or absurdly large, a ``layer_types`` list whose length is not ``num_hidden_layers``, a target
without an attention layer, a drafter without a positive ``dflash_config.block_size``.
The recipe loader, the start check and :class:`~geometry.model.inputs.GeometryInputs` call
:func:`check_target` and :func:`check_drafter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from geometry.errors import BadInput
from geometry.model.architecture import Architecture
from geometry.model.architectures import BY_HF_ARCHITECTURE, BY_MODEL_TYPE
from geometry.model.config_reader import MAX_COUNT, MAX_TOKENS, ConfigInvalid, ConfigReader, describe

__all__ = [
    "ConfigInvalid",
    "MAX_COUNT",
    "MAX_TOKENS",
    "TargetModel",
    "read_target",
    "text_config",
    "check_target",
    "check_drafter",
    "DrafterModel",
    "DRAFTER_LAYER_TYPES",
]

DRAFTER_LAYER_TYPES = ("sliding_attention", "full_attention")
MODEL_DTYPES = ("bfloat16", "float16", "float32")


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's config: a multimodal-shaped config's ``text_config`` object, else the config itself."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


@dataclass(frozen=True)
class TargetModel:
    """A target config, read: the architecture entry that plans it and the text model's config."""

    architecture: Architecture
    text: Mapping[str, Any]
    dtype_keys: tuple[Any, ...]  # the dtype keys in vLLM's order of reading: text config, then outer config

    @property
    def kind(self) -> str:
        return self.architecture.kind

    @property
    def hybrid(self) -> bool:
        return self.architecture.hybrid

    @property
    def max_position_embeddings(self) -> int | None:
        value = self.text.get("max_position_embeddings")
        return value if type(value) is int and value > 0 else None

    def max_model_len(self, flag: int | None) -> int:
        """max_model_len as vLLM runs it: the flag, else max_position_embeddings (1 without one)."""
        return flag or self.max_position_embeddings or 1

    @property
    def model_dtype(self) -> str:
        """The model dtype (``dtype`` / ``torch_dtype``, bfloat16 when unset); BadInput when not modelled."""
        d = next((k for k in self.dtype_keys if k), None)
        d = str(d or "bfloat16").replace("torch.", "")
        if d not in MODEL_DTYPES:
            raise BadInput(f"model dtype {d!r} not modelled")
        return d

    def mamba_cache_mode(self, prefix_caching: bool) -> str:
        """``MambaModelConfig.verify_and_update_config``: "align" with prefix caching on, "none"
        with it off; a dense target keeps the default "none" (the hook runs for hybrid models only)."""
        return "align" if prefix_caching and self.hybrid else "none"

    @property
    def runs_sparse_mla(self) -> bool:
        return self.architecture.runs_sparse_mla(self.text)


def _architecture(cfg: Mapping[str, Any], text: Mapping[str, Any]) -> Architecture:
    """As vLLM picks the model class: by ``architectures`` (vLLM takes the first listed one its
    registry has; this takes the first, exactly, and refuses a list whose first is not modelled),
    and, without ``architectures``, by the text config's ``model_type`` (``text``)."""
    modelled = ", ".join(BY_HF_ARCHITECTURE)
    archs = cfg.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
            raise ConfigInvalid("target", "architectures", f"expected a non-empty list of names, got {describe(archs)}")
        arch = BY_HF_ARCHITECTURE.get(archs[0])
        if arch is None:
            raise ConfigInvalid(
                "target", "architectures", f"{archs[0]} is not modelled by the geometry gate (modelled: {modelled})"
            )
        return arch
    model_type = text.get("model_type", cfg.get("model_type"))
    arch = BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None
    if arch is None:
        raise ConfigInvalid(
            "target", "architectures", f"missing, and model_type {model_type!r} is not modelled (modelled: {modelled})"
        )
    return arch


def read_target(cfg: Mapping[str, Any]) -> TargetModel:
    """The target config read once, or :class:`ConfigInvalid` naming its architecture."""
    if not isinstance(cfg, Mapping):
        raise ConfigInvalid("target", "", "must be a JSON object")
    tc = text_config(cfg)
    keys = (tc.get("dtype"), tc.get("torch_dtype"), cfg.get("dtype"), cfg.get("torch_dtype"))
    return TargetModel(_architecture(cfg, tc), tc, keys)


def check_target(cfg: Mapping[str, Any]) -> TargetModel:
    """Raise :class:`ConfigInvalid` for a target config the simulator would misread; return it, read."""
    target = read_target(cfg)
    r = ConfigReader("target", target.text, "" if target.text is cfg else "text_config.")
    n_layers = r.integer("num_hidden_layers")
    r.integer("max_position_embeddings", required=False, allow_null=True, maximum=MAX_TOKENS)
    target.architecture.check(r, n_layers)
    return target


DRAFTER_DEFAULTS_NOT_MODELLED = (
    "vLLM would take the default of the drafter's transformers config class, which the gate does not model"
)


# DFlash2 drafters (candidate heads) run on vLLM's V2 model runner only ("Model Runner V1 does not
# support: DFlash candidate-head drafts"); the CPU platform runs V1 (V2 needs Triton's CPU backend).
CANDIDATE_HEAD_ARCHITECTURES = ("DFlash2DraftModel",)


@dataclass(frozen=True)
class DrafterModel:
    """A DFlash/DFlash2 drafter config, read and checked: what its attention layers are built from."""

    architecture: str | None  # the first of ``architectures``
    num_attention_heads: int
    num_kv_heads: int  # ``num_key_value_heads`` (null: num_attention_heads, as transformers reads it)
    head_dim: int
    # ``_resolve_layer_attention``: each layer's sliding window, None for full attention
    windows: tuple[int | None, ...]
    block_size: int  # ``dflash_config.block_size``: the tokens one draft proposes
    # ``dflash_has_any_non_causal``: some layer attends non-causally (the automatic backend choice reads it)
    non_causal: bool

    @property
    def candidate_heads(self) -> bool:
        """A DFlash2 (candidate-head) drafter."""
        return self.architecture in CANDIDATE_HEAD_ARCHITECTURES

    @property
    def mixed_windows(self) -> bool:
        """Sliding and full-attention layers in one drafter."""
        return len({w is None for w in self.windows}) > 1


def check_drafter(cfg: Mapping[str, Any]) -> DrafterModel:
    """Raise :class:`ConfigInvalid` for a DFlash drafter config the simulator would misread; return it, read."""
    if not isinstance(cfg, Mapping):
        raise ConfigInvalid("drafter", "", "must be a JSON object")
    r = ConfigReader("drafter", cfg)
    n_layers = r.integer("num_hidden_layers")
    heads = r.integer("num_attention_heads")
    # vLLM reads the drafter's config through its transformers class, which fills a missing
    # num_key_value_heads or head_dim with the class's defaults (Qwen3Config: 32 and 128), not
    # num_attention_heads and hidden_size // num_attention_heads: refused rather than misread.
    for key in ("num_key_value_heads", "head_dim"):
        if key not in cfg:
            raise r.fail(key, f"required field is missing ({DRAFTER_DEFAULTS_NOT_MODELLED})")
    # null: transformers reads num_key_value_heads as num_attention_heads (as the simulator does).
    kv_heads = r.integer("num_key_value_heads", required=False, allow_null=True)
    if kv_heads is not None and heads % kv_heads:
        raise r.fail("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
    head_dim = r.integer("head_dim")
    window = r.integer("sliding_window", required=False, allow_null=True, maximum=MAX_TOKENS)
    r.layer_types(n_layers, DRAFTER_LAYER_TYPES)
    dflash = r.mapping("dflash_config")
    block = dflash.integer("block_size", minimum=2)
    swa_window = dflash.integer("swa_window_size", required=False, allow_null=True, maximum=MAX_TOKENS)
    use_swa = dflash.boolean("use_swa")
    layer_types = cfg.get("layer_types")
    if "sliding_attention" in (layer_types or ()) or use_swa:
        # vLLM takes dflash_config.swa_window_size when the key is there (even null), else sliding_window.
        if "swa_window_size" in dflash.cfg:
            if swa_window is None:
                raise dflash.fail(
                    "swa_window_size", "null, and the drafter has sliding-window layers (vLLM needs a window)"
                )
        elif window is None:
            raise r.fail("sliding_window", "required field is missing (the drafter has sliding-window layers)")
    archs = cfg.get("architectures")
    return DrafterModel(
        architecture=archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None,
        num_attention_heads=heads,
        num_kv_heads=kv_heads or heads,
        head_dim=head_dim,
        windows=_drafter_windows(
            n_layers, layer_types, use_swa, swa_window if "swa_window_size" in dflash.cfg else window
        ),
        block_size=block,
        non_causal=not all(_drafter_layer_causal(cfg, i) for i in range(n_layers)),
    )


def _drafter_layer_causal(cfg: Mapping[str, Any], i: int) -> bool:
    """``_dflash_layer_causal``: ``is_causal``, else ``dflash_config.causal``, else whether ``layer_types``
    names the layer sliding (no ``layer_types``: non-causal)."""
    if cfg.get("is_causal") is not None:
        return bool(cfg["is_causal"])
    override = (cfg.get("dflash_config") or {}).get("causal")
    if override is not None:
        return bool(override)
    layer_types = cfg.get("layer_types")
    if not layer_types:
        return False
    return layer_types[i] == "sliding_attention"


def _drafter_windows(
    n_layers: int, layer_types: list[str] | None, use_swa: bool, window: int | None
) -> tuple[int | None, ...]:
    """``_resolve_layer_attention``: ``layer_types`` decides each layer, unless it lists no sliding layer and
    ``dflash_config.use_swa`` is set (then every layer slides, as without ``layer_types``)."""
    if layer_types is None or (use_swa and "sliding_attention" not in layer_types):
        return tuple(window if use_swa else None for _ in range(n_layers))
    return tuple(window if t == "sliding_attention" else None for t in layer_types)
