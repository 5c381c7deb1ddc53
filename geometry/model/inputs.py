"""Inputs of the KV-geometry simulator (stdlib only).

``GeometryInputs`` is everything that decides the KV-cache geometry the modelled
vLLM release builds for a hybrid target plus an optional speculative drafter: the gate's one
input. ``build_inputs`` makes it from a deployment's serve settings
(geometry/model/serve_settings.py: from a recipe on the host, from a serve argv at
container start) and the configs it serves; the build
writes it as ``gate-input.json`` (``to_json``) and the image reads it back
(``from_json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Mapping

from geometry.errors import BadInput
from geometry.image_contract import Behaviour
from geometry.kv.backends import CPU_FAMILY
from geometry.model.config import DrafterModel, TargetModel, check_drafter, check_target, read_target
from geometry.model.serve_settings import ServeSettings
from geometry.vllm_versions import DEFAULT_VERSION, VllmRelease, release

# vLLM's CacheConfig.mamba_cache_mode default ("none": no prefix caching
# of mamba state).  "align" is the other value vLLM accepts.
DEFAULT_MAMBA_CACHE_MODE = "none"
MAMBA_CACHE_MODES = ("none", "align")


@dataclass(frozen=True, kw_only=True)
class GeometryInputs:
    target_config: Mapping[str, Any]
    drafter_config: Mapping[str, Any] | None
    tensor_parallel_size: int
    kv_cache_dtype: str
    drafter_kv_cache_dtype: str | None
    num_speculative_tokens: int
    capability_family: int
    # On vLLM's CPU platform (capability_family 0): whether the serving CPU has AVX512-BF16
    # (geometry/model/serving_cpu.py; it decides the GDN state's dtype). False on a GPU family.
    cpu_avx512_bf16: bool = False
    # Both as vLLM runs them (see resolve_prefix_caching): prefix caching on
    # means mamba_cache_mode "align", off means "none".
    mamba_cache_mode: str = DEFAULT_MAMBA_CACHE_MODE
    enable_prefix_caching: bool = False
    block_size: int | None = None
    kv_cache_memory_bytes: int
    vllm_behaviour: Behaviour = Behaviour.OVERLAY
    # Extras (optional): max_model_len decides the mamba block size in
    # mamba_cache_mode "none" (vLLM sets it to max_model_len); default is the
    # target's max_position_embeddings.  drafter_attention_backend is the
    # speculative config's ``attention_backend``; None = vLLM's automatic
    # choice (see geometry/kv/backends.py for what is modelled).
    max_model_len: int | None = None
    drafter_attention_backend: str | None = None
    # Machines the tensor-parallel group spans (tensor_parallel_size / nodes
    # ranks each).  The geometry is per rank and does not depend on it; the
    # report shows the per-node picture from it.
    nodes: int = 1
    # --max-num-seqs as the serve command passes it (None: vLLM's default);
    # checked against the requests the pool holds (geometry/plan/concurrency.py).
    max_num_seqs: int | None = None
    # The tokens one scheduler step batches, as `vllm serve` runs them: the flag, else
    # its default for the GPU (EngineArgs.get_batch_defaults); None: SchedulerConfig's
    # 2,048. A sliding-window group holds the blocks of the tokens in flight.
    max_num_batched_tokens: int | None = None
    # The vLLM release the image runs (geometry/vllm_versions.py: a release without an entry is refused).
    vllm_version: str = DEFAULT_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.target_config, Mapping):
            raise BadInput("target_config must be a JSON object")
        if self.drafter_config is not None and not isinstance(self.drafter_config, Mapping):
            raise BadInput("drafter_config must be a JSON object or null")
        for name in ("tensor_parallel_size", "num_speculative_tokens", "capability_family", "kv_cache_memory_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise BadInput(f"{name} must be an integer, got {value!r}")
        if not isinstance(self.cpu_avx512_bf16, bool):
            raise BadInput(f"cpu_avx512_bf16 must be true or false, got {self.cpu_avx512_bf16!r}")
        if self.cpu_avx512_bf16 and self.capability_family != CPU_FAMILY:
            raise BadInput(
                f"cpu_avx512_bf16 is a question of vLLM's CPU platform (capability_family {CPU_FAMILY}), "
                f"not of capability family {self.capability_family}"
            )
        if self.tensor_parallel_size < 1:
            raise BadInput("tensor_parallel_size must be >= 1")
        if not isinstance(self.nodes, int) or isinstance(self.nodes, bool) or self.nodes < 1:
            raise BadInput(f"nodes must be a positive integer, got {self.nodes!r}")
        if self.tensor_parallel_size % self.nodes:
            raise BadInput(f"tensor_parallel_size {self.tensor_parallel_size} is not a multiple of nodes {self.nodes}")
        if self.num_speculative_tokens < 0:
            raise BadInput("num_speculative_tokens must be >= 0")
        if self.kv_cache_memory_bytes < 0:
            raise BadInput("kv_cache_memory_bytes must be >= 0")
        for name in ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value <= 0):
                raise BadInput(f"{name} must be a positive integer or null, got {value!r}")
        release(self.vllm_version)
        if self.vllm_behaviour not in tuple(Behaviour):
            raise BadInput(f"vllm_behaviour must be one of {tuple(b.value for b in Behaviour)}")
        object.__setattr__(self, "vllm_behaviour", Behaviour(self.vllm_behaviour))
        if not isinstance(self.kv_cache_dtype, str):
            raise BadInput("kv_cache_dtype must be a string")
        if self.drafter_kv_cache_dtype is not None and not isinstance(self.drafter_kv_cache_dtype, str):
            raise BadInput("drafter_kv_cache_dtype must be a string or null")
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise BadInput(f"mamba_cache_mode must be 'none' or 'align', got {self.mamba_cache_mode!r}")
        if not isinstance(self.enable_prefix_caching, bool):
            raise BadInput(f"enable_prefix_caching must be true or false, got {self.enable_prefix_caching!r}")
        expected_mode = self.target.mamba_cache_mode(self.enable_prefix_caching)
        if self.mamba_cache_mode != expected_mode:
            raise BadInput(
                f"mamba_cache_mode {self.mamba_cache_mode!r} with enable_prefix_caching "
                f"{str(self.enable_prefix_caching).lower()}: vLLM {self.vllm_version} runs "
                f"{expected_mode!r} then"
            )
        self.drafter  # noqa: B018 - the drafter config checked with the rest

    @cached_property
    def target(self) -> TargetModel:
        """The target config, read and checked once (ConfigInvalid for one the simulator would misread)."""
        return check_target(self.target_config)

    @cached_property
    def drafter(self) -> DrafterModel | None:
        """The drafter config, read and checked once (None without a drafter)."""
        return None if self.drafter_config is None else check_drafter(self.drafter_config)

    @property
    def vllm(self) -> VllmRelease:
        """The modelled vLLM release the plan is for."""
        return release(self.vllm_version)

    @property
    def has_drafter(self) -> bool:
        return self.drafter_config is not None

    def without_drafter(self) -> "GeometryInputs":
        """The same deployment with speculative decoding switched off."""
        return self.replace(drafter_config=None, drafter_kv_cache_dtype=None, num_speculative_tokens=0)

    def target_only_same_spec(self) -> "GeometryInputs":
        """Target alone but with the same num_speculative_tokens (the KDA state
        keeps its speculative width): isolates what the drafter's *layers* cost."""
        return self.replace(drafter_config=None, drafter_kv_cache_dtype=None)

    def replace(self, **changes: Any) -> "GeometryInputs":
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return GeometryInputs(**data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> "GeometryInputs":
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, Mapping):
            raise BadInput("gate input must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in data if k not in known and not k.startswith("_"))
        if unknown:
            raise BadInput(f"unknown gate-input keys: {unknown}")
        kwargs = {k: v for k, v in data.items() if k in known}
        missing = [
            f.name
            for f in fields(cls)
            if f.name not in kwargs and f.default is f.default_factory  # no default
        ]
        if missing:
            raise BadInput(f"missing gate-input keys: {missing}")
        try:
            return cls(**kwargs)
        except TypeError as exc:  # pragma: no cover - defensive
            raise BadInput(str(exc)) from exc

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out


def build_inputs(
    settings: ServeSettings, *, target_config: Mapping[str, Any], drafter_config: Mapping[str, Any] | None
) -> GeometryInputs:
    """The gate input of a deployment: its serve settings and the two configs it serves.

    A flag not given takes its value where no flag says (``settings.defaults``); prefix caching and
    mamba_cache_mode as the modelled vLLM release runs the flags (``resolve_prefix_caching``). Raises BadInput
    for values the simulator does not take.
    """
    s, defaults = settings, settings.defaults
    prefix_caching, mode = resolve_prefix_caching(target_config, s.enable_prefix_caching, s.mamba_cache_mode)
    return GeometryInputs(
        target_config=target_config,
        drafter_config=drafter_config,
        tensor_parallel_size=s.tensor_parallel_size,
        nodes=defaults.nodes,
        kv_cache_dtype=s.kv_cache_dtype,
        drafter_kv_cache_dtype=s.drafter_kv_cache_dtype,
        num_speculative_tokens=s.num_speculative_tokens,
        capability_family=defaults.capability_family,
        cpu_avx512_bf16=defaults.cpu_avx512_bf16,
        mamba_cache_mode=mode,
        enable_prefix_caching=prefix_caching,
        block_size=s.block_size,
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=_given(s.max_num_batched_tokens, defaults.max_num_batched_tokens),
        drafter_attention_backend=s.drafter_attention_backend,
        kv_cache_memory_bytes=_given(s.kv_cache_memory_bytes, defaults.kv_cache_memory_bytes),
        vllm_behaviour=defaults.vllm_behaviour,
        vllm_version=defaults.vllm_version,
    )


def _given(flag: Any, default: Any) -> Any:
    """A serve flag's value, else (None: not given) what applies without it."""
    return default if flag is None else flag


def resolve_prefix_caching(
    target_config: Mapping[str, Any],
    enable_prefix_caching: bool | None,
    mamba_cache_mode: str | None = None,
) -> tuple[bool, str]:
    """(prefix caching on, mamba_cache_mode) as the modelled vLLM release runs a target from
    its serve flags; ``None`` means the flag was not given.

    * ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` decide; with
      neither, ``EngineArgs`` takes ``ModelConfig.is_prefix_caching_supported``,
      which is true for every generative model (all modelled targets).
    * ``--mamba-cache-mode`` is accepted but has no effect there
      (deprecated: "Mamba prefix caching follows --enable-prefix-caching"):
      the cache config starts at "none" and ``MambaModelConfig`` sets "align"
      when prefix caching is on.
    """
    if enable_prefix_caching is not None and not isinstance(enable_prefix_caching, bool):
        raise BadInput(f"enable_prefix_caching must be true, false or unset, got {enable_prefix_caching!r}")
    if mamba_cache_mode is not None and mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise BadInput(f"--mamba-cache-mode must be one of {MAMBA_CACHE_MODES}, got {mamba_cache_mode!r}")
    if not isinstance(target_config, Mapping):
        raise BadInput("target_config must be a JSON object")
    target = read_target(target_config)  # a modelled (generative) target, else ConfigInvalid
    enabled = True if enable_prefix_caching is None else enable_prefix_caching
    return enabled, target.mamba_cache_mode(enabled)
