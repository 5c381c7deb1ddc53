"""One exception type per failure a user must tell apart.

Every error carries a one-line message that names the file, key, step or
patch at fault, and the exit code the CLI returns for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from geometry.preflight import outcome as _preflight


class StackBuildError(Exception):
    """Base of every error the driver reports without a traceback."""

    exit_code = 1
    # One line on stderr; an error that lists findings (verify) keeps one finding per line.
    lists_findings = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RecipeError(StackBuildError):
    """The recipe (or a file it names) is invalid: ``<file>: <key path>: <why>``."""

    exit_code = 2

    def __init__(self, path: object, key: str, problem: str):
        self.path = str(path)
        self.key = key
        self.problem = problem
        where = f"{self.path}: {key}" if key else self.path
        super().__init__(f"{where}: {problem}")


class LockError(StackBuildError):
    """The base image is not pinned, or the lock file does not match the recipe."""

    exit_code = 2


class OracleRecordError(StackBuildError):
    """recipe.oracle.json, or the record in an image, is unreadable or belongs to another recipe."""

    exit_code = 2


class EngineUnavailable(StackBuildError):
    """No Docker daemon answers at DOCKER_HOST or the default socket."""

    exit_code = 3


class BuildStepFailed(StackBuildError):
    """A Dockerfile step failed; carries the step and the last lines of its output."""

    exit_code = 4

    def __init__(self, step: str, detail: str, tail: tuple[str, ...] = ()):
        self.step = step
        self.detail = detail
        self.tail = tail
        super().__init__(f"build step failed: {step}: {detail}")


class GeometryGateFailed(StackBuildError):
    """The KV-geometry gate rejected the recipe (on the host, in the image, or at container start)."""

    exit_code = _preflight.EXIT_GEOMETRY  # 5: the image's pre-flight exits with it too


class FitNothingPasses(StackBuildError):
    """`fit`: no setting the search tries (block size, drafter KV dtype, prefix caching,
    num_speculative_tokens) passes the geometry gate."""

    exit_code = 19


class ArchitectureMismatch(StackBuildError):
    """The build runs on another machine than the recipe's platform needs (the patch step's
    check, geometry/image_contract.py ARCHITECTURE_MISMATCH_STATUS), or the built image's
    architecture is not the recipe's platform."""

    exit_code = 6


class RegistryAuthError(StackBuildError):
    """The registry refused our credentials (never retried)."""

    exit_code = 7


class RegistryUnavailable(StackBuildError):
    """The registry could not be reached after retries."""

    exit_code = 8


class PushError(StackBuildError):
    """The registry rejected a push for a reason that retrying cannot fix."""

    exit_code = 9


class VerifyError(StackBuildError):
    """A pushed image does not match its recipe (labels, gate); one finding per line under the first."""

    exit_code = 10
    lists_findings = True


class ServeArgsRejected(StackBuildError):
    """vLLM's own `vllm serve` parser rejected the generated command line (or the container's)."""

    exit_code = _preflight.EXIT_SERVE_FLAGS  # 11: the image's pre-flight exits with it too


class PullError(StackBuildError):
    """The registry refused a pull for a reason retrying cannot fix (unknown manifest, denied)."""

    exit_code = 9


class EngineError(StackBuildError):
    """The engine refused a request the driver did not expect to fail."""

    exit_code = 3


class OracleBroken(StackBuildError):
    """vLLM is installed for the oracle interpreter but its serve parser cannot run."""

    exit_code = 12


class ComposeInvalid(StackBuildError):
    """The Docker Compose binary rejected the generated file."""

    exit_code = 13


class ComposeVersionError(StackBuildError):
    """The Docker Compose binary that would check the generated file is older than the file needs
    (or says no version)."""

    exit_code = 29


class OwnerMissing(StackBuildError):
    """A push (or a file that names the pushed image) needs the image owner and none was given."""

    exit_code = 2


class UsageError(StackBuildError):
    """A command was given an argument of the wrong kind (a tag where a digest is needed, ...)."""

    exit_code = 2


class ImageReferenceInvalid(UsageError):
    """Text given as an image reference is not one in the OCI reference grammar (``repo[:tag][@digest]``)."""

    def __init__(self, text: object, reason: str):
        self.text = text
        self.reason = reason
        super().__init__(f"{text!r} is not an image reference ({reason})")


class OutputError(StackBuildError):
    """An output path (-o, --report) is unusable: missing or unwritable directory, a tracked file not ours."""

    exit_code = 15


class ServerUnreachable(StackBuildError):
    """`qualify`: nothing answers at --url (or --baseline-url), or no generation streamed a token within
    the readiness timeout."""

    exit_code = 20


class NotVllmServer(StackBuildError):
    """`qualify`: the server answers but is not a vLLM OpenAI server (no /v1/models, or no vllm: counters
    in /metrics)."""

    exit_code = 21


