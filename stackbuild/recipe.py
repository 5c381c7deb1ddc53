"""The stack recipe: one YAML file that describes one image.

Paths inside a recipe are relative to the recipe file. Loading checks the
shape (unknown keys, types, required keys) and then the rules that make a
recipe servable (drafter block vs speculative tokens, kernels vs GPU,
platform vs hardware). Every failure is a :class:`RecipeError` naming the
file and the key path.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping, Optional

import yaml

from .errors import RecipeError
from .schema import build_dataclass

REPO_ROOT = Path(__file__).resolve().parent.parent
OVERLAY_SERIES_DIR = REPO_ROOT / "overlay" / "series"
DEFAULT_RECIPE = REPO_ROOT / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
PLATFORM_RE = re.compile(r"^linux/(amd64|arm64)$")
CAPABILITY_RE = re.compile(r"^(\d+)\.(\d+)$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME_RE = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|CREDENTIAL)", re.I)
KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
TAG_FIELDS = ("date", "family", "gpu", "rev")

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
    def reference(self) -> str:
        return f"{self.image}:{self.tag}"


@dataclass(frozen=True)
class Hardware:
    gpu: str
    compute_capability: str
    capability_family: int
    platforms: tuple[str, ...]

    @property
    def capability_major(self) -> int:
        return int(self.compute_capability.split(".")[0])


@dataclass(frozen=True)
class Model:
    id: str
    path: str
    config: str


@dataclass(frozen=True)
class Drafter:
    id: str
    path: str
    config: str
    precision: Literal["bf16", "mxfp8"]
    license: str
    method: Literal["dflash"] = "dflash"
    # The drafter's attention backend, pinned: vLLM's automatic choice needs
    # libcuda, and the backend's kernel blocks decide the drafter's block size.
    attention_backend: Optional[Literal["FLASH_ATTN"]] = None


@dataclass(frozen=True)
class Serving:
    max_model_len: int
    num_speculative_tokens: int
    tensor_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    drafter_kv_cache_dtype: Optional[str] = None
    block_size: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    served_model_name: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Geometry:
    """Inputs the KV-geometry gate needs beyond the configs and serving flags."""

    kv_cache_memory_gib: float
    mamba_cache_mode: Literal["none", "align"] = "none"


@dataclass(frozen=True)
class Overlay:
    series: str


@dataclass(frozen=True)
class ImageSpec:
    repository: str
    tags: tuple[str, ...]
    source: str = "https://github.com/OWNER/glm53-dflash2-images"
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Recipe:
    name: str
    base: BaseImage
    hardware: Hardware
    target: Model
    drafter: Drafter
    serving: Serving
    geometry: Geometry
    overlay: Overlay
    image: ImageSpec
    description: str = ""
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
    def target_config(self) -> Mapping[str, Any]:
        return self._target_config

    @property
    def drafter_config(self) -> Mapping[str, Any]:
        return self._drafter_config

    @property
    def drafter_block_size(self) -> int:
        return int(self._drafter_config["dflash_config"]["block_size"])

    @property
    def series_dir(self) -> Path:
        return OVERLAY_SERIES_DIR / self.overlay.series

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


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(path, "", "recipe file not found") from None
    except OSError as exc:
        raise RecipeError(path, "", f"cannot read recipe: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(path, "", f"invalid YAML{where}: {problem}") from None


def _read_config(recipe_path: Path, key: str, relative: str) -> Mapping[str, Any]:
    config_path = (recipe_path.parent / relative).resolve()
    if not config_path.is_file():
        raise RecipeError(recipe_path, key, f"file not found: {relative}")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecipeError(recipe_path, key, f"{relative} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise RecipeError(recipe_path, key, f"{relative} must hold a JSON object")
    return data


def _check_rules(path: Path, recipe: Recipe, platform_keys: tuple[str, ...]) -> None:
    """The rules that go beyond types; each names the key at fault."""
    base, hw, serving = recipe.base, recipe.hardware, recipe.serving
    if base.digest is not None and not DIGEST_RE.match(base.digest):
        raise RecipeError(path, "base.digest", f"not a digest: expected 'sha256:' followed by 64 lowercase hex digits, got {base.digest!r}")
    if "@" in base.image or ":" in base.image.rsplit("/", 1)[-1]:
        raise RecipeError(path, "base.image", f"give the repository only (tag and digest have their own keys), got {base.image!r}")
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
    if recipe.drafter.precision == "mxfp8" and hw.capability_major != 12:
        raise RecipeError(path, "drafter.precision", f"the MXFP8 drafter needs the B12X kernels, which exist only for SM120/SM121; {hw.gpu} is compute capability {hw.compute_capability}: use bf16")
    tp = serving.tensor_parallel_size
    if tp < 1 or tp & (tp - 1):
        raise RecipeError(path, "serving.tensor_parallel_size", f"must be a power of two (1, 2, 4, 8), got {tp}")
    for key in ("kv_cache_dtype", "drafter_kv_cache_dtype"):
        value = getattr(serving, key)
        if value is not None and value not in KV_DTYPES:
            raise RecipeError(path, f"serving.{key}", f"must be one of: {', '.join(KV_DTYPES)}; got {value!r}")
    if serving.max_model_len < 1:
        raise RecipeError(path, "serving.max_model_len", f"must be positive, got {serving.max_model_len}")
    if serving.block_size is not None and serving.block_size < 1:
        raise RecipeError(path, "serving.block_size", f"must be positive, got {serving.block_size}")
    if not 0.0 < serving.gpu_memory_utilization <= 1.0:
        raise RecipeError(path, "serving.gpu_memory_utilization", f"must be in (0, 1], got {serving.gpu_memory_utilization}")
    if not 0 < serving.port < 65536:
        raise RecipeError(path, "serving.port", f"must be a TCP port, got {serving.port}")
    for name in serving.env:
        if not ENV_NAME_RE.match(name):
            raise RecipeError(path, f"serving.env.{name}", "not a valid environment variable name")
        if SECRET_NAME_RE.search(name):
            raise RecipeError(path, f"serving.env.{name}", "looks like a secret: recipes are committed and rendered into files; pass it at run time (compose env_file) instead")
    if recipe.geometry.kv_cache_memory_gib <= 0:
        raise RecipeError(path, "geometry.kv_cache_memory_gib", f"must be positive, got {recipe.geometry.kv_cache_memory_gib}")
    dflash = recipe.drafter_config.get("dflash_config")
    if not isinstance(dflash, Mapping) or not isinstance(dflash.get("block_size"), int):
        raise RecipeError(path, "drafter.config", f"{recipe.drafter.config} has no integer dflash_config.block_size")
    block = recipe.drafter_block_size
    if serving.num_speculative_tokens != block - 1:
        raise RecipeError(path, "serving.num_speculative_tokens", f"must be {block - 1} (the drafter's block size {block} minus the target's own token), got {serving.num_speculative_tokens}")
    if not recipe.series_dir.is_dir():
        raise RecipeError(path, "overlay.series", f"no patch series named {recipe.overlay.series!r} in {OVERLAY_SERIES_DIR.relative_to(REPO_ROOT)}/")
    if not recipe.image.tags:
        raise RecipeError(path, "image.tags", "at least one tag is required")
    for i, tag in enumerate(recipe.image.tags):
        try:
            sample = tag.format(date="20260101", family=hw.capability_family, gpu=hw.gpu.lower(), rev="0123456789ab")
        except (KeyError, IndexError, ValueError):
            fields = ", ".join("{" + f + "}" for f in TAG_FIELDS)
            raise RecipeError(path, f"image.tags[{i}]", f"unknown placeholder in {tag!r} (known: {fields})") from None
        if not TAG_RE.match(sample):
            raise RecipeError(path, f"image.tags[{i}]", f"not a valid image tag: {tag!r}")
    for key in recipe.image.labels:
        if key.startswith("org.opencontainers.") or key.startswith("io.github.glm53."):
            raise RecipeError(path, f"image.labels.{key}", "this label is set by the build; choose another name")


def load_recipe(path: str | Path) -> Recipe:
    """Load and validate a recipe file; raise :class:`RecipeError` on any fault."""
    path = Path(path)
    data = _read_yaml(path)
    if data is None:
        raise RecipeError(path, "", "recipe is empty")
    recipe = build_dataclass(path, "", Recipe, data)
    if bool(recipe.platform) == bool(recipe.platforms):
        raise RecipeError(path, "platform", "give either `platform: linux/...` or `platforms: [linux/..., ...]`")
    platforms = recipe.platforms or (recipe.platform,)
    platform_keys = tuple(f"platforms[{i}]" for i in range(len(platforms))) if recipe.platforms else ("platform",)
    target_config = _read_config(path, "target.config", recipe.target.config)
    drafter_config = _read_config(path, "drafter.config", recipe.drafter.config)
    recipe = Recipe(
        **{f: getattr(recipe, f) for f in recipe.__dataclass_fields__ if not f.startswith("_") and not f.startswith("platform")},
        platform=platforms[0],
        platforms=platforms,
        _path=path.resolve(),
        _target_config=MappingProxyType(target_config),
        _drafter_config=MappingProxyType(drafter_config),
    )
    _check_rules(path, recipe, platform_keys)
    return recipe
