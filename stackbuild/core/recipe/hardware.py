"""The recipe's hardware: a known GPU's facts filled in (:func:`resolve_hardware`, when the recipe
loads) and the rules its platforms, capability and drafter kernels obey (:func:`check_hardware`, the
hardware section of the rules)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from stackbuild.core.errors import RecipeError
from stackbuild.core.gpus import KNOWN_GPUS, NO_GPU, known_gpu
from stackbuild.core.gpus import tag_field as gpu_tag_field
from stackbuild.core.recipe.values import Hardware, Recipe

PLATFORM_RE = re.compile(r"^linux/(amd64|arm64)$")
CAPABILITY_RE = re.compile(r"^(\d+)\.(\d+)$")
# What a GPU the table does not know must state.
HARDWARE_FACTS = ("compute_capability", "capability_family", "platforms")


def resolve_hardware(path: Path, hw: Hardware) -> Hardware:
    """A known GPU's facts where the recipe leaves them out; what it gives must agree with them.
    Another GPU needs all of them."""
    if not gpu_tag_field(hw.gpu):
        raise RecipeError(path, "hardware.gpu", f"{hw.gpu!r} has no letter or digit to name the GPU by")
    gpu = known_gpu(hw.gpu)
    if gpu is None:
        missing = [k for k in HARDWARE_FACTS if getattr(hw, k) is None]
        if missing:
            known = ", ".join(g.name for g in KNOWN_GPUS if g is not NO_GPU)
            raise RecipeError(
                path,
                "hardware.gpu",
                f"{hw.gpu!r} is not a GPU this tool knows ({known}): for another "
                f"GPU give all of hardware.{', hardware.'.join(HARDWARE_FACTS)} "
                f"(missing: {', '.join(missing)})",
            )
        return hw
    table = {"compute_capability": gpu.compute_capability, "capability_family": gpu.capability_family}
    for key, value in table.items():
        given = getattr(hw, key)
        if given is not None and given != value:
            raise RecipeError(
                path,
                f"hardware.{key}",
                f"{gpu.name} has {key.replace('_', ' ')} {value}, not {given!r} "
                f"(leave the key out to take it from the GPU table)",
            )
    for i, plat in enumerate(hw.platforms or ()):
        if plat not in gpu.platforms:
            raise RecipeError(
                path, f"hardware.platforms[{i}]", f"{gpu.name} comes in {', '.join(gpu.platforms)} hosts, not {plat}"
            )
    return replace(
        hw,
        compute_capability=table["compute_capability"],
        capability_family=table["capability_family"],
        platforms=hw.platforms or gpu.platforms,
    )


def check_hardware(path: Path, recipe: Recipe, platform_keys: tuple[str, ...]) -> None:
    """The platforms the recipe builds, the GPU's capability and hosts, and the kernels the drafter needs."""
    hw = recipe.hardware
    for where, plat in zip(platform_keys, recipe.platforms):
        if not PLATFORM_RE.match(plat):
            raise RecipeError(path, where, f"unsupported platform {plat!r} (expected linux/arm64 or linux/amd64)")
        if recipe.platforms.count(plat) > 1:
            raise RecipeError(path, where, f"{plat} is listed twice")
    for i, plat in enumerate(hw.platforms):
        if not PLATFORM_RE.match(plat):
            raise RecipeError(
                path, f"hardware.platforms[{i}]", f"unsupported platform {plat!r} (expected linux/arm64 or linux/amd64)"
            )
    cap = CAPABILITY_RE.match(hw.compute_capability)
    if not cap:
        raise RecipeError(
            path, "hardware.compute_capability", f"expected MAJOR.MINOR such as '10.3', got {hw.compute_capability!r}"
        )
    family = int(cap.group(1)) * 10
    if hw.capability_family != family:
        raise RecipeError(
            path,
            "hardware.capability_family",
            f"{hw.capability_family} does not match compute capability {hw.compute_capability} (family {family})",
        )
    for where, plat in zip(platform_keys, recipe.platforms):
        if plat not in hw.platforms:
            runs = ", ".join(hw.platforms)
            raise RecipeError(path, where, f"{plat} cannot run on {hw.gpu} (its hosts are {runs})")
    if recipe.drafter is not None and recipe.drafter.precision == "mxfp8" and hw.capability_major != 12:
        raise RecipeError(
            path,
            "drafter.precision",
            f"the MXFP8 drafter needs the B12X kernels, which exist only for "
            f"SM120/SM121; {hw.gpu} is compute capability "
            f"{hw.compute_capability}: use bf16",
        )