class ServerAuthRefused(StackBuildError):
    """`qualify`: the server refused the API key (HTTP 401/403; none given, or the wrong one)."""

    exit_code = 22


class ModelNotServed(StackBuildError):
    """`qualify`: --model (or the recipe's served_model_name) is not a model the server lists."""

    exit_code = 23


class QualifyFailed(StackBuildError):
    """`qualify`: the deployment misbehaves: speculation configured but no drafts or near-zero acceptance,
    prefix caching hitting less than predicted, empty, non-UTF-8 or degenerate output; one finding per line."""

    exit_code = 24
    lists_findings = True


class BelowExpectation(StackBuildError):
    """`qualify`: a measured figure is below the recipe's qualify.min_* expectation; one finding per line."""

    exit_code = 25
    lists_findings = True


class ServedKvCacheDiffers(StackBuildError):
    """`qualify`: the server allocated another KV cache than the gate predicts for the recipe (num_gpu_blocks,
    block_size, group block sizes, KV cache tokens); one difference per line, both numbers named."""

    exit_code = 30
    lists_findings = True


class InternalError(StackBuildError):
    """An exception the driver did not expect: a bug, reported as one line asking for a report."""

    exit_code = 70


class ComposeOverrideError(StackBuildError):
    """A command-line override of `compose` (--digest, --gpus, --port, --models-dir) is unusable."""

    exit_code = 2


class PinnedTagTaken(StackBuildError):
    """A pinned tag already names another image in the registry; pinned tags never move without --force."""

    exit_code = 14


class ManifestInvalid(StackBuildError):
    """A generated Kubernetes manifest fails the Kubernetes schemas or the LeaderWorkerSet schema."""

    exit_code = 18


class DeployOptionError(StackBuildError):
    """A command-line option of `deploy` (--models-pvc, --models-host-path, --ifname, ...) is unusable."""

    exit_code = 2


class MountedConfigUnusable(StackBuildError):
    """Pre-flight: a config.json the serve argv points at is missing, unreadable or not a JSON object."""

    exit_code = _preflight.EXIT_CONFIG


class MountedCheckpointMismatch(StackBuildError):
    """Pre-flight: the mounted checkpoints are whole but not the recipe's (revision, quantization, precision)
    or do not fit each other or the argv (drafter wiring)."""

    exit_code = _preflight.EXIT_MISMATCH


class PreflightUnchecked(StackBuildError):
    """Pre-flight: the geometry cannot be checked (not modelled, simulator vs vLLM disagree, no vLLM)."""

    exit_code = _preflight.EXIT_UNCHECKED


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


@dataclass(frozen=True)
class ExitCode:
    """What an exit code means to a user: a few words for `--help`, the whole sentence for docs/cli.md's table."""

    title: str
    meaning: str


