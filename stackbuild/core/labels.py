"""The label keys the build sets on an image and compose/k8s set on what serves it: each spelled here once.

The image labels are written by :func:`stackbuild.image.plan.make_plan`;
verify compares them all with the recipe's, and the pipeline, attest and
provenance read single keys back by these names. A recipe's own
``image.labels`` may use neither namespace (:data:`RESERVED_PREFIXES`).
"""

LABEL_NS = "io.github.glm53"
OCI_NS = "org.opencontainers.image"
RESERVED_PREFIXES = ("org.opencontainers.", f"{LABEL_NS}.")

# OCI image annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
OCI_TITLE = f"{OCI_NS}.title"
OCI_DESCRIPTION = f"{OCI_NS}.description"
OCI_SOURCE = f"{OCI_NS}.source"
OCI_REVISION = f"{OCI_NS}.revision"
OCI_VERSION = f"{OCI_NS}.version"
OCI_CREATED = f"{OCI_NS}.created"
OCI_BASE_NAME = f"{OCI_NS}.base.name"
OCI_BASE_DIGEST = f"{OCI_NS}.base.digest"

# The project's own, on the image.
RECIPE_NAME = f"{LABEL_NS}.recipe.name"
RECIPE_SHA256 = f"{LABEL_NS}.recipe.sha256"
PLATFORM = f"{LABEL_NS}.platform"
HARDWARE_GPU = f"{LABEL_NS}.hardware.gpu"
HARDWARE_CAPABILITY_FAMILY = f"{LABEL_NS}.hardware.capability-family"
VLLM_VERSION = f"{LABEL_NS}.vllm.version"
OVERLAY_SERIES = f"{LABEL_NS}.overlay.series"
OVERLAY_SERIES_SHA256 = f"{LABEL_NS}.overlay.series.sha256"
GEOMETRY_VERDICT = f"{LABEL_NS}.geometry.verdict"
DRAFTER_ID = f"{LABEL_NS}.drafter.id"
DRAFTER_LICENSE = f"{LABEL_NS}.drafter.license"
TARGET_ID = f"{LABEL_NS}.target.id"

# Set by compose / k8s on the service (not on the image).
DRAFTER_WEIGHTS = f"{LABEL_NS}.drafter.weights"
IMAGE_PINNED = f"{LABEL_NS}.image.pinned"
NODE_ROLE = f"{LABEL_NS}.node.role"
# compose --signature-key: what `build.py up` checked before starting the container ("unverified" otherwise).
SIGNATURE_VERIFIED = f"{LABEL_NS}.signature.verified"
