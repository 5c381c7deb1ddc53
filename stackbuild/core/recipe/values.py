"""The recipe's values: one frozen dataclass per section of the YAML file, and the Recipe that holds them.

Each field's type is what stackbuild/core/schema.py checks the YAML against; the loader
(stackbuild/core/recipe/load.py) fills the fields the YAML does not give.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping, Optional

from stackbuild.core.errors import RecipeError
from stackbuild.core.gpus import has_gpu
from stackbuild.core.gpus import tag_field as gpu_tag_field
from stackbuild.core.reference import ImageReference

REPO_ROOT = Path(__file__).resolve().parents[3]
OVERLAY_SERIES_DIR = REPO_ROOT / "overlay" / "series"
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"

# The platform string a recipe names, and what `uname -m` prints there.
UNAME_MACHINE = {"linux/arm64": "aarch64", "linux/amd64": "x86_64"}


def models_root(*paths: str) -> str:
    """The deepest directory above every model path ("/" when they share none below the root)."""
    return posixpath.commonpath([posixpath.dirname(posixpath.normpath(p)) for p in paths])


@dataclass(frozen=True)
class BaseImage:
    """The vLLM image the overlay goes on; pinned by tag and digest."""

    image: str
    tag: str
    vllm_version: str
    digest: Optional[str] = None

    @property
    def reference(self) -> ImageReference:
        """``image:tag`` (the recipe's digest, if any, is checked against the lock: see stackbuild/core/lock.py)."""
        return ImageReference(self.image, tag=self.tag)


@dataclass(frozen=True)
class Hardware:
    """The GPU; a known one's capability, family and platforms come from stackbuild/core/gpus.py
    when the recipe leaves them out (the loader fills them: after loading none is None)."""

    gpu: str
    compute_capability: Optional[str] = None
    capability_family: Optional[int] = None
    platforms: Optional[tuple[str, ...]] = None

    @property
    def capability_major(self) -> int:
        return int(self.compute_capability.split(".")[0])

    @property
    def gpu_tag(self) -> str:
        """The ``{gpu}`` tag field."""
        return gpu_tag_field(self.gpu)

    @property
    def has_gpu(self) -> bool:
        """False for ``gpu: none``: a host without a GPU (vLLM's CPU platform)."""
        return has_gpu(self.gpu)

    @property
    def serves_on(self) -> str:
        """Where it serves, as the generated files' headers say it: the GPU, or the CPU platform."""
        return self.gpu if self.has_gpu else "a host without a GPU (vLLM's CPU platform)"


@dataclass(frozen=True)
class Model:
    id: str
    path: str
    config: str
    # The checkpoint's commit on the Hub (40 hex digits); None: not pinned.
    revision: Optional[str] = None
    # sha256 of the config snapshot, so it cannot change without the recipe saying so.
    config_sha256: Optional[str] = None
    # The weights' quantization as vLLM names it (modelopt_fp4: ModelOpt NVFP4; none: unquantized);
    # the start-time check compares it with the checkpoint's hf_quant_config.json / quantization_config.
    # None: not stated, not checked.
    quantization: Optional[Literal["modelopt_fp4", "modelopt", "none"]] = None


@dataclass(frozen=True)
class Drafter:
    id: str
    path: str
    config: str
    precision: Literal["bf16", "mxfp8"]
    license: str
    revision: Optional[str] = None
    config_sha256: Optional[str] = None
    method: Literal["dflash"] = "dflash"
    # The drafter's attention backend, pinned: vLLM's automatic choice needs
    # libcuda, and the backend's kernel blocks decide the drafter's block size.
    attention_backend: Optional[Literal["FLASH_ATTN"]] = None


SPECULATION_METHODS = ("dflash", "ngram")


@dataclass(frozen=True)
class Speculation:
    """How the deployment speculates: ``dflash`` (the default) drafts with the recipe's
    ``drafter:`` checkpoint; ``ngram`` proposes from the prompt itself (vLLM's prompt lookup,
    ``prompt_lookup_min``..``prompt_lookup_max`` tokens matched), with no drafter."""

    method: Literal["dflash", "ngram"] = "dflash"
    prompt_lookup_min: Optional[int] = None
    prompt_lookup_max: Optional[int] = None


@dataclass(frozen=True)
class Serving:
    max_model_len: int
    num_speculative_tokens: int
    tensor_parallel_size: int = 1
    # machines the tensor-parallel group spans; each runs tensor_parallel_size / nodes ranks
    nodes: int = 1
    kv_cache_dtype: str = "auto"
    drafter_kv_cache_dtype: Optional[str] = None
    block_size: Optional[int] = None
    # --max-num-seqs; None: vLLM's default. The gate checks it against the pool (geometry/plan/concurrency.py).
    max_num_seqs: Optional[int] = None
    # --max-num-batched-tokens; None: vLLM's default for the GPU (stackbuild/core/gpus.py). The requests
    # at once are prefilled in steps of it (geometry/plan/admission.py).
    max_num_batched_tokens: Optional[int] = None
    # Explicit --enable-prefix-caching / --no-enable-prefix-caching; None: vLLM's default.
    enable_prefix_caching: Optional[bool] = None
    gpu_memory_utilization: float = 0.9
    served_model_name: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    port: int = 8000
    # The host address compose publishes the port on: loopback unless the recipe opens it.
    host_ip: str = "127.0.0.1"
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Geometry:
    """Inputs the KV-geometry gate needs beyond the configs and serving flags."""

    kv_cache_memory_gib: float


@dataclass(frozen=True)
class QualifyExpectations:
    """What `build.py qualify` must measure on this recipe's deployment; below it qualify exits 25."""

    # output tokens per second over the prompt set (temperature 0, stream false, thinking off)
    min_decode_tokens_per_s: Optional[float] = None
    # accepted / draft tokens over the runs (0 to 1)
    min_acceptance: Optional[float] = None


@dataclass(frozen=True)
class Overlay:
    series: str


@dataclass(frozen=True)
class ImageSpec:
    repository: str
    tags: tuple[str, ...]
    # The repository the image is built from (org.opencontainers.image.source); `{owner}` is filled
    # like image.repository's. None: the checkout's git remote (stackbuild/core/naming.py image_source).
    source: Optional[str] = None
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Recipe:
    name: str
    base: BaseImage
    hardware: Hardware
    target: Model
    serving: Serving
    geometry: Geometry
    overlay: Overlay
    image: ImageSpec
    # The DFlash drafter checkpoint: required with speculation.method dflash, absent with ngram.
    drafter: Optional[Drafter] = None
    speculation: Speculation = field(default_factory=Speculation)
    description: str = ""
    qualify: QualifyExpectations = field(default_factory=QualifyExpectations)
    # `platform: P` for one, `platforms: [P, Q]` for several; loaded, `platform` is the one this
    # view builds (the first listed) and `platforms` all of them (see for_platform).
    platform: str = ""
    platforms: tuple[str, ...] = ()
    # Filled by the loader, not by the YAML.
    _path: Path = field(default=Path("."), compare=False, repr=False)
    _target_config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _drafter_config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def directory(self) -> Path:
        return self._path.parent

    @property
    def file_sha256(self) -> str:
        """sha256 of the recipe file: the image's recipe label, the provenance's and a qualification's recipe digest."""
        return hashlib.sha256(self._path.read_bytes()).hexdigest()

    @property
    def target_config(self) -> Mapping[str, Any]:
        return self._target_config

    @property
    def drafter_config(self) -> Optional[Mapping[str, Any]]:
        """The drafter's config.json; None without a drafter (speculation.method ngram)."""
        return self._drafter_config if self.drafter is not None else None

    @property
    def drafter_block_size(self) -> int:
        return self._drafter_config["dflash_config"]["block_size"]

    def require_drafter(self, what: str) -> Drafter:
        """The drafter, for ``what`` (a command or a file) that needs one; a RecipeError naming the
        recipe's speculation method when it has none."""
        if self.drafter is None:
            raise RecipeError(
                self._path,
                "speculation.method",
                f"{self.speculation.method} has no drafter checkpoint, which {what} needs",
            )
        return self.drafter

    @property
    def model_paths(self) -> tuple[str, ...]:
        """The container paths of the checkpoints the deployment mounts: the target's, then the drafter's."""
        return (self.target.path,) + ((self.drafter.path,) if self.drafter is not None else ())

    @property
    def series_dir(self) -> Path:
        return OVERLAY_SERIES_DIR / self.overlay.series

    @property
    def model_mount_point(self) -> str:
        """The container directory holding both model paths (e.g. /models); the loader checked there is one."""
        return models_root(*self.model_paths)

    def for_platform(self, platform: str) -> "Recipe":
        """The same recipe building ``platform``, one of its ``platforms``."""
        return replace(self, platform=platform)

    @property
    def uname_machine(self) -> str:
        return UNAME_MACHINE[self.platform]

    @property
    def architecture(self) -> str:
        """The image-config architecture name (``arm64``, ``amd64``)."""
        return self.platform.split("/", 1)[1]
