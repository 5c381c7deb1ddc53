"""The model description: the layers of the target and drafter in vLLM's
registration order, their KV dtypes, backends and per-layer spec builders
(each layer's ``get_kv_cache_spec`` after the runner's
``customize_attention_spec``), for every modelled architecture (stdlib only)."""

from __future__ import annotations

from typing import Any, Mapping

try:  # package import (tests, oracle) or sibling import (CLI as a script)
    from . import backends as B
    from .inputs import BadInput, GeometryInputs
    from .kv_spec import (DTYPE_BYTES, SUPPORTED_KV_DTYPES, CacheConfig, SimulatedError, Spec, cached_property,
                          cdiv, next_power_of_2)
except ImportError:  # pragma: no cover - script mode
    import backends as B  # type: ignore[no-redef]
    from inputs import BadInput, GeometryInputs  # type: ignore[no-redef]
    from kv_spec import (DTYPE_BYTES, SUPPORTED_KV_DTYPES, CacheConfig, SimulatedError,  # type: ignore[no-redef]
                         Spec, cached_property, cdiv, next_power_of_2)


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def required(cfg: Mapping[str, Any], key: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise BadInput(f"config lacks {key!r}")
    return cfg[key]


def model_kind(cfg: Mapping[str, Any]) -> str:
    archs = list(cfg.get("architectures") or [])
    mt = str(text_config(cfg).get("model_type", cfg.get("model_type", "")))
    if any(a.startswith("Glm5Next") for a in archs) or mt.startswith("glm5_next"):
        return "glm5next"
    if "Qwen3NextForCausalLM" in archs or mt == "qwen3_next":
        return "qwen3_next"
    if "KimiLinearForCausalLM" in archs or mt == "kimi_linear":
        return "kimi_linear"
    raise BadInput(f"target architecture {archs or mt!r} is not modelled "
                   "(modelled: Glm5NextForCausalLM, Qwen3NextForCausalLM, "
                   "KimiLinearForCausalLM)")


def resolve_model_dtype(cfg: Mapping[str, Any]) -> str:
    tc = text_config(cfg)
    d = tc.get("dtype") or tc.get("torch_dtype") or cfg.get("dtype") or cfg.get("torch_dtype")
    d = str(d or "bfloat16").replace("torch.", "")
    if d not in ("bfloat16", "float16", "float32"):
        raise BadInput(f"model dtype {d!r} not modelled")
    return d


_TORCH_STORAGE = {"fp8": "uint8", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8", "half": "float16",
                  "fp8_ds_mla": "uint8"}


def _kv_dtype_name(kv: str, model_dtype: str) -> str:
    """The torch storage dtype vLLM uses for a cache-dtype string the layers
    run (``STR_DTYPE_TO_TORCH_DTYPE``; "auto" is the model dtype)."""
    return model_dtype if kv == "auto" else _TORCH_STORAGE.get(kv, kv)


def resolve_kv_dtypes(inputs: GeometryInputs, kind: str) -> tuple[str, str | None]:
    """Cache-dtype *strings* the target and drafter layers run.

    1. ``Glm5NextModelConfig``: on family 100 a GLM-5.3 target at "auto" runs
       fp8 and a non-MTP drafter without its own dtype keeps "auto".
    2. ``MLAAttention.__init__`` (``_canonicalize_sparse_mla_kv_cache_dtype``):
       the sparse MLA backend may run another format and writes it back to
       ``cache_config.cache_dtype`` (family 120: fp8_ds_mla, see
       geometry/backends.py).
    3. A drafter without its own dtype takes ``cache_config.cache_dtype`` as it
       is when the drafter loads, after the target: the rewritten one.
    """
    target = inputs.kv_cache_dtype
    drafter = inputs.drafter_kv_cache_dtype if inputs.has_drafter else None
    for what, kv in (("kv_cache_dtype", target), ("drafter_kv_cache_dtype", drafter)):
        if kv is not None and kv not in SUPPORTED_KV_DTYPES:
            raise BadInput(f"{what} {kv!r} not modelled (supported: {SUPPORTED_KV_DTYPES})")
    tc = text_config(inputs.target_config)
    sparse = kind == "glm5next" and tc.get("index_topk") is not None
    if sparse and target == "auto" and inputs.capability_family == 100:
        target = "fp8"
        if inputs.has_drafter and drafter is None:  # method "dflash" != "mtp"
            drafter = "auto"
    if sparse and inputs.capability_family in B.SPARSE_MLA_FAMILIES:
        backend = B.sparse_mla_backend(inputs.capability_family)
        if not backend.takes_kv_cache_dtype(target):
            why = (f"{backend.name} does not take kv_cache_dtype {target!r} (it takes "
                   f"{', '.join(backend.kv_cache_dtypes)})")
            if inputs.capability_family == 120:  # vLLM lists no other sparse MLA backend
                raise SimulatedError("ValueError", f"No valid attention backend found: {why}")
            raise BadInput(f"{why}; vLLM would pick another sparse MLA backend (not modelled)")
        target = B.canonical_sparse_mla_kv_cache_dtype(backend, target)
    if inputs.has_drafter and drafter is None:
        drafter = target
    return target, drafter


class _Layer:
    """One layer: its name, owner, role and ``slot``; the model maps the slot
    to the layer's backend and spec builder.  Layer lists depend only on the
    layer pattern, so they are cached across models (``_layer_list``)."""

    __slots__ = ("name", "owner", "role", "slot")

    def __init__(self, name: str, owner: str, role: str, slot: str):
        self.name, self.owner, self.role, self.slot = name, owner, role, slot


_LAYER_LISTS: dict[tuple, tuple[_Layer, ...]] = {}


def _layer_list(key: tuple, make) -> tuple[_Layer, ...]:
    """``make()`` -> iterable of (name, owner, role, slot), cached by ``key``."""
    out = _LAYER_LISTS.get(key)
    if out is None:
        if len(_LAYER_LISTS) > 4096:
            _LAYER_LISTS.clear()
        out = _LAYER_LISTS[key] = tuple(_Layer(*t) for t in make())
    return out



def _mamba_spec_kda(tc, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    return _kda_state(required(tc, "linear_num_heads"), required(tc, "linear_head_dim"),
                      tc.get("linear_conv_kernel_dim", 4), tp, num_spec, model_dtype)


def _kda_state(heads, hd, k, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    """MambaStateShapeCalculator.kda_state_shape / kda_state_dtype (conv state
    in the model dtype, recurrent state fp32)."""
    if heads % tp:
        raise SimulatedError("AssertionError", f"linear_num_heads {heads} not divisible by TP {tp}")
    conv_dim = heads * hd + 2 * heads * hd
    if conv_dim % tp:
        raise SimulatedError("AssertionError", "conv_dim not divisible by TP")
    conv = (conv_dim // tp, k - 1 + num_spec)
    rec = (heads // tp, hd, hd)
    conv_b = DTYPE_BYTES[model_dtype]
    total = conv[0] * conv[1] * conv_b + rec[0] * rec[1] * rec[2] * 4
    return (conv, rec), (model_dtype, "float32"), total


def _mamba_spec_gdn(tc, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    nk = required(tc, "linear_num_key_heads")
    nv = required(tc, "linear_num_value_heads")
    dk = required(tc, "linear_key_head_dim")
    dv = required(tc, "linear_value_head_dim")
    k = tc.get("linear_conv_kernel_dim", 4)
    conv_dim = dk * nk * 2 + dv * nv
    if conv_dim % tp or nv % tp:
        raise SimulatedError("AssertionError", "GDN dims not divisible by TP")
    conv = (conv_dim // tp, k - 1 + num_spec)
    temporal = (nv // tp, dv, dk)
    b = DTYPE_BYTES[model_dtype]
    total = conv[0] * conv[1] * b + temporal[0] * temporal[1] * temporal[2] * b
    return (conv, temporal), (model_dtype, model_dtype), total


def _check_flash_attn_head_size(head_size: int) -> None:
    if head_size == 256:
        raise BadInput("FLASH_ATTN with head size 256 (FA4 hd256 pages) is not modelled")


def _kv_heads_per_rank(kv_heads: int, tp: int, what: str) -> int:
    """KV heads per TP rank, with vLLM's divisibility asserts (``what`` names the heads)."""
    if kv_heads >= tp:
        if kv_heads % tp:
            raise SimulatedError("AssertionError", f"{what} not divisible by TP")
    elif tp % kv_heads:
        raise SimulatedError("AssertionError", f"TP not divisible by {what}")
    return max(1, kv_heads // tp)


def drafter_sliding_window(dc: Mapping[str, Any], idx: int) -> int | None:
    """``_resolve_layer_attention``: the sliding window of drafter layer idx."""
    dflash = dc.get("dflash_config") or {}
    layer_types = dc.get("layer_types")
    use_swa = dflash.get("use_swa", False)
    any_sliding = False
    if layer_types is not None:
        n_sl = sum(t == "sliding_attention" for t in layer_types)
        any_sliding = n_sl > 0
        if 0 < n_sl < len(layer_types):
            raise BadInput("mixed sliding/full DFlash drafters need the V2 runner "
                           "and several drafter groups; not modelled")
    if layer_types is None or (use_swa and not any_sliding):
        is_sliding = use_swa
    else:
        is_sliding = layer_types[idx] == "sliding_attention"
    if not is_sliding:
        return None
    window = dflash.get("swa_window_size", dc.get("sliding_window"))
    if window is None:
        raise SimulatedError("ValueError", "DFlash sliding attention requires a window size")
    return int(window)


def _largest_kernel_block_within(backend: B.Backend, per_token: int, budget: int,
                                 fallback: int) -> int:
    max_block = budget // per_token
    cands = [s for s in backend.kernel_block_sizes if isinstance(s, int)]
    cands += [max(s.base, max_block // s.base * s.base)
              for s in backend.kernel_block_sizes if isinstance(s, B.Multiple)]
    if not cands:
        return fallback
    fitting = [b for b in cands if b * per_token <= budget]
    return max(fitting) if fitting else min(cands)


def _customize(backend: B.Backend, spec: Spec) -> Spec:
    """vllm.v1.worker.utils.customize_attention_spec."""
    if backend.align_rows is not None:
        spec = spec.evolve(
            block_stride_alignment=backend.align_rows * spec.state_content_size_bytes)
    if spec.block_stride_alignment is None and backend.fixed_sizes_only:
        spec = spec.evolve(block_stride_alignment=B.Multiple(max(backend.kernel_block_sizes)))
    return spec


class Model:
    """Layers (in vLLM's registration order) and model-level facts."""

    def __init__(self, inputs: GeometryInputs, with_drafter: bool, num_spec: int):
        self.inputs = inputs
        self.kind = model_kind(inputs.target_config)
        self.tc = text_config(inputs.target_config)
        self.tp = inputs.tensor_parallel_size
        self.family = inputs.capability_family
        self.num_spec = num_spec
        self.model_dtype = resolve_model_dtype(inputs.target_config)
        kv_t, kv_d = resolve_kv_dtypes(inputs, self.kind)
        self.kv_target = kv_t
        self.kv_drafter = kv_d if with_drafter else None
        self.layers: list[_Layer] = []
        self.max_model_len = inputs.max_model_len or int(
            self.tc.get("max_position_embeddings", 0) or 0) or 1
        tc, tp = self.tc, self.tp
        t_dtype = _kv_dtype_name(kv_t, self.model_dtype)
        n_layers = int(required(tc, "num_hidden_layers"))
        layer_types = list(tc.get("layer_types") or [])

        if self.kind == "glm5next":
            if not layer_types:
                layer_types = ["linear_attention" if i % 4 != 3 else "indexed_attention"
                               for i in range(n_layers)]
            self.use_mla = True
            kv_lora = int(required(tc, "kv_lora_rank"))
            rope = int(tc.get("qk_rope_head_dim", 0) or 0)
            self.head_size = kv_lora + rope
            self.num_kv_heads_model = 1
            self.has_indexer = tc.get("index_topk") is not None
            kpool = int(tc.get("index_kpool", 16))
            idx_hd = int(tc.get("index_head_dim", 128))
            shapes, dtypes, mamba_bytes = _mamba_spec_kda(tc, tp, num_spec, self.model_dtype)
            self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
            self.mamba_page = mamba_bytes
            if int(required(tc, "num_attention_heads")) % tp:
                raise SimulatedError("AssertionError", "num_attention_heads must be divisible by world_size")
            if self.has_indexer and kpool <= 1:
                raise SimulatedError("AssertionError", "Glm5NextIndexerCache expects index_kpool > 1")
            try:
                mla_backend = B.sparse_mla_backend(self.family) if self.has_indexer else None
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
            if mla_backend is None:
                raise BadInput("GLM-5.3 without a sparse indexer (dense MLA) is not modelled")
            idx_backend = B.glm5_indexer_backend(kpool, self.family)
            t_bytes = DTYPE_BYTES[t_dtype]
            idx_spec = Spec("mla", 0, num_kv_heads=1, head_size=idx_hd + idx_hd // 128 * 4,
                            head_size_v=0, dtype_bytes=1, dtype="uint8",
                            tokens_per_state=kpool, cache_role="indexer")
            idx_build = self._make_attn_builder(idx_spec, idx_backend)
            tail_build = self._make_tail_builder(kpool, idx_hd)
            mla_spec = Spec("mla", 0, num_kv_heads=1, head_size=self.head_size, head_size_v=0,
                            dtype_bytes=t_bytes, dtype=t_dtype,
                            content_bytes=(B.FP8_DS_MLA_BYTES_PER_TOKEN
                                           if kv_t == "fp8_ds_mla" else None))
            mla_build = self._make_attn_builder(mla_spec, mla_backend)
            self.slots = {"kda": (B.SSM, self._mamba_build), "idx": (idx_backend, idx_build),
                          "tail": (B.KPOOL_TAIL, tail_build), "mla": (mla_backend, mla_build)}

            def glm_layers():
                for i in range(n_layers):
                    lt = layer_types[i]
                    p = f"model.layers.{i}.self_attn"
                    if lt == "linear_attention":
                        yield p, "target", "kda", "kda"
                        continue
                    yield p + ".indexer.k_cache", "target", "sparse_indexer", "idx"
                    yield p + ".indexer.tail_cache", "target", "kpool_tail", "tail"
                    yield p + ".mla_attn", "target", "mla_latent", "mla"
            self.layers.extend(_layer_list(
                ("glm5next", n_layers, tuple(layer_types)), glm_layers))
        elif self.kind == "kimi_linear":
            self._kimi_layers(tc, tp, num_spec, t_dtype)
        else:  # qwen3_next
            if not layer_types:
                interval = int(tc.get("full_attention_interval", 4))
                layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                               for i in range(n_layers)]
            self.use_mla = False
            heads = int(required(tc, "num_attention_heads"))
            kvh = int(tc.get("num_key_value_heads", heads))
            self.head_size = int(tc.get("head_dim") or int(required(tc, "hidden_size")) // heads)
            _check_flash_attn_head_size(self.head_size)
            self.num_kv_heads_model = _kv_heads_per_rank(kvh, tp, "num_key_value_heads")
            shapes, dtypes, mamba_bytes = _mamba_spec_gdn(tc, tp, num_spec, self.model_dtype)
            self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
            self.mamba_page = mamba_bytes
            t_bytes = DTYPE_BYTES[t_dtype]
            spec = Spec("full", 0, num_kv_heads=self.num_kv_heads_model,
                        head_size=self.head_size, head_size_v=self.head_size,
                        dtype_bytes=t_bytes, dtype=t_dtype)
            attn_build = self._make_attn_builder(spec, B.FLASH_ATTN)
            self.slots = {"gdn": (B.SSM, self._mamba_build), "attn": (B.FLASH_ATTN, attn_build)}

            def qwen_layers():
                for i in range(n_layers):
                    lt = layer_types[i]
                    p = f"model.layers.{i}"
                    if lt == "linear_attention":
                        yield p + ".linear_attn", "target", "gdn", "gdn"
                    else:
                        yield p + ".self_attn.attn", "target", "attention", "attn"
            self.layers.extend(_layer_list(
                ("qwen3_next", n_layers, tuple(layer_types)), qwen_layers))

        self.drafter_backend: B.Backend | None = None
        self.drafter_error: SimulatedError | None = None
        if with_drafter and inputs.drafter_config is not None:
            dc = inputs.drafter_config
            try:
                self.drafter_backend = B.drafter_backend(inputs.drafter_attention_backend,
                                                          self.family)
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
            if not self.drafter_backend.takes_kv_cache_dtype(self.kv_drafter):
                if inputs.drafter_attention_backend in (None, "auto"):
                    raise BadInput(
                        f"the drafter's KV dtype {self.kv_drafter!r} rules out FLASH_ATTN; "
                        "vLLM would pick another drafter backend (not modelled)")
                # raised when the drafter loads, after the target: planning
                # fails, the target alone still plans
                self.drafter_error = SimulatedError(
                    "ValueError", f"Selected backend {self.drafter_backend.name} is not valid "
                    f"for the drafter: kv_cache_dtype {self.kv_drafter!r} not supported (it "
                    f"takes {', '.join(self.drafter_backend.kv_cache_dtypes)})")
            d_dtype = _kv_dtype_name(self.kv_drafter, self.model_dtype)
            d_heads = int(required(dc, "num_attention_heads"))
            d_kv = int(dc.get("num_key_value_heads", d_heads) or d_heads)
            d_hd = int(dc.get("head_dim") or int(required(dc, "hidden_size")) // d_heads)
            _check_flash_attn_head_size(d_hd)
            d_kv_local = _kv_heads_per_rank(d_kv, tp, "drafter KV heads")
            if (d_heads // tp) % d_kv_local:
                raise SimulatedError("AssertionError", "drafter num_heads not divisible by num_kv_heads")
            windows = tuple(drafter_sliding_window(dc, i)
                            for i in range(int(required(dc, "num_hidden_layers"))))
            for window in dict.fromkeys(windows):
                spec = Spec("sliding" if window is not None else "full", 0,
                            num_kv_heads=d_kv_local, head_size=d_hd, head_size_v=d_hd,
                            dtype_bytes=DTYPE_BYTES[d_dtype], dtype=d_dtype,
                            sliding_window=window, is_draft=True)
                self.slots[("drafter", window)] = (self.drafter_backend,
                                                   self._make_drafter_builder(spec))

            def drafter_layers():
                for i, window in enumerate(windows):
                    yield (f"drafter.model.layers.{i}.self_attn.attn", "drafter",
                           "sliding_window" if window is not None else "attention",
                           ("drafter", window))
            self.layers.extend(_layer_list(("drafter", windows), drafter_layers))

    def _kimi_layers(self, tc, tp: int, num_spec: int, t_dtype: str) -> None:
        """KimiLinearModel (vllm/models/kimi_k3): layer i is KDA iff i + 1 is in
        ``linear_attn_config["kda_layers"]``, otherwise dense NoPE MLA; both
        register as ``model.layers.{i}.self_attn``."""
        lac = tc.get("linear_attn_config")
        if not isinstance(lac, Mapping):
            raise BadInput("Kimi Linear config lacks 'linear_attn_config'")
        kda_layers = lac.get("kda_layers")
        if kda_layers is None or lac.get("full_attn_layers") is None:
            raise BadInput("linear_attn_config needs 'kda_layers' and 'full_attn_layers'")
        if not kda_layers:
            raise BadInput("Kimi Linear without KDA layers (not hybrid) is not modelled")
        if lac.get("use_full_rank_gate"):
            raise BadInput("Kimi-K3 full-rank-gate KDA is not modelled")
        kda_set = {int(x) for x in kda_layers}
        n_layers = int(required(tc, "num_hidden_layers"))
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
            required(tc, key)
        self.use_mla = True
        kv_lora = int(tc["kv_lora_rank"])
        rope = int(tc["qk_rope_head_dim"])
        self.head_size = kv_lora + rope
        self.num_kv_heads_model = 1
        shapes, dtypes, mamba_bytes = _kda_state(
            int(required(lac, "num_heads")), int(required(lac, "head_dim")),
            int(lac.get("short_conv_kernel_size", 4)), tp, num_spec, self.model_dtype)
        self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
        self.mamba_page = mamba_bytes
        has_mla = any(i + 1 not in kda_set for i in range(n_layers))
        if has_mla and not tc.get("mla_use_nope"):
            raise SimulatedError("AssertionError", "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only")
        try:
            mla_backend = B.dense_mla_backend(self.family, self.kv_target,
                                              int(tc["qk_nope_head_dim"]), self.head_size)
        except ValueError as exc:
            raise BadInput(str(exc)) from exc
        mla_spec = Spec("mla", 0, num_kv_heads=1, head_size=self.head_size, head_size_v=0,
                        dtype_bytes=DTYPE_BYTES[t_dtype], dtype=t_dtype)
        mla_build = self._make_attn_builder(mla_spec, mla_backend)
        self.slots = {"kda": (B.SSM, self._mamba_build), "mla": (mla_backend, mla_build)}

        def kimi_layers():
            for i in range(n_layers):
                p = f"model.layers.{i}.self_attn"
                if i + 1 in kda_set:
                    yield p, "target", "kda", "kda"
                else:
                    yield p, "target", "mla_latent", "mla"
        self.layers.extend(_layer_list(
            ("kimi_linear", n_layers, tuple(sorted(kda_set))), kimi_layers))

    # -- per-layer get_kv_cache_spec (+ customize_attention_spec) ----------
    @cached_property
    def _mamba_build(self):
        return self._mamba_builder

    def _mamba_builder(self, cache: CacheConfig) -> Spec:
        key = (cache.mamba_block_size, cache.mamba_page_size_padded)
        memo = self.__dict__.setdefault("_mamba_memo", {})
        out = memo.get(key)
        if out is None:
            out = memo[key] = self._new_mamba_spec(cache)
        return out

    def _new_mamba_spec(self, cache: CacheConfig) -> Spec:
        return Spec("mamba", cache.mamba_block_size or self.max_model_len,
                    page_size_padded=cache.mamba_page_size_padded,
                    state_bytes=self.mamba_page, mamba_shapes=self.mamba_shapes,
                    mamba_dtypes=self.mamba_dtypes, dcp_sharded=False)

    def _shared(self, key, factory):
        cache = self.__dict__.setdefault("_builder_cache", {})
        if key not in cache:
            cache[key] = factory()
        return cache[key]

    def _attn_builder(self, proto: Spec, backend: B.Backend):
        return self._shared(("attn", proto, backend), lambda: self._make_attn_builder(proto, backend))

    def _make_attn_builder(self, proto: Spec, backend: B.Backend):
        memo: dict[int, Spec] = {}

        def build(cache: CacheConfig) -> Spec:
            out = memo.get(cache.block_size)
            if out is None:
                out = memo[cache.block_size] = _customize(
                    backend, proto.with_block_size(cache.block_size))
            return out
        return build

    def _tail_builder(self, kpool: int, head_dim: int):
        return self._shared(("tail", kpool, head_dim), lambda: self._make_tail_builder(kpool, head_dim))

    def _make_tail_builder(self, kpool: int, head_dim: int):
        def build(cache: CacheConfig) -> Spec:
            span = kpool + self.num_spec
            ring = kpool * next_power_of_2(cdiv(span, kpool))
            if cache.block_size % ring:
                raise SimulatedError(
                    "AssertionError",
                    f"Glm5NextTailCache: cache_config.block_size ({cache.block_size}) "
                    f"must be a multiple of the tail ring ({ring})")
            return _customize(B.KPOOL_TAIL, Spec(
                "circular", ring, num_kv_heads=2, head_size=head_dim, head_size_v=0,
                dtype_bytes=2, dtype="bfloat16", dcp_sharded=False))
        return build

    def _drafter_builder(self, proto: Spec):
        return self._shared(("drafter", proto), lambda: self._make_drafter_builder(proto))

    def _make_drafter_builder(self, proto: Spec):
        backend = self.drafter_backend
        assert backend is not None

        def build(cache: CacheConfig) -> Spec:
            if proto.kind == "sliding":
                per_token = proto.with_block_size(1).real_page_size_bytes
                bs = _largest_kernel_block_within(backend, per_token,
                                                  per_token * cache.block_size,
                                                  cache.block_size)
            else:
                bs = cache.block_size
            return _customize(backend, proto.with_block_size(bs))
        return build

    # -- model-level facts used by _align_hybrid_block_size -----------------
    def attn_page_1_token(self) -> int:
        t_dtype = _kv_dtype_name(self.kv_target, self.model_dtype)
        if self.use_mla:
            return self.head_size * DTYPE_BYTES[t_dtype]
        return self.num_kv_heads_model * 2 * self.head_size * DTYPE_BYTES[t_dtype]

    def prefill_checkpoint_alignment(self) -> int | None:
        """``get_mamba_prefill_checkpoint_alignment`` in "align" mode: the LCM
        of the mamba layers' ``get_prefill_checkpoint_alignment``.  KDA layers
        (GLM-5.3, Kimi Linear) export none (``MambaBase``'s None).  Qwen3-Next's
        GDN layers export 64 when vLLM picks FlashInfer's GDN prefill kernel,
        which depends on the CUDA runtime and FlashInfer build of the image."""
        if self.kind == "qwen3_next":
            raise BadInput("mamba_cache_mode 'align' for Qwen3-Next (GDN) targets is not "
                           "modelled (the prefill checkpoint alignment depends on the GDN "
                           "prefill kernel vLLM picks at run time)")
        return None

    def non_ssm_backends(self) -> list[B.Backend]:
        out = self.__dict__.get("_non_ssm")
        if out is None:
            out = []
            seen: set[int] = set()
            slots = self.slots
            for layer in self.layers:
                b = slots[layer.slot][0]
                if id(b) in seen:
                    continue
                seen.add(id(b))
                if not b.is_ssm and b not in out:
                    out.append(b)
            self._non_ssm = out
        return out  # callers only read it

    def used_slots(self) -> list:
        """The slots the layers use, in first-use order (vLLM's build order)."""
        out = self.__dict__.get("_used_slots")
        if out is None:
            out = self._used_slots = list(dict.fromkeys(l.slot for l in self.layers))
        return out

    def target_only(self) -> "Model":
        """The same model without the drafter's layers (same num_spec, same
        target layers and builders: nothing of the target depends on them)."""
        m = object.__new__(Model)
        m.__dict__.update(self.__dict__)
        for k in ("_non_ssm", "_roles", "_builder_cache", "_used_slots"):
            m.__dict__.pop(k, None)
        m.layers = [l for l in self.layers if l.owner == "target"]
        m.kv_drafter = None
        m.drafter_backend = None
        m.drafter_error = None
        return m

