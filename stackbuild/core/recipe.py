"""The stack recipe: one YAML file that describes one image.

Paths inside a recipe are relative to the recipe file. Loading checks the
shape (unknown keys, types, required keys) and then the rules that make a
recipe servable (drafter block vs speculative tokens, kernels vs GPU,
platform vs hardware). Every failure is a :class:`RecipeError` naming the
file and the key path.
"""
from __future__ import annotations

import errno
import hashlib
import posixpath
import ipaddress
import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping, Optional

import yaml

from geometry.model_config import ConfigInvalid, check_drafter, check_target
from overlay.errors import OverlayError
from overlay.lock import LOCK_FILE
from overlay.lock import read_lock as read_series_lock

from stackbuild.core.errors import ImageReferenceInvalid, RecipeError
from stackbuild.core.gpus import KNOWN_GPUS, NO_GPU, has_gpu, known_gpu
from stackbuild.core.gpus import tag_field as gpu_tag_field
from stackbuild.core.labels import RESERVED_PREFIXES
from stackbuild.core.reference import DIGEST_RE, ImageReference
from stackbuild.core.schema import MAX_INTEGER, build_dataclass
from stackbuild.core.serve_flags import repeated_flag

REPO_ROOT = Path(__file__).resolve().parents[2]
OVERLAY_SERIES_DIR = REPO_ROOT / "overlay" / "series"
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"

SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
PLATFORM_RE = re.compile(r"^linux/(amd64|arm64)$")
CAPABILITY_RE = re.compile(r"^(\d+)\.(\d+)$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME_RE = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|CREDENTIAL)", re.I)
KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
TAG_FIELDS = ("date", "family", "gpu", "rev")
# Recipe names become file names (compose/<name>.compose.yaml, <name>.env) and label values.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A patch series is a directory directly under overlay/series/.
SERIES_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# What stands in for {owner} when the repository template is checked against the reference grammar.
SAMPLE_OWNER = "owner"
MAX_TENSOR_PARALLEL = 1024
MAX_BLOCK_SIZE = 1 << 20
MAX_KV_CACHE_GIB = 1 << 20  # 1 PiB
MAX_CONFIG_BYTES = 16 << 20
MAX_NGRAM = 1024  # the longest prompt-lookup window a recipe may ask for

# The platform string a recipe names, and what `uname -m` prints there.
UNAME_MACHINE = {"linux/arm64": "aarch64", "linux/amd64": "x86_64"}


