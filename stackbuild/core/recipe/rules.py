"""The rules that make a recipe servable, beyond the types the schema checks: one function per section.

:func:`check_rules` runs the sections in a fixed order, so a recipe with several faults is always
refused for the same one. Every failure is a RecipeError naming the file and the key at fault.
"""

from __future__ import annotations

import hashlib
import ipaddress
import posixpath
import re
from pathlib import Path

from geometry import KV_CACHE_DTYPES, ConfigInvalid, VllmVersionNotModelled, check_drafter, check_target, release
from overlay.lock import LOCK_FILE
from stackbuild.core.errors import ImageReferenceInvalid, RecipeError
from stackbuild.core.labels import RESERVED_PREFIXES
from stackbuild.core.recipe.files import read_series_lock
from stackbuild.core.recipe.hardware import check_hardware
from stackbuild.core.recipe.values import OVERLAY_SERIES_DIR, REPO_ROOT, Recipe, Serving, models_root
from stackbuild.core.reference import DIGEST_RE, ImageReference
from stackbuild.core.schema import MAX_INTEGER
from stackbuild.core.serve_flags import repeated_flag

SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME_RE = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|CREDENTIAL)", re.I)
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
MAX_NGRAM = 1024  # the longest prompt-lookup window a recipe may ask for


def check_rules(path: Path, recipe: Recipe, platform_keys: tuple[str, ...]) -> None:
    """The rules that go beyond types, section by section; each names the key at fault."""
    check_name(path, recipe)
    check_references(path, recipe)
    check_hardware(path, recipe, platform_keys)
    check_serving(path, recipe.serving)
    check_geometry(path, recipe)
    check_configs(path, recipe)
    check_draft_tokens(path, recipe)
    check_qualify(path, recipe)
    check_overlay(path, recipe)
    check_vllm_release(path, recipe)
    check_model_paths(path, recipe)
    check_image(path, recipe)


def check_name(path: Path, recipe: Recipe) -> None:
    if not NAME_RE.match(recipe.name):
        raise RecipeError(
            path,
            "name",
            f"must be a safe file name (letters, digits, . _ -, starting with a letter "
            f"or digit, at most 128), got {recipe.name!r}",
        )


def check_repository(path: object, key: str, repository: str) -> None:
    """A repository (registry/namespace/name, no tag) in the OCI distribution reference grammar."""
    try:
        parsed = ImageReference.parse(repository)
    except ImageReferenceInvalid as exc:
        raise RecipeError(
            path,
            key,
            f"{repository!r} is not a valid image repository ({exc.reason}; lowercase "
            f"letters, digits and . _ - separators)",
        ) from None
    if repository != repository.lower():
        raise RecipeError(
            path, key, f"{repository!r} is not a valid image repository (repository names must be lowercase)"
        )
    if parsed.repository != repository:
        raise RecipeError(
            path, key, f"give the repository only (tag and digest have their own keys), got {repository!r}"
        )


def check_references(path: Path, recipe: Recipe) -> None:
    """The image references: the base's repository, tag and digest, and the image's repository template."""
    base = recipe.base
    if base.digest is not None and not DIGEST_RE.match(base.digest):
        raise RecipeError(
            path,
            "base.digest",
            f"not a digest: expected 'sha256:' followed by 64 lowercase hex digits, got {base.digest!r}",
        )
    if "@" in base.image or ":" in base.image.rsplit("/", 1)[-1]:
        raise RecipeError(
            path, "base.image", f"give the repository only (tag and digest have their own keys), got {base.image!r}"
        )
    check_repository(path, "base.image", base.image)
    template = recipe.image.repository
    check_repository(path, "image.repository", template.replace("{owner}", SAMPLE_OWNER))
    if not TAG_RE.match(base.tag):
        raise RecipeError(path, "base.tag", f"not a valid image tag: {base.tag!r}")


