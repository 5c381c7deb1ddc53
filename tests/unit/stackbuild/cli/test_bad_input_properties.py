"""Property: whatever is broken in a recipe or its configs, build.py refuses it in one line or accepts it.

Hypothesis mutates the default recipe and its two configs (values of other types, out-of-range
and non-finite numbers, paths, deletions, damaged files) and runs `geometry` and
`build --dry-run` on each copy. Never a traceback, never the internal-error code, the exit
code in the documented set, exactly one `error:` line on a refusal, nothing written, and the
dry run's code the build's: the gate's where `geometry` gives one.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from bad_input_helpers import DEFAULT_OUTPUT_DIRS, INPUT_EXIT_CODES, INTERNAL_ERROR, invoke, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_copies import DEFAULT_RECIPE_DIR, TEST_DIGEST, copy_recipe

from geometry.vllm_versions import DEFAULT_VERSION

RECIPE = yaml.safe_load((DEFAULT_RECIPE_DIR / "recipe.yaml").read_text())
CONFIGS = {
    which: json.loads((DEFAULT_RECIPE_DIR / "configs" / f"{which}.config.json").read_text())
    for which in ("target", "drafter")
}
# An owner for the dry run: no notice of the stand-in one on stderr, only a refusal.
COMMANDS = (["geometry"], ["build", "--dry-run", "--owner", "acme"])
# geometry and build --dry-run write nothing, so a refusal and an acceptance alike leave every file as it was.
EXIT_CODES = {0} | INPUT_EXIT_CODES


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a document (mappings and lists), the containers themselves included."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, prefix + (i,))
    return out


DOCUMENTS = {"recipe": RECIPE, **CONFIGS}
PATHS = [(doc, path) for doc, data in DOCUMENTS.items() for path in _paths(data)]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2, 3, 7, 8, 16, 1 << 53, (1 << 53) + 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.5, 1.0, 8.0]),
    st.text(max_size=12),
    st.sampled_from(
        [
            "../x",
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "",
            " ",
            "..",
            ".",
            "{owner}",
            "{date}",
            "NUL\x00",
            "Upper/Case",
            "with space",
            "configs",
            "configs/target.config.json",
            "sha256:" + "0" * 64,
            "linux/arm64",
            f"vllm-{DEFAULT_VERSION}",
            "--flag value",
            "x" * 300,
        ]
    ),
    st.lists(st.sampled_from([0, "a", None, 1.5, "--x y"]), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-2, 2), max_size=2),
)
mutations = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), values),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
    st.tuples(
        st.just("damage"),
        st.sampled_from(["target", "drafter"]),
        st.sampled_from(["binary", "empty", "directory", "loop", "truncated", "not-object"]),
    ),
)


def _apply(data: dict[str, Any], mutation: tuple) -> None:
    kind, where, value = mutation
    if kind == "damage":
        return
    doc, path = where
    node = data[doc]
    for key in path[:-1]:
        if (
            isinstance(node, dict)
            and key in node
            or isinstance(node, list)
            and isinstance(key, int)
            and key < len(node)
        ):
            node = node[key]
        else:
            return  # an earlier mutation removed or replaced the parent
    last = path[-1]
    if isinstance(node, dict) and (kind == "set" or last in node):
        if kind == "set":
            node[last] = value
        else:
            del node[last]
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        if kind == "set":
            node[last] = value
        else:
            del node[last]


def _damage(config: Path, how: str) -> None:
    if how == "binary":
        config.write_bytes(bytes(range(256)))
    elif how == "empty":
        config.write_bytes(b"")
    elif how == "directory":
        config.unlink()
        config.mkdir()
    elif how == "loop":
        config.unlink()
        config.symlink_to(config.name)
    elif how == "truncated":
        config.write_text(config.read_text()[:200])
    else:
        config.write_text("[1, 2, 3]")


def _write(root: Path, mutated: list[tuple]) -> Path:
    data = json.loads(json.dumps({"recipe": RECIPE, **CONFIGS}))  # a deep copy
    data["recipe"].setdefault("base", {})["digest"] = TEST_DIGEST  # no engine: the base is pinned
    for mutation in mutated:
        _apply(data, mutation)
    recipe = copy_recipe(root, raw="")
    # yaml.safe_dump writes .nan / .inf and any key type the mutations produced.
    recipe.write_text(yaml.safe_dump(data["recipe"], sort_keys=False, allow_unicode=True))
    for which in ("target", "drafter"):
        config = recipe.parent / "configs" / f"{which}.config.json"
        # json.dumps writes NaN / Infinity for non-finite floats: the loader must refuse them.
        config.write_text(json.dumps(data[which], indent=1))
    damaged = set()
    for kind, which, how in mutated:
        if kind == "damage" and which not in damaged:  # one damage per file
            damaged.add(which)
            _damage(recipe.parent / "configs" / f"{which}.config.json", how)
    return recipe


@settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutations, min_size=1, max_size=3))
def test_broken_recipes_and_configs_are_refused_cleanly(mutated):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recipe = _write(root, mutated)
        before = snapshot(root, *DEFAULT_OUTPUT_DIRS)
        codes = []
        for command in COMMANDS:
            result = invoke([*command, "--recipe", recipe])
            codes.append(result.exit_code)
            escaped = result.exception if not isinstance(result.exception, (SystemExit, type(None))) else None
            assert escaped is None, f"{command}: {escaped!r}"
            assert "Traceback" not in result.stderr + result.stdout
            assert result.exit_code != INTERNAL_ERROR, result.stderr
            assert result.exit_code in EXIT_CODES, (result.exit_code, result.stderr)
            if result.exit_code:
                errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
                assert len(errors) == 1 and result.stderr.startswith("error: "), result.stderr
                assert len(result.stderr.splitlines()) == 1, result.stderr
            assert snapshot(root, *DEFAULT_OUTPUT_DIRS) == before
        # The dry run exits as the build would: with the gate's verdict (0 or 5, as `geometry`), unless it
        # refuses first what the build refuses before its gate step (2: the image's name, tags, labels);
        # and where `geometry` refuses the recipe, so does it.
        geometry, dry_run = codes
        assert dry_run == geometry or (dry_run == 2 and geometry in (0, 5)), (geometry, dry_run, result.stderr)
        if dry_run == 5:
            assert result.stderr.rstrip("\n").endswith(
                "; the build would stop at its gate step with this, exit 5 (dry run: nothing built)"
            ), result.stderr
