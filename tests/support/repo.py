"""The checkout the tests run in: its root, the one place every test takes it from."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
