"""What every serving file is written for: :class:`ServeTarget`, built once from the recipe and the
command line's options (:func:`serve_target`) and given to each writer (compose.py, multinode.py, k8s.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stackbuild.core.engines import OLDEST
from stackbuild.core.recipe import Recipe
from stackbuild.serve.image_pin import ImagePin, resolve_image
from stackbuild.serve.signature_trust import SignatureTrust, require_pinned


@dataclass(frozen=True)
class ServeTarget:
    """The recipe, the image its files name, and this machine's values (None: the recipe's own)."""

    recipe: Recipe
    image: ImagePin
    models_dir: Optional[str] = None  # --models-dir: the host directory mounted at the recipe's mount point
    port: Optional[int] = None  # --port: the host port the API is published on
    gpus: Optional[str] = None  # --gpus: the GPU ids to reserve, as given
    engine_api: Optional[str] = None  # --engine-api: the Docker Engine API version the files are written for
    signature: Optional[SignatureTrust] = None  # --signature-key / --signature-identity: `build.py up` checks it

    @property
    def machine_values(self) -> tuple[str, ...]:
        """The flags given that write this machine's values into a file."""
        given = (
            ("--models-dir", self.models_dir),
            ("--port", self.port),
            ("--gpus", self.gpus),
            ("--engine-api", self.engine_api),
        )
        return tuple(flag for flag, value in given if value is not None)

    @property
    def written_for_api(self) -> str:
        """The engine API the files are written for: --engine-api's, else the oldest supported engine's."""
        return self.engine_api or OLDEST.api


def serve_target(
    recipe: Recipe,
    *,
    owner: Optional[str] = None,
    repository: Optional[str] = None,
    digest: Optional[str] = None,
    report_path: Optional[Path] = None,
    models_dir: Optional[str] = None,
    port: Optional[int] = None,
    gpus: Optional[str] = None,
    image: Optional[ImagePin] = None,
    engine_api: Optional[str] = None,
    signature: Optional[SignatureTrust] = None,
) -> ServeTarget:
    """The recipe's target: ``image`` when given, else the image resolved from the owner, repository,
    digest and build report (image_pin.py); the machine's values as given; ``signature``: the image must be
    pinned by digest and named in full (signature_trust.require_pinned)."""
    image = image or resolve_image(recipe, owner=owner, repository=repository, digest=digest, report_path=report_path)
    if signature is not None:
        require_pinned(image, "compose")
    return ServeTarget(
        recipe, image, models_dir=models_dir, port=port, gpus=gpus, engine_api=engine_api, signature=signature
    )
