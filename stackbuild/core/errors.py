"""One exception type per failure a user must tell apart.

Every error carries a one-line message that names the file, key, step or
patch at fault, and the exit code the CLI returns for it: an entry of the one
exit-code table, geometry/errors.py ExitCode (several types may share an entry
when they mean one thing to a user: a registry's refused push or pull, bad input).
"""

from __future__ import annotations

from geometry import ExitCode


class StackBuildError(Exception):
    """Base of every error the driver reports without a traceback."""

    exit_code = ExitCode.INTERNAL  # a subclass that names no code of its own is a bug
    # One line on stderr; an error that lists findings (verify) keeps one finding per line.
    lists_findings = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RecipeError(StackBuildError):
    """The recipe (or a file it names) is invalid: ``<file>: <key path>: <why>``."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, path: object, key: str, problem: str):
        self.path = str(path)
        self.key = key
        self.problem = problem
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {problem}")


class LockError(StackBuildError):
    """The base image is not pinned, or the lock file does not match the recipe."""

    exit_code = ExitCode.BAD_INPUT


class OracleRecordError(StackBuildError):
    """recipe.oracle.json, or the record in an image, is unreadable or belongs to another recipe."""

    exit_code = ExitCode.BAD_INPUT


class EngineUnavailable(StackBuildError):
    """No Docker daemon answers at DOCKER_HOST or the default socket."""

    exit_code = ExitCode.NO_ENGINE


class EngineTooOld(StackBuildError):
    """The Docker engine speaks an API older than the oldest supported engine's (stackbuild.core.engines)."""

    exit_code = ExitCode.ENGINE_TOO_OLD


class BuildStepFailed(StackBuildError):
    """A Dockerfile step failed; carries the step and the last lines of its output."""

    exit_code = ExitCode.BUILD_STEP

    def __init__(self, step: str, detail: str, tail: tuple[str, ...] = ()):
        self.step = step
        self.detail = detail
        self.tail = tail
        super().__init__(f"build step failed: {step}: {detail}")


class GeometryGateFailed(StackBuildError):
    """The KV-geometry gate rejected the recipe (on the host, in the image, or at container start)."""

    exit_code = ExitCode.GEOMETRY


class FitNothingPasses(StackBuildError):
    """`fit`: no setting the search tries (block size, drafter KV dtype, prefix caching,
    num_speculative_tokens) passes the geometry gate."""

    exit_code = ExitCode.FIT_NOTHING_PASSES


class ArchitectureMismatch(StackBuildError):
    """The build runs on another machine than the recipe's platform needs (the patch step's
    check, geometry/image_contract.py ARCHITECTURE_MISMATCH_STATUS), or the built image's
    architecture is not the recipe's platform."""

    exit_code = ExitCode.ARCHITECTURE


class RegistryAuthError(StackBuildError):
    """The registry refused our credentials (never retried)."""

    exit_code = ExitCode.REGISTRY_AUTH


class RegistryUnavailable(StackBuildError):
    """The registry could not be reached after retries."""

    exit_code = ExitCode.REGISTRY_UNREACHABLE


class PushError(StackBuildError):
    """The registry rejected a push for a reason that retrying cannot fix."""

    exit_code = ExitCode.TRANSFER_REFUSED


class VerifyError(StackBuildError):
    """A pushed image does not match its recipe (labels, gate); one finding per line under the first."""

    exit_code = ExitCode.IMAGE_MISMATCH
    lists_findings = True


class SignerMissing(StackBuildError):
    """Signing or signature checking was asked for and cosign (or the key, or its passphrase) is not there."""

    exit_code = ExitCode.SIGNER_MISSING


class Unsigned(StackBuildError):
    """No signature refers to the image's digest."""

    exit_code = ExitCode.UNSIGNED


class SignatureInvalid(StackBuildError):
    """Signatures refer to the image, none verifies with the key or identity given."""

    exit_code = ExitCode.SIGNATURE_INVALID


class TagMoved(StackBuildError):
    """The tag given beside the digest names another digest in the registry."""

    exit_code = ExitCode.TAG_MOVED


class AttestationTampered(StackBuildError):
    """A signed attestation is missing, does not verify, names another subject, or differs from the attached one."""

    exit_code = ExitCode.ATTESTATION_TAMPERED


class SbomMismatch(StackBuildError):
    """The attached SBOM is not the one the signed attestation holds."""

    exit_code = ExitCode.SBOM_MISMATCH


class PublicKeyInvalid(StackBuildError):
    """A signature policy's public key file (deploy --signature-key, compose --verify-key) is not a public key."""

    exit_code = ExitCode.PUBLIC_KEY_INVALID


class ServeArgsRejected(StackBuildError):
    """vLLM's own `vllm serve` parser rejected the generated command line (or the container's)."""

    exit_code = ExitCode.SERVE_FLAGS


class PullError(StackBuildError):
    """The registry refused a pull for a reason retrying cannot fix (unknown manifest, denied)."""

    exit_code = ExitCode.TRANSFER_REFUSED


class ImageIncomplete(StackBuildError):
    """The engine holds a pulled image without its platform: its content is incomplete (Docker's containerd
    image store fetches no layer it has unpacked before from an image with the same files compressed otherwise)."""

    exit_code = ExitCode.TRANSFER_REFUSED


class EngineError(StackBuildError):
    """The engine refused a request the driver did not expect to fail."""

    exit_code = ExitCode.NO_ENGINE


class OracleBroken(StackBuildError):
    """vLLM is installed for the oracle interpreter but its serve parser cannot run."""

    exit_code = ExitCode.ORACLE_BROKEN