def check_serving(path: Path, serving: Serving) -> None:
    """The serve flags' ranges, the extra arguments and the environment."""
    tp = serving.tensor_parallel_size
    if tp < 1 or tp & (tp - 1) or tp > MAX_TENSOR_PARALLEL:
        raise RecipeError(
            path, "serving.tensor_parallel_size", f"must be a power of two from 1 to {MAX_TENSOR_PARALLEL}, got {tp}"
        )
    if serving.nodes < 1:
        raise RecipeError(path, "serving.nodes", f"must be a positive integer, got {serving.nodes}")
    if tp % serving.nodes:
        raise RecipeError(
            path,
            "serving.nodes",
            f"serving.tensor_parallel_size {tp} is not a multiple of "
            f"{serving.nodes} nodes (every node runs the same number of ranks)",
        )
    for key in ("kv_cache_dtype", "drafter_kv_cache_dtype"):
        value = getattr(serving, key)
        if value is not None and value not in KV_CACHE_DTYPES:
            raise RecipeError(path, f"serving.{key}", f"must be one of: {', '.join(KV_CACHE_DTYPES)}; got {value!r}")
    if serving.max_model_len < 1:
        raise RecipeError(path, "serving.max_model_len", f"must be positive, got {serving.max_model_len}")
    if serving.block_size is not None and not 1 <= serving.block_size <= MAX_BLOCK_SIZE:
        raise RecipeError(path, "serving.block_size", f"must be from 1 to {MAX_BLOCK_SIZE:,}, got {serving.block_size}")
    if serving.max_num_seqs is not None and serving.max_num_seqs < 1:
        raise RecipeError(path, "serving.max_num_seqs", f"must be positive, got {serving.max_num_seqs}")
    if serving.max_num_batched_tokens is not None and not 1 <= serving.max_num_batched_tokens <= MAX_INTEGER:
        raise RecipeError(
            path,
            "serving.max_num_batched_tokens",
            f"must be a positive number of tokens, got {serving.max_num_batched_tokens}",
        )
    if not 0.0 < serving.gpu_memory_utilization <= 1.0:
        raise RecipeError(
            path, "serving.gpu_memory_utilization", f"must be in (0, 1], got {serving.gpu_memory_utilization}"
        )
    if not 0 < serving.port < 65536:
        raise RecipeError(path, "serving.port", f"must be a TCP port, got {serving.port}")
    try:
        ipaddress.ip_address(serving.host_ip)
    except ValueError:
        raise RecipeError(
            path, "serving.host_ip", f"must be an IP address such as 127.0.0.1 or 0.0.0.0, got {serving.host_ip!r}"
        ) from None
    for i, arg in enumerate(serving.extra_args):
        flag = arg.split("=", 1)[0]
        if not arg.strip() or any(c.isspace() for c in flag):
            raise RecipeError(
                path,
                f"serving.extra_args[{i}]",
                f"{arg!r} has whitespace before any '=': give each flag and each value as its own list item",
            )
    repeated = repeated_flag(serving.extra_args)
    if repeated is not None:
        raise RecipeError(path, f"serving.extra_args[{repeated[0]}]", repeated[1])
    for name in serving.env:
        if not ENV_NAME_RE.match(name):
            raise RecipeError(path, f"serving.env.{name}", "not a valid environment variable name")
        if SECRET_NAME_RE.search(name):
            raise RecipeError(
                path,
                f"serving.env.{name}",
                "looks like a secret: recipes are committed and rendered "
                "into files; pass it at run time (compose env_file) instead",
            )


def check_geometry(path: Path, recipe: Recipe) -> None:
    kv = recipe.geometry.kv_cache_memory_gib
    if not 0 < kv <= MAX_KV_CACHE_GIB:
        raise RecipeError(
            path, "geometry.kv_cache_memory_gib", f"must be above 0 and at most {MAX_KV_CACHE_GIB:,}, got {kv}"
        )


def check_configs(path: Path, recipe: Recipe) -> None:
    """The config snapshots hold what the gate models (geometry/model/config.py)."""
    checks = [("target.config", recipe.target.config, check_target, recipe.target_config)]
    if recipe.drafter is not None:
        checks.append(("drafter.config", recipe.drafter.config, check_drafter, recipe.drafter_config))
    for key, relative, check, config in checks:
        try:
            check(config)
        except ConfigInvalid as exc:
            where = f"{exc.key}: " if exc.key else ""
            raise RecipeError(path, key, f"{relative}: {where}{exc.problem}") from None


def check_speculation(path: Path, recipe: Recipe) -> None:
    """The speculation method and the keys that go with it: dflash needs the drafter, ngram its
    prompt-lookup window and no drafter."""
    spec = recipe.speculation
    if spec.method == "dflash":
        if recipe.drafter is None:
            raise RecipeError(
                path, "drafter", "required key is missing (speculation.method dflash drafts with this checkpoint)"
            )
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(spec, key) is not None:
                raise RecipeError(path, f"speculation.{key}", "is a setting of speculation.method ngram, not dflash")
        return
    if recipe.drafter is not None:
        raise RecipeError(
            path, "drafter", f"speculation.method {spec.method} proposes from the prompt: remove the drafter"
        )
    if recipe.serving.drafter_kv_cache_dtype is not None:
        raise RecipeError(
            path, "serving.drafter_kv_cache_dtype", f"speculation.method {spec.method} has no drafter KV cache"
        )
    if spec.prompt_lookup_max is None or spec.prompt_lookup_min is None:
        missing = "prompt_lookup_max" if spec.prompt_lookup_max is None else "prompt_lookup_min"
        raise RecipeError(path, f"speculation.{missing}", f"required key is missing (speculation.method {spec.method})")
    if not 1 <= spec.prompt_lookup_min <= spec.prompt_lookup_max <= MAX_NGRAM:
        raise RecipeError(
            path,
            "speculation.prompt_lookup_min",
            f"needs 1 <= prompt_lookup_min <= prompt_lookup_max "
            f"<= {MAX_NGRAM}, "
            f"got {spec.prompt_lookup_min} and "
            f"{spec.prompt_lookup_max}",
        )


