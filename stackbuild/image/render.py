"""Render the Dockerfile and lay out the build context; no daemon involved."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import jinja2

from geometry import Behaviour, contract
from geometry import checked as checked_mod
from stackbuild.core.context_sources import GATE_PAYLOAD, PATCH_PAYLOAD, PREFLIGHT_PAYLOAD, payload_files
from stackbuild.core.context_sources import TEMPLATE as TEMPLATE_NAME
from stackbuild.core.errors import InternalError
from stackbuild.core.output import check_output, write_text
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import REPO_ROOT
from stackbuild.image.plan import BuildPlan

TEMPLATE = REPO_ROOT / TEMPLATE_NAME


def contract_values(
    payload_dir: str, *, behaviour: Behaviour = Behaviour.OVERLAY, failure_allowed: bool = False
) -> dict:
    """The in-image contract as the template reads it (``{{ contract.gate_command }}`` ...)."""
    return {
        "payload_dir": payload_dir,
        "overlay_apply": contract.payload_path(contract.OVERLAY_APPLY, payload_dir),
        "overlay_series": contract.payload_path(contract.OVERLAY_SERIES, payload_dir),
        "overlay_manifest": contract.payload_path(contract.OVERLAY_MANIFEST, payload_dir),
        "normalise_mtimes": contract.payload_path(contract.NORMALISE_MTIMES, payload_dir),
        "gate_command": shlex.join(
            contract.gate_argv(payload_dir, build=True, behaviour=behaviour, failure_allowed=failure_allowed)
        ),
        "preflight_entrypoint": contract.payload_path(contract.PREFLIGHT_ENTRYPOINT, payload_dir),
        "architecture_mismatch_status": contract.ARCHITECTURE_MISMATCH_STATUS,
    }


def instruction_keywords(dockerfile: str) -> list[str]:
    """The keyword of each instruction of a Dockerfile, in order (continuations and comments skipped)."""
    keywords, continued = [], False
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            keywords.append(stripped.split(None, 1)[0].upper())
        if stripped.startswith("#") and continued:
            continue
        continued = stripped.endswith("\\")
    return keywords


def render(plan: BuildPlan) -> str:
    """The Dockerfile text for a plan; its steps are the contract's ``BUILD_STEPS``, in order."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    template = env.get_template(TEMPLATE.name)
    recipe = plan.recipe
    text = template.render(
        recipe_name=recipe.name,
        vllm_version=recipe.base.vllm_version,
        series_name=None if plan.stock else recipe.overlay.series,
        base_reference=str(plan.from_reference or plan.base.reference),
        platform=recipe.platform,
        uname_machine=recipe.uname_machine,
        contract=contract_values(plan.payload_dir, behaviour=plan.behaviour, failure_allowed=plan.gate_failure_allowed),
        source_date_epoch=plan.source_date_epoch,
        labels=dict(plan.labels),
        patch_payload=PATCH_PAYLOAD,
        gate_payload=GATE_PAYLOAD,
        preflight_payload=PREFLIGHT_PAYLOAD,
    )
    keywords = instruction_keywords(text)
    expected = [step.keyword for step in contract.BUILD_STEPS]
    if keywords != expected:
        raise InternalError(
            f"{TEMPLATE.name}: its instructions {' '.join(keywords)} are not the build steps "
            f"geometry/image_contract.py names ({' '.join(expected)})"
        )
    return text


def write_dockerfile(output: Path, text: str) -> None:
    """`render -o`: ``text`` written to ``output``, over a file git tracks only when render wrote it for this
    recipe: such a file starts with the same first line (``# <recipe name>: vLLM ...``)."""
    check_output(output, "-o", ours=lambda old: old.splitlines()[:1] == text.splitlines()[:1])
    write_text(output, text, "-o")


def write_context(plan: BuildPlan, directory: Path) -> Path:
    """Write the Dockerfile and the three payload trees into ``directory``.

    Each payload mirrors its absolute path (``<payload>/opt/glm53-overlay/...``)
    and the Dockerfile's one COPY copies the three to ``/``, so even ``/opt`` gets
    the epoch time from the context rather than the time of the build.
    ``patch-payload`` holds what the patch step needs, ``gate-payload`` the gate,
    its recipe-specific input and the recipe's oracle record if it has a usable
    one, ``preflight-payload`` the entrypoint's pre-flight, the record of what the
    gate checked and the image's labels.
    """
    directory.mkdir(parents=True, exist_ok=True)
    inside = plan.payload_dir.lstrip("/")
    for payload in (PATCH_PAYLOAD, GATE_PAYLOAD, PREFLIGHT_PAYLOAD):
        (directory / payload / inside).mkdir(parents=True, exist_ok=True)
    for file in payload_files(REPO_ROOT):
        destination = directory / file.payload / inside / file.destination
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file.source, destination)
    gate_root = directory / GATE_PAYLOAD / inside
    (gate_root / contract.GATE_INPUT).write_text(json.dumps(plan.gate_input.to_json(), indent=2, sort_keys=True) + "\n")
    if plan.oracle_record is not None:
        shutil.copyfile(plan.oracle_record, gate_root / contract.ORACLE_RECORD)
    preflight_root = directory / PREFLIGHT_PAYLOAD / inside
    kept_failure = plan.geometry_summary if plan.gate_failure_allowed and plan.geometry_verdict != "pass" else None
    checked_mod.write(
        checked_serve(plan.recipe, plan.gate_input, kept_failure), str(preflight_root / contract.PREFLIGHT_CHECKED)
    )
    # The LABEL line's labels, as a file the container can read (the pre-flight's rank fingerprint).
    labels = contract.ImageLabels(dict(plan.labels)).to_json()
    (preflight_root / contract.IMAGE_LABELS).write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n")
    (directory / "Dockerfile").write_text(render(plan))
    # Same bytes, same times, same modes: COPY layers depend only on the inputs.
    for path in sorted(directory.rglob("*"), reverse=True):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.utime(path, (plan.source_date_epoch, plan.source_date_epoch), follow_symlinks=False)
    os.utime(directory, (plan.source_date_epoch, plan.source_date_epoch))
    return directory