# Every exit code the driver (and the image's pre-flight) returns; `build.py --help`, each command's
# help and docs/cli.md (tools/cli_reference.py) read them from here.
EXIT_CODES: dict[int, ExitCode] = {
    2: ExitCode(
        "bad input: the recipe, a file it names, or the command line",
        "the recipe, a config it names, the lock or the oracle record; or the command line: an unknown or "
        "malformed flag, `verify` or `qualify --attach` given a tag instead of a digest or text that is not "
        "an image reference (refused before anything is measured or attached), a push without an image owner",
    ),
    3: ExitCode(
        "no Docker engine",
        "no Docker engine (or the engine refused a request)",
    ),
    4: ExitCode(
        "a build step failed",
        "a build step",
    ),
    5: ExitCode(
        "the geometry gate refuses",
        "the geometry gate (page geometry or capacity)",
    ),
    6: ExitCode(
        "the wrong architecture",
        "the architecture: the build runs on another machine than the recipe's platform needs (the patch step"
        " checks `uname -m` first), or the built image's os/architecture is not the recipe's",
    ),
    7: ExitCode(
        "registry authentication refused",
        "registry authentication",
    ),
    8: ExitCode(
        "registry unreachable",
        "registry unreachable",
    ),
    9: ExitCode(
        "push or pull refused",
        "push or pull refused; `qualify --attach`: the registry has no manifest of that digest",
    ),
    10: ExitCode(
        "the image does not match its recipe",
        "`verify`: the image does not match its recipe",
    ),
    11: ExitCode(
        "vLLM rejects the serve flags",
        "vLLM rejects the serve flags",
    ),
    12: ExitCode(
        "vLLM's serve parser cannot run",
        "vLLM's serve parser cannot run",
    ),
    13: ExitCode(
        "Docker Compose rejects the generated file",
        "Docker Compose rejects the generated file",
    ),
    14: ExitCode(
        "a pinned tag names another image",
        "a pinned tag already names another image in the registry (`--force` re-points it, logged)",
    ),
    15: ExitCode(
        "an output path is unusable",
        "an output path (`-o`): its directory is missing or unwritable, it is a directory, or it is a file "
        "git tracks that is not this command's output for this recipe",
    ),
    16: ExitCode(
        "a mounted config or checkpoint file is unusable",
        "pre-flight: a model config.json the serve command points at is missing, unreadable, not a JSON "
        "object, or one the simulator would misread (the key named); or a checkpoint file is: a shard "
        "missing, truncated or with a header that does not parse or does not describe its data (a tensor's "
        "dtype x shape not the bytes of its data_offsets; offsets overlapping, leaving a gap or past the "
        "file: what the safetensors library refuses), a tensor the index names absent, no tokenizer or chat "
        "template for a served parser (the file named)",
    ),
    17: ExitCode(
        "the geometry cannot be checked",
        "pre-flight: the geometry cannot be checked (a setup the simulator does not model, the simulator and "
        "the installed vLLM disagree, no vLLM to parse the flags)",
    ),
    18: ExitCode(
        "a generated manifest fails its schemas",
        "`deploy`: a generated Kubernetes manifest fails the Kubernetes schemas or the LeaderWorkerSet schema",
    ),
    19: ExitCode(
        "no setting passes the gate",
        "`fit`: no setting it searches (block size, drafter KV dtype, prefix caching, num_speculative_tokens)"
        " passes the geometry gate; the one line says why (a recipe that fails but can be fixed exits 5 with "
        "the lines to change)",
    ),
    20: ExitCode(
        "the server does not answer",
        "`qualify`: nothing answers at the URL, or no generation streamed its first token within the readiness timeout",
    ),
    21: ExitCode(
        "not a vLLM OpenAI server",
        "`qualify`: the server is not a vLLM OpenAI server (no `/v1/models`, or no `vllm:` counters in `/metrics`)",
    ),
    22: ExitCode(
        "the API key is refused",
        "`qualify`: the server refused the API key (HTTP 401/403): none given, or the wrong one (`--api-key-env`)",
    ),
    23: ExitCode(
        "the model is not served",
        "`qualify`: the model name (`--model`, or the recipe's `served_model_name`) is not one the server serves",
    ),
    24: ExitCode(
        "the deployment misbehaves",
        "`qualify`: the deployment misbehaves: speculation configured but no drafts or acceptance near zero, "
        "prefix caching hitting less than predicted, empty, non-UTF-8 or degenerate output (each finding with"
        " its numbers)",
    ),
    25: ExitCode(
        "a figure is below the recipe's expectation",
        "`qualify`: a measured figure is below the recipe's `qualify.min_decode_tokens_per_s` / "
        "`qualify.min_acceptance`",
    ),
    26: ExitCode(
        "the mounted checkpoints are not the recipe's",
        "pre-flight: the mounted checkpoints are not the recipe's or do not fit each other: a snapshot commit"
        " other than the pinned revision, another quantization than target.quantization, drafter tensors not "
        "of drafter.precision, drafter target layers or hidden size the target lacks, num_speculative_tokens "
        "not the drafter block minus one",
    ),
    27: ExitCode(
        "a worker's fingerprint differs from its leader's",
        "pre-flight, multi-node: a worker's fingerprint (image labels and digest, overlay series, checkpoint "
        "revisions and config sha256s, the checked geometry, the served flags) differs from its leader's; the"
        " worker and the leader both refuse, each line naming the first field that differs and both values",
    ),
    28: ExitCode(
        "a rank of the group is missing",
        "pre-flight, multi-node: a rank is missing when GLM53_FINGERPRINT_TIMEOUT_S ends: on a worker, the "
        "leader's fingerprint did not reach it (the leader not started, not reachable on its fingerprint port, or "
        "started with GLM53_PREFLIGHT=off); on the leader, a worker never fetched it (the line names the node "
        "rank), or the leader cannot offer it on that port",
    ),
    29: ExitCode(
        "Docker Compose too old or silent",
        "Docker Compose older than 2.24 (the generated files' `env_file` entries say `required: false`), or a"
        " Compose binary that does not say its version: checking a generated file needs it, writing one does "
        "not",
    ),
    30: ExitCode(
        "the served KV cache is not the gate's",
        "`qualify`: the server's KV cache is not what the gate predicts for the recipe: `num_gpu_blocks` or "
        "`block_size` of `/metrics` `vllm:cache_config_info`, or the `kv cache group sizes` / `KV cache size: N "
        "tokens` of `--server-log`, each difference with both numbers (checked first: a deployment that "
        "misbehaves too exits 30)",
    ),
    70: ExitCode(
        "internal error (a bug)",
        "internal error: an exception nobody expected, reported as one line asking for a bug report (never a "
        "traceback)",
    ),
}
