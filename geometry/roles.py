"""The closed sets the geometry's stages and the host share: which model a layer, a config or a
checkpoint is (``Role``) and which vLLM the geometry is planned for (``Behaviour``).

Each member is its string (a ``str`` subclass): JSON documents, reports and messages hold the
same text a plain string would give."""

from __future__ import annotations

import enum


class _Text(str, enum.Enum):
    """A member formats as its value (``str()``, f-strings, ``json``)."""

    def __str__(self) -> str:
        return self.value


class Role(_Text):
    """Which model: the served target or the DFlash drafter that proposes its tokens."""

    TARGET = "target"
    DRAFTER = "drafter"


class Behaviour(_Text):
    """The vLLM the geometry is planned for: stock vLLM, or the overlay's patched tree."""

    STOCK = "stock"
    OVERLAY = "overlay"

    @classmethod
    def of_stock_flag(cls, stock: bool) -> Behaviour:
        """What a command's ``--stock`` flag selects: stock vLLM with it, else the overlay."""
        return cls.STOCK if stock else cls.OVERLAY
