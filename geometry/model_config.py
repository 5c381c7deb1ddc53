"""What the target and drafter ``config.json`` are to the simulator, and their checks before it reads them
(stdlib only).

:func:`target_kind` is the one classification of a target (which model builder plans it, or
:class:`ConfigInvalid`); :func:`text_config` is the part of a config that describes the text model.

The simulator reads what it needs from the configs as vLLM would; this module
refuses, with the key at fault, a config it would misread: an architecture it
does not model, counts that are missing, zero, negative, fractional, booleans
or absurdly large, a ``layer_types`` list whose length is not
``num_hidden_layers``, a target without an attention layer, a drafter
without a positive ``dflash_config.block_size``.
The recipe loader and the in-image gate both call :func:`check_configs`.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import BadInput

# Larger than any real layer count, head count or head size by orders of magnitude,
# small enough that the simulator's per-layer work stays bounded.
MAX_COUNT = 1 << 16
# Token counts (context lengths, windows): 2**40 tokens is far beyond any model.
MAX_TOKENS = 1 << 40

# architectures[0] -> the simulator's model kind (see target_kind).
MODELLED_TARGETS = {
    "Glm5NextForCausalLM": "glm5next",
    "Qwen3NextForCausalLM": "qwen3_next",
    "KimiLinearForCausalLM": "kimi_linear",
    "Qwen3ForCausalLM": "qwen3",
}
MODELLED_TARGET_TYPES = {"glm5_next": "glm5next", "glm5_next_text": "glm5next",
                         "qwen3_next": "qwen3_next", "kimi_linear": "kimi_linear", "qwen3": "qwen3"}
# The kinds whose layers are all full attention (no mamba state: no hybrid alignment, no mamba_cache_mode).
DENSE_TARGETS = ("qwen3",)
TARGET_LAYER_TYPES = {
    "glm5next": ("linear_attention", "indexed_attention"),
    "qwen3_next": ("linear_attention", "full_attention"),
    "qwen3": ("full_attention",),
}
DRAFTER_LAYER_TYPES = ("sliding_attention", "full_attention")
# The target's attention layer type, and the layer pattern without ``layer_types``: every
# ``interval``-th layer is attention (Qwen3-Next: ``full_attention_interval``, default 4).
TARGET_ATTENTION_TYPE = {"glm5next": "indexed_attention", "qwen3_next": "full_attention"}
DEFAULT_ATTENTION_INTERVAL = 4


class ConfigInvalid(BadInput):
    """A config the simulator would misread: ``<which> config: <key>: <why>``."""

    def __init__(self, which: str, key: str, problem: str):
        self.which = which
        self.key = key
        self.problem = problem
        super().__init__(f"{which} config: {key}: {problem}" if key else f"{which} config: {problem}")


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    return type(value).__name__


class _Reader:
    def __init__(self, which: str, cfg: Mapping[str, Any], prefix: str = ""):
        self.which, self.cfg, self.prefix = which, cfg, prefix

    def fail(self, key: str, problem: str) -> ConfigInvalid:
        return ConfigInvalid(self.which, self.prefix + key, problem)

    def integer(self, key: str, *, required: bool = True, minimum: int = 1, maximum: int = MAX_COUNT,
                allow_null: bool = False) -> int | None:
        """``allow_null``: null reads as absent (where vLLM and the simulator treat it so)."""
        if key not in self.cfg or (self.cfg[key] is None and allow_null):
            if required:
                raise self.fail(key, "required field is missing")
            return None
        value = self.cfg[key]
        if type(value) is not int:
            raise self.fail(key, f"expected an integer, got {_describe(value)}")
        if value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:,}, got {value:,}")
        return value

    def int_list(self, key: str, *, minimum: int, maximum: int) -> list[int]:
        value = self.cfg.get(key)
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list of integers, got {_describe(value)}")
        for i, item in enumerate(value):
            if type(item) is not int or not minimum <= item <= maximum:
                raise self.fail(f"{key}[{i}]", f"expected an integer in {minimum}..{maximum}, got {_describe(item)}")
        return value

    def layer_types(self, n_layers: int, allowed: tuple[str, ...]) -> None:
        if self.cfg.get("layer_types") is None:
            return
        value = self.cfg["layer_types"]
        if not isinstance(value, list):
            raise self.fail("layer_types", f"expected a list, got {_describe(value)}")
        if len(value) != n_layers:
            raise self.fail("layer_types", f"has {len(value)} entries but num_hidden_layers is {n_layers}")
        for i, item in enumerate(value):
            if item not in allowed:
                raise self.fail(f"layer_types[{i}]", f"must be one of: {', '.join(allowed)}; got {_describe(item)}")

    def mapping(self, key: str) -> "_Reader":
        value = self.cfg.get(key)
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected an object, got {_describe(value)}" if key in self.cfg else "required field is missing")
        return _Reader(self.which, value, f"{self.prefix}{key}.")


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's config: a multimodal-shaped config's ``text_config`` object, else the config itself."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def target_kind(cfg: Mapping[str, Any]) -> str:
    """The modelled kind of a target config, or :class:`ConfigInvalid` naming its architecture.

    As vLLM picks the model class: by ``architectures`` (vLLM takes the first listed one its
    registry has; this takes the first, exactly, and refuses a list whose first is not modelled),
    and, without ``architectures``, by the text config's ``model_type``.
    """
    modelled = ", ".join(MODELLED_TARGETS)
    archs = cfg.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
            raise ConfigInvalid("target", "architectures", f"expected a non-empty list of names, got {_describe(archs)}")
        kind = MODELLED_TARGETS.get(archs[0])
        if kind is None:
            raise ConfigInvalid("target", "architectures", f"{archs[0]} is not modelled by the geometry gate (modelled: {modelled})")
        return kind
    model_type = text_config(cfg).get("model_type", cfg.get("model_type"))
    kind = MODELLED_TARGET_TYPES.get(model_type) if isinstance(model_type, str) else None
    if kind is None:
        raise ConfigInvalid("target", "architectures",
                            f"missing, and model_type {model_type!r} is not modelled (modelled: {modelled})")
    return kind


def is_hybrid(kind: str) -> bool:
    """Whether vLLM runs a target of ``kind`` as a hybrid (attention + mamba state) model."""
    return kind not in DENSE_TARGETS


def check_target(cfg: Mapping[str, Any]) -> str:
    """Raise :class:`ConfigInvalid` for a target config the simulator would misread; return its kind."""
    if not isinstance(cfg, Mapping):
        raise ConfigInvalid("target", "", "must be a JSON object")
    kind = target_kind(cfg)
    text = text_config(cfg)
    r = _Reader("target", text, "" if text is cfg else "text_config.")
    n_layers = r.integer("num_hidden_layers")
    r.integer("max_position_embeddings", required=False, allow_null=True, maximum=MAX_TOKENS)
    if kind == "glm5next":
        r.integer("num_attention_heads")
        r.integer("kv_lora_rank")
        r.integer("qk_rope_head_dim", required=False, allow_null=True, minimum=0)
        r.integer("linear_num_heads")
        r.integer("linear_head_dim")
        r.integer("linear_conv_kernel_dim", required=False)
        r.integer("index_topk", required=False, allow_null=True)
        r.integer("index_kpool", required=False)
        r.integer("index_head_dim", required=False)
        r.layer_types(n_layers, TARGET_LAYER_TYPES[kind])
        _require_attention(r, kind, n_layers, DEFAULT_ATTENTION_INTERVAL)
    elif kind == "qwen3_next":
        r.integer("num_attention_heads")
        r.integer("num_key_value_heads", required=False)
        if "head_dim" not in r.cfg:
            # Not hidden_size // num_attention_heads: transformers fills in its default.
            raise r.fail("head_dim", "required field is missing (transformers' Qwen3NextConfig then takes 256, "
                                     "whose FLASH_ATTN pages are not modelled)")
        r.integer("head_dim")
        for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
            r.integer(key)
        r.integer("linear_conv_kernel_dim", required=False)
        interval = r.integer("full_attention_interval", required=False)
        r.layer_types(n_layers, TARGET_LAYER_TYPES[kind])
        _require_attention(r, kind, n_layers, interval or DEFAULT_ATTENTION_INTERVAL)
    elif kind == "qwen3":
        heads = r.integer("num_attention_heads")
        # transformers' Qwen3Config fills a missing one with its defaults (8 KV heads, head_dim 128).
        for key in ("num_key_value_heads", "head_dim"):
            if key not in r.cfg:
                raise r.fail(key, "required field is missing (vLLM would take transformers' Qwen3Config default, "
                                  "which the gate does not model)")
        kv_heads = r.integer("num_key_value_heads")
        if heads % kv_heads:
            raise r.fail("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
        r.integer("head_dim")
        if r.cfg.get("use_sliding_window") is True:
            raise r.fail("use_sliding_window", "sliding-window layers of a dense Qwen3 are not modelled")
        r.layer_types(n_layers, TARGET_LAYER_TYPES[kind])
    else:  # kimi_linear
        for key in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
            r.integer(key)
        r.integer("qk_rope_head_dim", minimum=0)
        lac = r.mapping("linear_attn_config")
        lac.integer("num_heads")
        lac.integer("head_dim")
        lac.integer("short_conv_kernel_size", required=False)
        kda_layers = lac.int_list("kda_layers", minimum=1, maximum=n_layers)
        # vLLM (KimiLinearConfig.is_kda_layer) reads a layer's kind from kda_layers alone: a
        # layer not listed there is MLA, whatever full_attn_layers says (it is only required).
        lac.int_list("full_attn_layers", minimum=1, maximum=n_layers)
        if set(kda_layers) >= set(range(1, n_layers + 1)):
            raise lac.fail("kda_layers", f"lists all {n_layers} layers, so none is attention (a layer's kind "
                                         f"is read from kda_layers alone): {NO_ATTENTION}")
    return kind


NO_ATTENTION = ("the target needs an attention layer, whose KV page the drafter's pages must fit "
                "(a target without one is not modelled)")


def _require_attention(r: "_Reader", kind: str, n_layers: int, interval: int) -> None:
    """At least one target layer is attention, listed in ``layer_types`` or by the default pattern."""
    if r.cfg.get("layer_types") is not None:
        if TARGET_ATTENTION_TYPE[kind] not in r.cfg["layer_types"]:
            raise r.fail("layer_types", f"has no {TARGET_ATTENTION_TYPE[kind]} layer: {NO_ATTENTION}")
    elif n_layers < interval:
        key = "full_attention_interval" if "full_attention_interval" in r.cfg else "num_hidden_layers"
        raise r.fail(key, f"with {n_layers} layers and every {interval}th one attention, none is: {NO_ATTENTION}")


DRAFTER_DEFAULTS_NOT_MODELLED = ("vLLM would take the default of the drafter's transformers config class, "
                                 "which the gate does not model")


def check_drafter(cfg: Mapping[str, Any]) -> int:
    """Raise :class:`ConfigInvalid` for a DFlash drafter config the simulator would misread; return its block size."""
    if not isinstance(cfg, Mapping):
        raise ConfigInvalid("drafter", "", "must be a JSON object")
    r = _Reader("drafter", cfg)
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
    r.integer("head_dim")
    window = r.integer("sliding_window", required=False, allow_null=True, maximum=MAX_TOKENS)
    r.layer_types(n_layers, DRAFTER_LAYER_TYPES)
    dflash = r.mapping("dflash_config")
    block = dflash.integer("block_size", minimum=2)
    swa_window = dflash.integer("swa_window_size", required=False, allow_null=True, maximum=MAX_TOKENS)
    sliding = "sliding_attention" in (cfg.get("layer_types") or ()) or dflash.cfg.get("use_swa") is True
    if sliding and window is None and swa_window is None:
        raise r.fail("sliding_window", "required field is missing (the drafter has sliding-window layers)")
    return block


def check_configs(target: Mapping[str, Any], drafter: Mapping[str, Any] | None) -> None:
    """Both configs (the drafter may be absent); raises :class:`ConfigInvalid`."""
    check_target(target)
    if drafter is not None:
        check_drafter(drafter)
