"""What `deploy --target k8s` is told besides the image: the models volume, the network interface, the
namespace, the Secrets, the signature policy, the output directory (:class:`DeployOptions`, checked when made), and the
Kubernetes names derived from the recipe."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stackbuild.core.errors import DeployOptionError, OutputError
from stackbuild.core.recipe import Recipe
from stackbuild.serve.signature_policy import SignaturePolicy

DEFAULT_IFNAME = "eth0"  # a pod's own interface
IFNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,14}(,[A-Za-z0-9][A-Za-z0-9_.:@-]{0,14})*$")
# Names the controllers derive from ours must stay DNS labels (63): the LWS StatefulSets' revision
# label <name>-<group>-<10-character hash> and our <name>-api.
MAX_NAME = 48
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A Secret's name (a DNS subdomain).
SECRET_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
API_KEY_SECRET_SUFFIX = "-api-key"


@dataclass(frozen=True)
class ModelVolume:
    """Where the models directory comes from: a node's host path or a PersistentVolumeClaim."""

    host_path: Optional[str] = None
    claim: Optional[str] = None

    def volume(self) -> dict:
        if self.claim:
            return {"name": "models", "persistentVolumeClaim": {"claimName": self.claim, "readOnly": True}}
        return {"name": "models", "hostPath": {"path": self.host_path, "type": "Directory"}}


def model_volume(recipe: Recipe, host_path: Optional[str], claim: Optional[str]) -> ModelVolume:
    if host_path and claim:
        raise DeployOptionError("--models-host-path and --models-pvc: give one, not both")
    if claim is not None:
        if not NAME_RE.match(claim) or len(claim) > 253:
            raise DeployOptionError(f"--models-pvc: {claim!r} is not a Kubernetes object name")
        return ModelVolume(claim=claim)
    path = host_path or recipe.model_mount_point
    if not path.startswith("/"):
        raise DeployOptionError(f"--models-host-path: must be an absolute path on the node, got {path!r}")
    return ModelVolume(host_path=path)


def object_name(recipe: Recipe) -> str:
    """The recipe's name as a Kubernetes object name (DNS label: lowercase, digits, '-'; leaves room for
    the suffixes the controllers and the Service add)."""
    name = re.sub(r"[^a-z0-9-]+", "-", recipe.name.lower()).strip("-")[:MAX_NAME]
    return name.rstrip("-") or "glm53"


def default_api_key_secret(recipe: Recipe) -> str:
    """The Secret the API server's key is read from when --api-key-secret is not given."""
    return object_name(recipe) + API_KEY_SECRET_SUFFIX


def check_secret_name(name: str, flag: str) -> str:
    if not SECRET_NAME_RE.match(name) or len(name) > 253:
        raise DeployOptionError(f"{flag}: {name!r} is not a Kubernetes Secret name")
    return name


@dataclass(frozen=True)
class DeployOptions:
    """The deploy command's options other than the image's (made by :func:`deploy_options`)."""

    output_dir: Optional[Path] = None
    models_host_path: Optional[str] = None
    models_pvc: Optional[str] = None
    ifname: str = DEFAULT_IFNAME
    namespace: Optional[str] = None
    api_key_secret: Optional[str] = None
    image_pull_secrets: tuple[str, ...] = ()
    signature: Optional[SignaturePolicy] = None  # --signature-key / --signature-identity: the admission policy

    def volume(self, recipe: Recipe) -> ModelVolume:
        """The models volume (--models-host-path or --models-pvc), checked."""
        return model_volume(recipe, self.models_host_path, self.models_pvc)


def deploy_options(
    *,
    output_dir: Optional[Path] = None,
    models_host_path: Optional[str] = None,
    models_pvc: Optional[str] = None,
    ifname: str = DEFAULT_IFNAME,
    namespace: Optional[str] = None,
    api_key_secret: Optional[str] = None,
    image_pull_secrets: tuple[str, ...] = (),
    signature: Optional[SignaturePolicy] = None,
) -> DeployOptions:
    """The options, refused before the image is resolved when an interface, namespace or Secret name is
    not one, or -o is no directory."""
    if not IFNAME_RE.match(ifname):
        raise DeployOptionError(f"--ifname: {ifname!r} is not a network interface name (or a comma-separated list)")
    if namespace is not None and (not NAME_RE.match(namespace) or len(namespace) > 63):
        raise DeployOptionError(f"--namespace: {namespace!r} is not a Kubernetes namespace name")
    if api_key_secret is not None:
        check_secret_name(api_key_secret, "--api-key-secret")
    for name in image_pull_secrets:
        check_secret_name(name, "--image-pull-secret")
    if output_dir is not None and not Path(output_dir).is_dir():
        raise OutputError(f"-o {output_dir}: not an existing directory")
    return DeployOptions(
        output_dir,
        models_host_path,
        models_pvc,
        ifname,
        namespace,
        api_key_secret,
        tuple(image_pull_secrets),
        signature,
    )
