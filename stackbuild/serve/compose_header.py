"""The comment lines over a compose file (:class:`Header`, part by part) and the file's text: the header,
then the document with a comment above the keys that need one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from stackbuild.core.engines import OLDEST, START_INTERVAL_API, api_at_least
from stackbuild.core.naming import OWNER_VARIABLE
from stackbuild.core.recipe import Recipe
from stackbuild.serve.compose_service import BASELINE_SERVICE, HEALTH_START_INTERVAL, env_file_name
from stackbuild.serve.compose_signature import header_lines as signature_lines
from stackbuild.serve.generated import COMPOSE
from stackbuild.serve.health import API_KEY_VARIABLE
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.signature_trust import SignatureTrust
from stackbuild.serve.yaml_text import dump_yaml

LICENCE_NAMES = {"CC-BY-NC-ND-4.0": "CC BY-NC-ND 4.0 (non-commercial, no derivatives)"}
# The licences whose terms forbid commercial use (the header and the labels' comment say so).
NON_COMMERCIAL_LICENCES = frozenset({"CC-BY-NC-ND-4.0"})


@dataclass(frozen=True)
class Header:
    """The comment lines over a compose file, part by part (each line with its ``#``)."""

    about: tuple[str, ...]  # how it was generated, what it serves, the licence, the secrets
    reach: str  # where the API server can be reached
    start: str  # how to start it
    role: tuple[str, ...]  # a node role's own lines (multi-node files)
    image: tuple[str, ...]  # how the image is named: the owner, the pin
    engine: tuple[str, ...] = ()  # the Docker Engine API the file is written for (engine_lines)
    signature: tuple[str, ...] = ()  # how the signature is checked before up (compose_signature.header_lines)

    def lines(self) -> list[str]:
        return [*self.about, self.reach, "#", self.start, *self.signature, *self.engine, *self.role, *self.image]


def engine_lines(engine_api: str, start_interval: str) -> tuple[str, ...]:
    """Which engines the file is for: its health check's form follows the engine API it was written for."""
    if api_at_least(engine_api, START_INTERVAL_API):
        return (
            f"# Written for Docker Engine API {engine_api} (compose --engine-api): the health check probes every "
            f"{start_interval}",
            f"#   while the server starts (start_interval: API {START_INTERVAL_API} and newer; older engines refuse "
            "the file).",
        )
    return (
        f"# Written for Docker Engine API {engine_api} and newer (Docker {OLDEST.version}, the oldest supported); "
        "`compose --engine-api auto`",
        "#   adds the health check's start_interval where the engine takes it.",
    )


def header(recipe: Recipe, image: ImagePin, *, baseline: bool = False, engine_api: str = OLDEST.api) -> Header:
    """The single-node file's header; a node role's file replaces ``reach``, ``start`` and ``role``."""
    drafter = recipe.drafter
    if baseline:
        serves = (
            f"# Serves {recipe.target.id} WITHOUT speculation on {recipe.hardware.serves_on}: the baseline of",
            "#   `build.py qualify --baseline-url` (the recipe's command minus --speculative-config, same image).",
            "#",
            "# The model's weights are mounted read-only from the host models directory.",
        )
    elif drafter is not None:
        licence = LICENCE_NAMES.get(drafter.license, drafter.license)
        serves = (
            f"# Serves {recipe.target.id} with the {drafter.id} drafter ({drafter.method}) "
            f"on {recipe.hardware.serves_on}.",
            "#",
            f"# LICENCE: the drafter {drafter.id} is {licence}.",
            "#   Its weights are mounted read-only from the host models directory, never baked into",
            "#   the image; respect its terms"
            + (" (non-commercial use only)." if drafter.license in NON_COMMERCIAL_LICENCES else "."),
        )
    else:
        serves = (
            f"# Serves {recipe.target.id} with {recipe.speculation.method} speculation (no drafter) "
            f"on {recipe.hardware.serves_on}.",
            "#",
            "# The model's weights are mounted read-only from the host models directory.",
        )
    about = (
        COMPOSE.first_line(recipe, "--baseline" if baseline else ""),
        *serves,
        f"# Secrets such as HF_TOKEN go in ./{env_file_name(recipe)} (optional, never inlined here);",
        f"#   {API_KEY_VARIABLE}=... there makes vLLM require that key (Authorization: Bearer) on /v1.",
    )
    pin = []
    if image.owner_from_env:
        pin.append(f"# The image owner is read from {OWNER_VARIABLE} when this file is used (none was given).")
    if image.digest:
        pin.append(f"# Image pinned by digest (from {image.digest_source}).")
    else:
        pin.append("# UNPINNED: no digest was given (--digest) or found in out/build-report.json;")
        pin.append("#   the tag alone can move. Regenerate after `make image` to pin by digest.")
    return Header(
        about=about,
        reach=f"# The port is published on {recipe.serving.host_ip} only (serving.host_ip in the recipe).",
        start="# Start: docker compose -f <this file> up -d"
        + ("   (needs the NVIDIA container toolkit)" if recipe.hardware.has_gpu else ""),
        role=(),
        image=tuple(pin),
        engine=engine_lines(engine_api, HEALTH_START_INTERVAL),
    )


COMPOSE_UP = "docker compose -f <this file> up -d"
BUILD_UP = "python build.py up -f <this file>"


def signed(head: Header, trust: Optional[SignatureTrust]) -> Header:
    """The header of a file whose image's signature `build.py up` checks: started by it, and why."""
    if trust is None:
        return head
    return replace(head, start=head.start.replace(COMPOSE_UP, BUILD_UP), signature=signature_lines(trust))


def compose_text(recipe: Recipe, image: ImagePin, head: Header, document: dict) -> str:
    """A compose file's text: the header, then the document with a comment above the keys that need one."""
    comments = {}
    if recipe.drafter is not None:
        kind = " (non-commercial)" if recipe.drafter.license in NON_COMMERCIAL_LICENCES else ""
        comments["labels"] = f"    # The drafter is {recipe.drafter.license}{kind}: mounted, never baked in."
    if not image.digest:
        comments["image"] = "    # UNPINNED: tag only, no digest; this tag can be moved to another image."
    if BASELINE_SERVICE in document["services"]:
        comments.pop("labels", None)  # no drafter served
    out = []
    in_services = False
    for line in dump_yaml(document).splitlines():
        if not line.startswith(" "):
            in_services = line == "services:"
        # The service's keys (one service per file): the lines under services: indented by four spaces.
        elif in_services and line.startswith("    ") and not line.startswith("     "):
            comment = comments.get(line[4:].split(":", 1)[0])
            if comment:
                out.append(comment)
        out.append(line)
    return "\n".join(head.lines() + out) + "\n"
