"""Where the build report is kept, and reading it back (the compose and Kubernetes
generators take the pushed digest and owner from it; the build writes it)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from stackbuild.core.recipe import REPO_ROOT

DEFAULT_REPORT = REPO_ROOT / "out" / "build-report.json"
REPORT_SCHEMA = 1


def read_report(path: Optional[Path] = None) -> Optional[dict]:
    path = Path(path) if path else DEFAULT_REPORT
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
