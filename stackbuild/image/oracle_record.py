"""The recipe's oracle record, ``recipe.oracle.json`` next to the recipe; a multi-platform recipe
keeps one per platform, ``recipe.oracle.linux-amd64.json`` and so on (a record holds one vLLM tree).

The in-image gate checks the simulator against vLLM's own planning. Done for
real, that is one cold import of vLLM and torch, most of a cold build. The
gate writes what vLLM answered into the image (geometry/oracle/record.py: the answer
keyed by the gate input, the geometry code, Python, the vLLM tree's bytes and
the imported packages' versions); ``build.py record`` copies it from a built
image to the recipe, and later builds ship it to the gate, which uses it only
when every part of the key is that image's, and otherwise imports vLLM again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from geometry import GeometryInputs, contract
from geometry import oracle_record as record_mod
from stackbuild.core.atomic import replace_file
from stackbuild.core.errors import OracleRecordError
from stackbuild.core.recipe import REPO_ROOT, Recipe
from stackbuild.image.engine_api import ContainerEngine

RECORD_NAME = "recipe.oracle.json"


@dataclass(frozen=True)
class RecordChoice:
    """Whether a build ships the recipe's record to the gate, and why (one line for the log)."""

    path: Optional[Path]
    note: str


NOT_READ = RecordChoice(None, "the oracle record is not read: nothing is built")


def record_path(recipe: Recipe) -> Path:
    """Where the record of the platform ``recipe`` builds lies: each platform's image has a vLLM tree of its
    own, so a multi-platform recipe keeps a record per platform (one file would hold the last one built)."""
    if len(recipe.platforms) == 1:
        return recipe.path.with_name(RECORD_NAME)
    return recipe.path.with_name(f"recipe.oracle.{recipe.platform.replace('/', '-')}.json")


def _check_belongs(record: Mapping, gate_input: GeometryInputs, where: str) -> Optional[str]:
    """Why ``record`` was not made for this gate input and this geometry code (None: it was);
    the record's key is over the gate input's JSON, gate-input.json as the build writes it."""
    part = record_mod.foreign_part(record, gate_input.to_json(), str(REPO_ROOT))
    if part == "inputs":
        return f"{where} is for another gate input (recipe or model configs changed since it was recorded)"
    if part == "geometry_code":
        return f"{where} was made by other geometry code"
    return None


def choose(recipe: Recipe, gate_input: GeometryInputs) -> RecordChoice:
    path = record_path(recipe)
    if not path.is_file():
        return RecordChoice(
            None,
            f"no {path.name}: the gate imports vLLM to check the simulator "
            "(`build.py record` keeps its answer for later cold builds)",
        )
    try:
        record = record_mod.load(str(path))
    except record_mod.RecordError as exc:
        raise OracleRecordError(str(exc)) from None
    why = _check_belongs(record, gate_input, str(path))
    if why:
        return RecordChoice(None, f"{why}: not used, the gate imports vLLM")
    return RecordChoice(
        path,
        f"{path}: the gate uses vLLM's recorded answer if the image's vLLM tree "
        "and packages are the recorded ones, else imports vLLM",
    )


def save_from_image(
    engine: ContainerEngine, image: str, recipe: Recipe, gate_input: GeometryInputs, payload_dir: str
) -> tuple[Path, dict]:
    """Read the record the gate left in ``image``, check it and write it next to the recipe (atomically)."""
    path = contract.payload_path(contract.ORACLE_RECORD, payload_dir)
    where = f"{image}:{path}"
    raw = engine.read_file(image, path)
    if raw is None:
        raise OracleRecordError(f"{where}: no oracle record in the image (built before records existed?)")
    try:
        record = record_mod.parse(raw, where)
    except record_mod.RecordError as exc:
        raise OracleRecordError(str(exc)) from None
    why = _check_belongs(record, gate_input, where)
    if why:
        raise OracleRecordError(f"{why}; rebuild the image from {recipe.path} first")
    path = record_path(recipe)
    try:
        replace_file(path, lambda tmp: record_mod.write(record, str(tmp)))
    except OSError as exc:
        raise OracleRecordError(f"{path}: cannot write the oracle record: {exc.strerror or exc}") from None
    return path, record