def check_draft_tokens(path: Path, recipe: Recipe) -> None:
    """serving.num_speculative_tokens: the drafter's block less one, or ngram's proposals per step."""
    serving = recipe.serving
    if recipe.drafter is not None:
        block = recipe.drafter_block_size
        if serving.num_speculative_tokens != block - 1:
            raise RecipeError(
                path,
                "serving.num_speculative_tokens",
                f"must be {block - 1} (the drafter's block "
                f"size {block} minus the target's own token), "
                f"got {serving.num_speculative_tokens}",
            )
    elif serving.num_speculative_tokens < 1:
        raise RecipeError(
            path,
            "serving.num_speculative_tokens",
            f"must be at least 1 (the tokens ngram proposes per step), got {serving.num_speculative_tokens}",
        )


def check_qualify(path: Path, recipe: Recipe) -> None:
    q = recipe.qualify
    if q.min_decode_tokens_per_s is not None and not 0 < q.min_decode_tokens_per_s < 1e7:
        raise RecipeError(
            path, "qualify.min_decode_tokens_per_s", f"must be a positive rate, got {q.min_decode_tokens_per_s}"
        )
    if q.min_acceptance is not None and not 0 <= q.min_acceptance <= 1:
        raise RecipeError(path, "qualify.min_acceptance", f"must be a fraction from 0 to 1, got {q.min_acceptance}")


def check_overlay(path: Path, recipe: Recipe) -> None:
    """The patch series: a directory of overlay/series/, written for the base's vLLM release (its lock.json)."""
    series_root = OVERLAY_SERIES_DIR.relative_to(REPO_ROOT)
    if not SERIES_RE.match(recipe.overlay.series):
        raise RecipeError(
            path,
            "overlay.series",
            f"must be the name of a directory in {series_root}/ (no path), got {recipe.overlay.series!r}",
        )
    if not recipe.series_dir.is_dir():
        raise RecipeError(path, "overlay.series", f"no patch series named {recipe.overlay.series!r} in {series_root}/")
    where = f"{series_root}/{recipe.overlay.series}/{LOCK_FILE}"
    wanted = str(read_series_lock(path, recipe.series_dir)["version"])
    if recipe.base.vllm_version != wanted:
        raise RecipeError(
            path,
            "base.vllm_version",
            f"{recipe.base.vllm_version}: the patch series "
            f"{recipe.overlay.series!r} "
            f"is written for vLLM {wanted} ({where}); use a base with vLLM "
            f"{wanted} or a series written for {recipe.base.vllm_version}",
        )


def check_vllm_release(path: Path, recipe: Recipe) -> None:
    """The base's vLLM release is one the geometry gate models (geometry/vllm_versions.py)."""
    try:
        release(recipe.base.vllm_version)
    except VllmVersionNotModelled as exc:
        raise RecipeError(path, "base.vllm_version", str(exc)) from None


def check_model_paths(path: Path, recipe: Recipe) -> None:
    """The model paths are absolute container paths under one models directory (the one mount)."""
    for key, model_path in zip(("target.path", "drafter.path"), recipe.model_paths):
        if not posixpath.isabs(model_path):
            raise RecipeError(path, key, f"must be an absolute path inside the container, got {model_path!r}")
    if models_root(*recipe.model_paths) == "/":
        if recipe.drafter is None:
            raise RecipeError(
                path, "target.path", f"must lie in a models directory such as /models/NAME, got {recipe.target.path}"
            )
        raise RecipeError(
            path,
            "drafter.path",
            f"target and drafter must live under one models directory "
            f"(got {recipe.target.path} and {recipe.drafter.path})",
        )


def check_image(path: Path, recipe: Recipe) -> None:
    """The image's tag templates and its own labels."""
    hw = recipe.hardware
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


def check_pins(path: Path, recipe: Recipe) -> None:
    """``revision`` and ``config_sha256`` of the target and the drafter, when given."""
    for role, model in (("target", recipe.target), ("drafter", recipe.drafter)):
        if model is None:
            continue
        if model.revision is not None and not REVISION_RE.match(model.revision):
            raise RecipeError(
                path, f"{role}.revision", f"expected the checkpoint's 40-hex-digit commit, got {model.revision!r}"
            )
        if model.config_sha256 is None:
            continue
        if not SHA256_HEX_RE.match(model.config_sha256):
            raise RecipeError(
                path, f"{role}.config_sha256", f"expected 64 lowercase hex digits, got {model.config_sha256!r}"
            )
        actual = hashlib.sha256((path.parent / model.config).resolve().read_bytes()).hexdigest()
        if actual != model.config_sha256:
            raise RecipeError(
                path, f"{role}.config_sha256", f"{model.config} has sha256 {actual}, not {model.config_sha256}"
            )
