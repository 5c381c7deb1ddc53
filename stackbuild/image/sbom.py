"""A CycloneDX SBOM of a built image: its Python packages and the files the overlay changed.

What goes in is read from the image itself: the image's own ``python3``
lists every distribution its ``sys.path`` holds (their dist-info, through
``importlib.metadata``) and hashes each file the overlay manifest
(``<payload>/manifest.json``) says the patch series changed, as it is in
the image. The document is built with cyclonedx-python-lib (spec 1.6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cyclonedx.model import HashAlgorithm, HashType
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from geometry import contract
from stackbuild.core.errors import BuildStepFailed
from stackbuild.image.engine_api import ContainerEngine

SBOM_MEDIA_TYPE = "application/vnd.cyclonedx+json"

# Run by the image's python3 with the payload root on PYTHONPATH: argv[1] is the overlay
# manifest, read as overlay/manifest.py's OverlayManifest. Prints one JSON object.
INVENTORY_SCRIPT = r"""
import hashlib, importlib.metadata, json, os, sys
from overlay.manifest import OverlayManifest
with open(sys.argv[1], encoding="utf-8") as handle:
    manifest = OverlayManifest.from_json(json.load(handle), sys.argv[1])
distributions = {}
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    if name and name.lower() not in distributions:
        distributions[name.lower()] = {"name": name, "version": dist.version}
files = []
for entry in manifest.files:
    path = os.path.join(os.path.dirname(manifest.package_dir.rstrip("/")), entry.file)
    with open(path, "rb") as handle:
        files.append({"path": path, "sha256": hashlib.sha256(handle.read()).hexdigest()})
print(json.dumps({"python": sys.version.split()[0], "series_sha256": manifest.series_sha256,
                  "distributions": sorted(distributions.values(), key=lambda d: d["name"].lower()),
                  "overlay_files": files}))
"""


@dataclass(frozen=True)
class Inventory:
    python: str
    series_sha256: str
    distributions: tuple[tuple[str, str], ...]  # (name, version)
    overlay_files: tuple[tuple[str, str], ...]  # (path in the image, sha256)


def read_inventory(engine: ContainerEngine, image: str, payload_dir: str, platform: str) -> Inventory:
    """Ask the image's python3 for its distributions and the overlay's changed files."""
    code, out, err = engine.run(
        image,
        ["env"],
        [
            f"PYTHONPATH={payload_dir}",
            "python3",
            "-c",
            INVENTORY_SCRIPT,
            contract.payload_path(contract.OVERLAY_MANIFEST, payload_dir),
        ],
        platform=platform,
    )
    if code != 0:
        tail = " | ".join(line for line in err.splitlines() if line.strip())[-400:]
        raise BuildStepFailed("sbom", f"listing the image's Python packages failed (exit code {code}): {tail}")
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        raise BuildStepFailed("sbom", "listing the image's Python packages printed no JSON") from None
    return Inventory(
        python=data["python"],
        series_sha256=data["series_sha256"],
        distributions=tuple((d["name"], d["version"]) for d in data["distributions"]),
        overlay_files=tuple((f["path"], f["sha256"]) for f in data["overlay_files"]),
    )


def make_sbom(inventory: Inventory, repository: str, image_digest: str) -> bytes:
    """The CycloneDX 1.6 JSON document describing the image ``repository@image_digest``."""
    bom = Bom()
    root = Component(
        type=ComponentType.CONTAINER, name=repository, version=image_digest, bom_ref=f"image:{image_digest}"
    )
    bom.metadata.component = root
    parts = []
    for name, version in inventory.distributions:
        parts.append(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=version,
                purl=PackageURL(type="pypi", name=name, version=version),
                bom_ref=f"pypi:{name}@{version}",
            )
        )
    for path, sha256 in inventory.overlay_files:
        parts.append(
            Component(
                type=ComponentType.FILE,
                name=path,
                bom_ref=f"file:{path}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)],
            )
        )
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(root, parts)
    return JsonV1Dot6(bom).output_as_string(indent=None).encode()


def overlay_files_of(sbom: dict) -> dict[str, str]:
    """{path: sha256} of the file components of a CycloneDX JSON SBOM."""
    out = {}
    for component in sbom.get("components") or []:
        if component.get("type") == "file":
            hashes = {h.get("alg"): h.get("content") for h in component.get("hashes") or []}
            out[component.get("name")] = hashes.get("SHA-256")
    return out