class ComposeInvalid(StackBuildError):
    """The Docker Compose binary rejected the generated file."""

    exit_code = ExitCode.COMPOSE_INVALID


class ComposeVersionError(StackBuildError):
    """The Docker Compose binary that would check the generated file is older than the file needs
    (or says no version)."""

    exit_code = ExitCode.COMPOSE_VERSION


class OwnerMissing(StackBuildError):
    """A push (or a file that names the pushed image) needs the image owner and none was given."""

    exit_code = ExitCode.BAD_INPUT


class UsageError(StackBuildError):
    """A command was given an argument of the wrong kind (a tag where a digest is needed, ...)."""

    exit_code = ExitCode.BAD_INPUT


class ImageReferenceInvalid(UsageError):
    """Text given as an image reference is not one in the OCI reference grammar (``repo[:tag][@digest]``)."""

    def __init__(self, text: object, reason: str):
        self.text = text
        self.reason = reason
        super().__init__(f"{text!r} is not an image reference ({reason})")


class OutputError(StackBuildError):
    """An output path (-o, --report) is unusable: missing or unwritable directory, a tracked file not ours."""

    exit_code = ExitCode.OUTPUT


class ServerUnreachable(StackBuildError):
    """`qualify`: nothing answers at --url (or --baseline-url), or no generation streamed a token within
    the readiness timeout."""

    exit_code = ExitCode.SERVER_UNREACHABLE


class NotVllmServer(StackBuildError):
    """`qualify`: the server answers but is not a vLLM OpenAI server (no /v1/models, or no vllm: counters
    in /metrics)."""

    exit_code = ExitCode.NOT_VLLM


class ServerAuthRefused(StackBuildError):
    """`qualify`: the server refused the API key (HTTP 401/403; none given, or the wrong one)."""

    exit_code = ExitCode.API_KEY_REFUSED


class ModelNotServed(StackBuildError):
    """`qualify`: --model (or the recipe's served_model_name) is not a model the server lists."""

    exit_code = ExitCode.MODEL_NOT_SERVED


class QualifyResultInvalid(StackBuildError):
    """`qualify --baseline-result FILE`: the file is unreadable, not a qualify result of this schema (the key at
    fault named), or a result of another model than the one measured."""

    exit_code = ExitCode.BAD_INPUT


class QualifyFailed(StackBuildError):
    """`qualify`: the deployment misbehaves: speculation configured but no drafts or near-zero acceptance,
    prefix caching hitting less than predicted, empty, non-UTF-8 or degenerate output; one finding per line. Also
    a server whose max_model_len holds none of qualify's prompts with one output token (one line)."""

    exit_code = ExitCode.QUALIFY_FAILED
    lists_findings = True


class BelowExpectation(StackBuildError):
    """`qualify`: a measured figure is below the recipe's qualify.min_* expectation; one finding per line."""

    exit_code = ExitCode.BELOW_EXPECTATION
    lists_findings = True


class ServedKvCacheDiffers(StackBuildError):
    """`qualify`: the server allocated another KV cache than the gate predicts for the recipe (num_gpu_blocks,
    block_size, group block sizes, KV cache tokens); one difference per line, both numbers named."""

    exit_code = ExitCode.KV_CACHE_DIFFERS
    lists_findings = True


class CapacityDiffers(StackBuildError):
    """`qualify --capacity`: the requests the server ran together without a preemption are not the gate's
    prediction for the same requests, length and pool; one difference per line, both numbers named."""

    exit_code = ExitCode.CAPACITY_DIFFERS
    lists_findings = True


class InternalError(StackBuildError):
    """An exception the driver did not expect: a bug, reported as one line asking for a report."""

    exit_code = ExitCode.INTERNAL


class ComposeOverrideError(StackBuildError):
    """A command-line override of `compose` (--digest, --gpus, --port, --models-dir) is unusable."""

    exit_code = ExitCode.BAD_INPUT


class PinnedTagTaken(StackBuildError):
    """A pinned tag already names another image in the registry; pinned tags never move without --force."""

    exit_code = ExitCode.PINNED_TAG_TAKEN


class ManifestInvalid(StackBuildError):
    """A generated Kubernetes manifest fails the Kubernetes schemas or the LeaderWorkerSet schema."""

    exit_code = ExitCode.MANIFEST_INVALID


class DeployOptionError(StackBuildError):
    """A command-line option of `deploy` (--models-pvc, --models-host-path, --ifname, ...) is unusable."""

    exit_code = ExitCode.BAD_INPUT


class MountedConfigUnusable(StackBuildError):
    """Pre-flight: a config.json the serve argv points at is missing, unreadable or not a JSON object."""

    exit_code = ExitCode.MOUNTED_FILE


class MountedCheckpointMismatch(StackBuildError):
    """Pre-flight: the mounted checkpoints are whole but not the recipe's (revision, quantization, precision)
    or do not fit each other or the argv (drafter wiring)."""

    exit_code = ExitCode.CHECKPOINT_MISMATCH


class PreflightUnchecked(StackBuildError):
    """Pre-flight: the geometry cannot be checked (not modelled, simulator vs vLLM disagree, no vLLM)."""

    exit_code = ExitCode.UNCHECKED


# The error each of the pre-flight's exit codes stands for on the host (build.py preflight).
PREFLIGHT_ERRORS = {
    cls.exit_code: cls
    for cls in (
        GeometryGateFailed,
        ServeArgsRejected,
        MountedConfigUnusable,
        PreflightUnchecked,
        MountedCheckpointMismatch,
    )
}
