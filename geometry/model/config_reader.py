"""Reading a ``config.json`` with the key at fault named: the checks every
architecture's config entry and the drafter's use (stdlib only)."""

from __future__ import annotations

from typing import Any, Mapping

from geometry.errors import BadInput

# Larger than any real layer count, head count or head size by orders of magnitude,
# small enough that the simulator's per-layer work stays bounded.
MAX_COUNT = 1 << 16
# Token counts (context lengths, windows): 2**40 tokens is far beyond any model.
MAX_TOKENS = 1 << 40
NO_ATTENTION = (
    "the target needs an attention layer, whose KV page the drafter's pages must fit "
    "(a target without one is not modelled)"
)


class ConfigInvalid(BadInput):
    """A config the simulator would misread: ``<which> config: <key>: <why>``."""

    def __init__(self, which: str, key: str, problem: str):
        self.which = which
        self.key = key
        self.problem = problem
        super().__init__(f"{which} config: {key}: {problem}" if key else f"{which} config: {problem}")


def describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    return type(value).__name__


class ConfigReader:
    def __init__(self, which: str, cfg: Mapping[str, Any], prefix: str = ""):
        self.which, self.cfg, self.prefix = which, cfg, prefix

    def fail(self, key: str, problem: str) -> ConfigInvalid:
        return ConfigInvalid(self.which, self.prefix + key, problem)

    def integer(
        self, key: str, *, required: bool = True, minimum: int = 1, maximum: int = MAX_COUNT, allow_null: bool = False
    ) -> int | None:
        """``allow_null``: null reads as absent (where vLLM and the simulator treat it so)."""
        if key not in self.cfg or (self.cfg[key] is None and allow_null):
            if required:
                raise self.fail(key, "required field is missing")
            return None
        value = self.cfg[key]
        if type(value) is not int:
            raise self.fail(key, f"expected an integer, got {describe(value)}")
        if value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:,}, got {value:,}")
        return value

    def boolean(self, key: str) -> bool:
        """An optional true/false (absent or null: false)."""
        value = self.cfg.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {describe(value)}")
        return value

    def int_list(self, key: str, *, minimum: int, maximum: int) -> list[int]:
        value = self.cfg.get(key)
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list of integers, got {describe(value)}")
        for i, item in enumerate(value):
            if type(item) is not int or not minimum <= item <= maximum:
                raise self.fail(f"{key}[{i}]", f"expected an integer in {minimum}..{maximum}, got {describe(item)}")
        return value

    def layer_types(self, n_layers: int, allowed: tuple[str, ...]) -> None:
        if self.cfg.get("layer_types") is None:
            return
        value = self.cfg["layer_types"]
        if not isinstance(value, list):
            raise self.fail("layer_types", f"expected a list, got {describe(value)}")
        if len(value) != n_layers:
            raise self.fail("layer_types", f"has {len(value)} entries but num_hidden_layers is {n_layers}")
        for i, item in enumerate(value):
            if item not in allowed:
                raise self.fail(f"layer_types[{i}]", f"must be one of: {', '.join(allowed)}; got {describe(item)}")

    def mapping(self, key: str) -> "ConfigReader":
        value = self.cfg.get(key)
        if not isinstance(value, Mapping):
            raise self.fail(
                key, f"expected an object, got {describe(value)}" if key in self.cfg else "required field is missing"
            )
        return ConfigReader(self.which, value, f"{self.prefix}{key}.")


def require_attention(r: ConfigReader, attention_type: str, n_layers: int, interval: int) -> None:
    """At least one target layer is attention, listed in ``layer_types`` or by the default
    pattern (every ``interval``-th layer)."""
    if r.cfg.get("layer_types") is not None:
        if attention_type not in r.cfg["layer_types"]:
            raise r.fail("layer_types", f"has no {attention_type} layer: {NO_ATTENTION}")
    elif n_layers < interval:
        key = "full_attention_interval" if "full_attention_interval" in r.cfg else "num_hidden_layers"
        raise r.fail(key, f"with {n_layers} layers and every {interval}th one attention, none is: {NO_ATTENTION}")