@dataclass(frozen=True)
class BaseImage:
    """The vLLM image the overlay goes on; pinned by tag and digest."""

    image: str
    tag: str
    vllm_version: str
    digest: Optional[str] = None

    @property
    def reference(self) -> ImageReference:
        """``image:tag`` (the recipe's digest, if any, is checked against the lock: see stackbuild/lock.py)."""
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
    # --max-num-seqs; None: vLLM's default. The gate checks it against the pool (geometry/concurrency.py).
    max_num_seqs: Optional[int] = None
    # --max-num-batched-tokens; None: vLLM's default for the GPU (stackbuild/core/gpus.py). The requests
    # at once count the tokens in flight a sliding-window drafter holds (geometry/concurrency.py).
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
            raise RecipeError(self._path, "speculation.method", f"{self.speculation.method} has no drafter "
                                                                f"checkpoint, which {what} needs")
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
        return _models_root(*self.model_paths)

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


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges, it does not repeat
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(path, "", "recipe file not found") from None
    except IsADirectoryError:
        raise RecipeError(path, "", "is a directory, not a recipe file") from None
    except UnicodeDecodeError:
        raise RecipeError(path, "", "not UTF-8 text") from None
    except OSError as exc:
        raise RecipeError(path, "", f"cannot read recipe: {exc.strerror}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(path, "", f"invalid YAML{where}: {problem}") from None
    except (ValueError, RecursionError) as exc:  # an integer too long to convert, nesting too deep
        raise RecipeError(path, "", f"invalid YAML: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _json_int(text: str) -> int:
    if len(text) > 17 or abs(int(text)) > MAX_INTEGER:
        raise ValueError(f"integer {text[:20]}{'...' if len(text) > 20 else ''} is too large")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def config_path(recipe_path: Path, key: str, relative: str) -> Path:
    """The file a recipe's config key names: a relative path that stays inside the recipe's directory."""
    if not relative.strip():
        raise RecipeError(recipe_path, key, "empty path")
    if "\x00" in relative:
        raise RecipeError(recipe_path, key, f"{relative!r} holds a NUL character")
    if os.path.isabs(relative):
        raise RecipeError(recipe_path, key, f"must be relative to the recipe's directory, got {relative!r}")
    root = recipe_path.parent.resolve()
    try:
        resolved = (root / relative).resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise RecipeError(recipe_path, key, f"{relative}: symlink loop") from None
    if resolved != root and root not in resolved.parents:
        raise RecipeError(recipe_path, key, f"{relative} leaves the recipe's directory {root}")
    return resolved


def _read_config(recipe_path: Path, key: str, relative: str) -> Mapping[str, Any]:
    path = config_path(recipe_path, key, relative)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise RecipeError(recipe_path, key, f"file not found: {relative}") from None
    except IsADirectoryError:
        raise RecipeError(recipe_path, key, f"{relative} is a directory, not a config.json") from None
    except OSError as exc:
        why = "symlink loop" if exc.errno == errno.ELOOP else exc.strerror
        raise RecipeError(recipe_path, key, f"cannot read {relative}: {why}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise RecipeError(recipe_path, key, f"{relative} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config.json")
    if not raw.strip():
        raise RecipeError(recipe_path, key, f"{relative} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(recipe_path, key, f"{relative} is not UTF-8 text (a binary file?)") from None
    try:
        data = json.loads(text, object_pairs_hook=_json_object, parse_constant=_json_constant,
                          parse_int=_json_int, parse_float=_json_float)
    except json.JSONDecodeError as exc:
        raise RecipeError(recipe_path, key, f"{relative} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise RecipeError(recipe_path, key, f"{relative}: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(recipe_path, key, f"{relative} must hold a JSON object")
    return data


def _models_root(*paths: str) -> str:
    """The deepest directory above every model path ("/" when they share none below the root)."""
    return posixpath.commonpath([posixpath.dirname(posixpath.normpath(p)) for p in paths])


def check_repository(path: object, key: str, repository: str) -> None:
    """A repository (registry/namespace/name, no tag) in the OCI distribution reference grammar."""
    try:
        parsed = ImageReference.parse(repository)
    except ImageReferenceInvalid as exc:
        raise RecipeError(path, key, f"{repository!r} is not a valid image repository ({exc.reason}; lowercase letters, digits and . _ - separators)") from None
    if repository != repository.lower():
        raise RecipeError(path, key, f"{repository!r} is not a valid image repository (repository names must be lowercase)")
    if parsed.repository != repository:
        raise RecipeError(path, key, f"give the repository only (tag and digest have their own keys), got {repository!r}")


def _check_rules(path: Path, recipe: Recipe, platform_keys: tuple[str, ...]) -> None:
    """The rules that go beyond types; each names the key at fault."""
    base, hw, serving = recipe.base, recipe.hardware, recipe.serving
    if not NAME_RE.match(recipe.name):
        raise RecipeError(path, "name", f"must be a safe file name (letters, digits, . _ -, starting with a letter or digit, at most 128), got {recipe.name!r}")
    if base.digest is not None and not DIGEST_RE.match(base.digest):
        raise RecipeError(path, "base.digest", f"not a digest: expected 'sha256:' followed by 64 lowercase hex digits, got {base.digest!r}")
    if "@" in base.image or ":" in base.image.rsplit("/", 1)[-1]:
        raise RecipeError(path, "base.image", f"give the repository only (tag and digest have their own keys), got {base.image!r}")
    check_repository(path, "base.image", base.image)
    template = recipe.image.repository
    check_repository(path, "image.repository", template.replace("{owner}", SAMPLE_OWNER))
    if not TAG_RE.match(base.tag):
        raise RecipeError(path, "base.tag", f"not a valid image tag: {base.tag!r}")
    for where, plat in zip(platform_keys, recipe.platforms):
        if not PLATFORM_RE.match(plat):
            raise RecipeError(path, where, f"unsupported platform {plat!r} (expected linux/arm64 or linux/amd64)")
        if recipe.platforms.count(plat) > 1:
            raise RecipeError(path, where, f"{plat} is listed twice")
    for i, plat in enumerate(hw.platforms):
        if not PLATFORM_RE.match(plat):
            raise RecipeError(path, f"hardware.platforms[{i}]", f"unsupported platform {plat!r} (expected linux/arm64 or linux/amd64)")
    cap = CAPABILITY_RE.match(hw.compute_capability)
    if not cap:
        raise RecipeError(path, "hardware.compute_capability", f"expected MAJOR.MINOR such as '10.3', got {hw.compute_capability!r}")
    family = int(cap.group(1)) * 10
    if hw.capability_family != family:
        raise RecipeError(path, "hardware.capability_family", f"{hw.capability_family} does not match compute capability {hw.compute_capability} (family {family})")
    for where, plat in zip(platform_keys, recipe.platforms):
        if plat not in hw.platforms:
            runs = ", ".join(hw.platforms)
            raise RecipeError(path, where, f"{plat} cannot run on {hw.gpu} (its hosts are {runs})")
    if recipe.drafter is not None and recipe.drafter.precision == "mxfp8" and hw.capability_major != 12:
        raise RecipeError(path, "drafter.precision", f"the MXFP8 drafter needs the B12X kernels, which exist only for SM120/SM121; {hw.gpu} is compute capability {hw.compute_capability}: use bf16")
    tp = serving.tensor_parallel_size
    if tp < 1 or tp & (tp - 1) or tp > MAX_TENSOR_PARALLEL:
        raise RecipeError(path, "serving.tensor_parallel_size", f"must be a power of two from 1 to {MAX_TENSOR_PARALLEL}, got {tp}")
    if serving.nodes < 1:
        raise RecipeError(path, "serving.nodes", f"must be a positive integer, got {serving.nodes}")
    if tp % serving.nodes:
        raise RecipeError(path, "serving.nodes", f"serving.tensor_parallel_size {tp} is not a multiple of {serving.nodes} nodes (every node runs the same number of ranks)")
    for key in ("kv_cache_dtype", "drafter_kv_cache_dtype"):
        value = getattr(serving, key)
        if value is not None and value not in KV_DTYPES:
            raise RecipeError(path, f"serving.{key}", f"must be one of: {', '.join(KV_DTYPES)}; got {value!r}")
    if serving.max_model_len < 1:
        raise RecipeError(path, "serving.max_model_len", f"must be positive, got {serving.max_model_len}")
    if serving.block_size is not None and not 1 <= serving.block_size <= MAX_BLOCK_SIZE:
        raise RecipeError(path, "serving.block_size", f"must be from 1 to {MAX_BLOCK_SIZE:,}, got {serving.block_size}")
    if serving.max_num_seqs is not None and serving.max_num_seqs < 1:
        raise RecipeError(path, "serving.max_num_seqs", f"must be positive, got {serving.max_num_seqs}")
    if serving.max_num_batched_tokens is not None and not 1 <= serving.max_num_batched_tokens <= MAX_INTEGER:
        raise RecipeError(path, "serving.max_num_batched_tokens",
                          f"must be a positive number of tokens, got {serving.max_num_batched_tokens}")
    if not 0.0 < serving.gpu_memory_utilization <= 1.0:
        raise RecipeError(path, "serving.gpu_memory_utilization", f"must be in (0, 1], got {serving.gpu_memory_utilization}")
    if not 0 < serving.port < 65536:
        raise RecipeError(path, "serving.port", f"must be a TCP port, got {serving.port}")
    try:
        ipaddress.ip_address(serving.host_ip)
    except ValueError:
        raise RecipeError(path, "serving.host_ip", f"must be an IP address such as 127.0.0.1 or 0.0.0.0, got {serving.host_ip!r}") from None
    for i, arg in enumerate(serving.extra_args):
        flag = arg.split("=", 1)[0]
        if not arg.strip() or any(c.isspace() for c in flag):
            raise RecipeError(path, f"serving.extra_args[{i}]", f"{arg!r} has whitespace before any '=': give each flag and each value as its own list item")
    repeated = repeated_flag(serving.extra_args)
    if repeated is not None:
        raise RecipeError(path, f"serving.extra_args[{repeated[0]}]", repeated[1])
    for name in serving.env:
        if not ENV_NAME_RE.match(name):
            raise RecipeError(path, f"serving.env.{name}", "not a valid environment variable name")
        if SECRET_NAME_RE.search(name):
            raise RecipeError(path, f"serving.env.{name}", "looks like a secret: recipes are committed and rendered into files; pass it at run time (compose env_file) instead")
    if not 0 < recipe.geometry.kv_cache_memory_gib <= MAX_KV_CACHE_GIB:
        raise RecipeError(path, "geometry.kv_cache_memory_gib", f"must be above 0 and at most {MAX_KV_CACHE_GIB:,}, got {recipe.geometry.kv_cache_memory_gib}")
    checks = [("target.config", recipe.target.config, check_target, recipe.target_config)]
    if recipe.drafter is not None:
        checks.append(("drafter.config", recipe.drafter.config, check_drafter, recipe.drafter_config))
    for key, relative, check, config in checks:
        try:
            check(config)
        except ConfigInvalid as exc:
            where = f"{exc.key}: " if exc.key else ""
            raise RecipeError(path, key, f"{relative}: {where}{exc.problem}") from None
    if recipe.drafter is not None:
        block = recipe.drafter_block_size
        if serving.num_speculative_tokens != block - 1:
            raise RecipeError(path, "serving.num_speculative_tokens", f"must be {block - 1} (the drafter's block size {block} minus the target's own token), got {serving.num_speculative_tokens}")
    elif serving.num_speculative_tokens < 1:
        raise RecipeError(path, "serving.num_speculative_tokens", f"must be at least 1 (the tokens ngram proposes per step), got {serving.num_speculative_tokens}")
    q = recipe.qualify
    if q.min_decode_tokens_per_s is not None and not 0 < q.min_decode_tokens_per_s < 1e7:
        raise RecipeError(path, "qualify.min_decode_tokens_per_s", f"must be a positive rate, got {q.min_decode_tokens_per_s}")
    if q.min_acceptance is not None and not 0 <= q.min_acceptance <= 1:
        raise RecipeError(path, "qualify.min_acceptance", f"must be a fraction from 0 to 1, got {q.min_acceptance}")
    if not SERIES_RE.match(recipe.overlay.series):
        raise RecipeError(path, "overlay.series", f"must be the name of a directory in {OVERLAY_SERIES_DIR.relative_to(REPO_ROOT)}/ (no path), got {recipe.overlay.series!r}")
    if not recipe.series_dir.is_dir():
        raise RecipeError(path, "overlay.series", f"no patch series named {recipe.overlay.series!r} in {OVERLAY_SERIES_DIR.relative_to(REPO_ROOT)}/")
    _check_series_version(path, recipe)
    _check_model_paths(path, recipe)
    if not recipe.image.tags:
        raise RecipeError(path, "image.tags", "at least one tag is required")
    for i, tag in enumerate(recipe.image.tags):
        try:
            sample = tag.format(date="20260101", family=hw.capability_family, gpu=hw.gpu_tag, rev="0123456789ab")
        except (KeyError, IndexError, ValueError, AttributeError, TypeError):
            fields = ", ".join("{" + f + "}" for f in TAG_FIELDS)
            raise RecipeError(path, f"image.tags[{i}]", f"unknown placeholder in {tag!r} (known: {fields})") from None
        if not TAG_RE.match(sample):
            raise RecipeError(path, f"image.tags[{i}]", f"not a valid image tag: {tag!r}")
    for key in recipe.image.labels:
        if key.startswith(RESERVED_PREFIXES):
            raise RecipeError(path, f"image.labels.{key}", "this label is set by the build; choose another name")


def _check_speculation(path: Path, recipe: Recipe) -> None:
    """The speculation method and the keys that go with it: dflash needs the drafter, ngram its
    prompt-lookup window and no drafter."""
    spec = recipe.speculation
    if spec.method == "dflash":
        if recipe.drafter is None:
            raise RecipeError(path, "drafter", "required key is missing (speculation.method dflash drafts with this checkpoint)")
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(spec, key) is not None:
                raise RecipeError(path, f"speculation.{key}", "is a setting of speculation.method ngram, not dflash")
        return
    if recipe.drafter is not None:
        raise RecipeError(path, "drafter", f"speculation.method {spec.method} proposes from the prompt: remove the drafter")
    if recipe.serving.drafter_kv_cache_dtype is not None:
        raise RecipeError(path, "serving.drafter_kv_cache_dtype", f"speculation.method {spec.method} has no drafter KV cache")
    if spec.prompt_lookup_max is None or spec.prompt_lookup_min is None:
        missing = "prompt_lookup_max" if spec.prompt_lookup_max is None else "prompt_lookup_min"
        raise RecipeError(path, f"speculation.{missing}", f"required key is missing (speculation.method {spec.method})")
    if not 1 <= spec.prompt_lookup_min <= spec.prompt_lookup_max <= MAX_NGRAM:
        raise RecipeError(path, "speculation.prompt_lookup_min", f"needs 1 <= prompt_lookup_min <= prompt_lookup_max <= {MAX_NGRAM}, "
                                                                 f"got {spec.prompt_lookup_min} and {spec.prompt_lookup_max}")


def _check_series_version(path: Path, recipe: Recipe) -> None:
    """The patch series is written for one vLLM release (its lock.json): the base must carry that one."""
    where = f"{OVERLAY_SERIES_DIR.relative_to(REPO_ROOT)}/{recipe.overlay.series}/{LOCK_FILE}"
    try:
        lock = read_series_lock(recipe.series_dir)
    except OverlayError as exc:
        raise RecipeError(path, "overlay.series", str(exc).replace(str(REPO_ROOT) + os.sep, "")) from None
    wanted = str(lock["version"])
    if recipe.base.vllm_version != wanted:
        raise RecipeError(path, "base.vllm_version", f"{recipe.base.vllm_version}: the patch series {recipe.overlay.series!r} "
                                                     f"is written for vLLM {wanted} ({where}); use a base with vLLM {wanted} "
                                                     f"or a series written for {recipe.base.vllm_version}")


def _check_model_paths(path: Path, recipe: Recipe) -> None:
    """The model paths are absolute container paths under one models directory (the one mount)."""
    for key, model_path in zip(("target.path", "drafter.path"), recipe.model_paths):
        if not posixpath.isabs(model_path):
            raise RecipeError(path, key, f"must be an absolute path inside the container, got {model_path!r}")
    if _models_root(*recipe.model_paths) == "/":
        if recipe.drafter is None:
            raise RecipeError(path, "target.path", f"must lie in a models directory such as /models/NAME, got {recipe.target.path}")
        raise RecipeError(path, "drafter.path", f"target and drafter must live under one models directory "
                                                f"(got {recipe.target.path} and {recipe.drafter.path})")


def _check_pins(path: Path, recipe: Recipe) -> None:
    """``revision`` and ``config_sha256`` of the target and the drafter, when given."""
    for role, model in (("target", recipe.target), ("drafter", recipe.drafter)):
        if model is None:
            continue
        if model.revision is not None and not REVISION_RE.match(model.revision):
            raise RecipeError(path, f"{role}.revision", f"expected the checkpoint's 40-hex-digit commit, got {model.revision!r}")
        if model.config_sha256 is None:
            continue
        if not SHA256_HEX_RE.match(model.config_sha256):
            raise RecipeError(path, f"{role}.config_sha256", f"expected 64 lowercase hex digits, got {model.config_sha256!r}")
        actual = hashlib.sha256((path.parent / model.config).resolve().read_bytes()).hexdigest()
        if actual != model.config_sha256:
            raise RecipeError(path, f"{role}.config_sha256", f"{model.config} has sha256 {actual}, not {model.config_sha256}")


HARDWARE_FACTS = ("compute_capability", "capability_family", "platforms")


def _resolve_hardware(path: Path, hw: Hardware) -> Hardware:
    """A known GPU's facts where the recipe leaves them out; what it gives must agree with them.
    Another GPU needs all of them."""
    if not gpu_tag_field(hw.gpu):
        raise RecipeError(path, "hardware.gpu", f"{hw.gpu!r} has no letter or digit to name the GPU by")
    gpu = known_gpu(hw.gpu)
    if gpu is None:
        missing = [k for k in HARDWARE_FACTS if getattr(hw, k) is None]
        if missing:
            known = ", ".join(g.name for g in KNOWN_GPUS if g is not NO_GPU)
            raise RecipeError(path, "hardware.gpu", f"{hw.gpu!r} is not a GPU this tool knows ({known}): for another GPU "
                                                    f"give all of hardware.{', hardware.'.join(HARDWARE_FACTS)} "
                                                    f"(missing: {', '.join(missing)})")
        return hw
    table = {"compute_capability": gpu.compute_capability, "capability_family": gpu.capability_family}
    for key, value in table.items():
        given = getattr(hw, key)
        if given is not None and given != value:
            raise RecipeError(path, f"hardware.{key}", f"{gpu.name} has {key.replace('_', ' ')} {value}, not {given!r} "
                                                       f"(leave the key out to take it from the GPU table)")
    for i, plat in enumerate(hw.platforms or ()):
        if plat not in gpu.platforms:
            raise RecipeError(path, f"hardware.platforms[{i}]", f"{gpu.name} comes in {', '.join(gpu.platforms)} hosts, "
                                                                f"not {plat}")
    return replace(hw, compute_capability=table["compute_capability"], capability_family=table["capability_family"],
                   platforms=hw.platforms or gpu.platforms)


def load_recipe(path: str | Path) -> Recipe:
    """Load and validate a recipe file; raise :class:`RecipeError` on any fault."""
    path = Path(path)
    data = _read_yaml(path)
    if data is None:
        raise RecipeError(path, "", "recipe is empty")
    recipe = build_dataclass(path, "", Recipe, data)
    _check_speculation(path, recipe)
    if bool(recipe.platform) == bool(recipe.platforms):
        raise RecipeError(path, "platform", "give either `platform: linux/...` or `platforms: [linux/..., ...]`")
    platforms = recipe.platforms or (recipe.platform,)
    platform_keys = tuple(f"platforms[{i}]" for i in range(len(platforms))) if recipe.platforms else ("platform",)
    recipe = replace(recipe, hardware=_resolve_hardware(path, recipe.hardware))
    target_config = _read_config(path, "target.config", recipe.target.config)
    drafter_config = _read_config(path, "drafter.config", recipe.drafter.config) if recipe.drafter is not None else {}
    recipe = Recipe(
        **{f: getattr(recipe, f) for f in recipe.__dataclass_fields__ if not f.startswith("_") and not f.startswith("platform")},
        platform=platforms[0],
        platforms=platforms,
        _path=path.resolve(),
        _target_config=MappingProxyType(target_config),
        _drafter_config=MappingProxyType(drafter_config),
    )
    _check_rules(path, recipe, platform_keys)
    _check_pins(path, recipe)
    return recipe
