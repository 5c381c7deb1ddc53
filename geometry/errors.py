"""The geometry-wide error type, one-line error text, and every exit code of the project (stdlib only).

``ExitCode`` is the one table of exit codes: the host's exceptions (stackbuild/core/errors.py), the
codes each `build.py` command lists (stackbuild/command_exits.py), docs/cli.md's table
(tools/cli_reference.py), and the image's gate (gate_main.py), patch step (image_contract.py) and
start-time pre-flight (preflight/outcome.py) all read their codes from it. It lives here, in the
image's stdlib-only payload, so that both sides can import it.
"""

from __future__ import annotations

import enum


class BadInput(ValueError):
    """The inputs are malformed or ask for something the simulator does not
    model (``ExitCode.BAD_INPUT`` of the image's gate)."""


def one_line(text: object) -> str:
    """``text`` (an exception's or a tool's message) with every run of whitespace, newlines
    included, one space: an error fits on one line."""
    return " ".join(str(text).split())


@enum.unique
class ExitCode(enum.IntEnum):
    """One exit code: its number (the member's value), a few words for `--help` (``title``) and the
    whole sentence for docs/cli.md's table (``meaning``). Each number has one meaning: ``enum.unique``
    refuses two members with one number."""

    title: str
    meaning: str

    def __new__(cls, number: int, title: str, meaning: str) -> "ExitCode":
        member = int.__new__(cls, number)
        member._value_ = number
        member.title = title
        member.meaning = meaning
        return member

    def __str__(self) -> str:
        return str(self.value)

    SUCCESS = (
        0,
        "done",
        "success: the command did what it was asked; a command that checks: everything holds",
    )
    GATE_VERDICT_FAILED = (
        1,
        "the image's gate: the geometry fails",
        "the image's gate (`python3 -m geometry.gate_main`): the verdict fails (page geometry or capacity); "
        "`build.py build` reports that gate step as 5",
    )
    BAD_INPUT = (
        2,
        "bad input: the recipe, a file it names, or the command line",
        "the recipe, a config it names, the lock or the oracle record; or the command line: an unknown or "
        "malformed flag, `verify` or `qualify --attach` given a tag instead of a digest or text that is not an "
        "image reference (refused before anything is measured or attached), a push without an image owner; in the "
        "image: the gate's input, overlay manifest or oracle record is unreadable or asks for what the simulator "
        "does not model (the gate), an unknown `GLM53_PREFLIGHT` mode (the pre-flight)",
    )
    NO_ENGINE = (
        3,
        "no Docker engine",
        "no Docker engine (or the engine refused a request)",
    )
    BUILD_STEP = (
        4,
        "a build step failed",
        "a build step",
    )
    GEOMETRY = (
        5,
        "the geometry gate refuses",
        "the geometry gate (page geometry or capacity)",
    )
    ARCHITECTURE = (
        6,
        "the wrong architecture",
        "the architecture: the build runs on another machine than the recipe's platform needs (the patch step "
        "checks `uname -m` first), or the built image's os/architecture is not the recipe's",
    )
    REGISTRY_AUTH = (
        7,
        "registry authentication refused",
        "registry authentication",
    )
    REGISTRY_UNREACHABLE = (
        8,
        "registry unreachable",
        "registry unreachable",
    )
    TRANSFER_REFUSED = (
        9,
        "push or pull refused",
        "push or pull refused; `qualify --attach`: the registry has no manifest of that digest",
    )
    IMAGE_MISMATCH = (
        10,
        "the image does not match its recipe",
        "`verify`: the image does not match its recipe",
    )
    SERVE_FLAGS = (
        11,
        "vLLM rejects the serve flags",
        "vLLM rejects the serve flags",
    )
    ORACLE_BROKEN = (
        12,
        "vLLM's serve parser cannot run",
        "vLLM's serve parser cannot run",
    )
    COMPOSE_INVALID = (
        13,
        "Docker Compose rejects the generated file",
        "Docker Compose rejects the generated file",
    )
    PINNED_TAG_TAKEN = (
        14,
        "a pinned tag names another image",
        "a pinned tag already names another image in the registry (`--force` re-points it, logged)",
    )
    OUTPUT = (
        15,
        "an output path is unusable",
        "an output path (`-o`): its directory is missing or unwritable, it is a directory, or it is a file git "
        "tracks that is not this command's output for this recipe",
    )
    MOUNTED_FILE = (
        16,
        "a mounted config or checkpoint file is unusable",
        "pre-flight: a model config.json the serve command points at is missing, unreadable, not a JSON object, "
        "or one the simulator would misread (the key named); or a checkpoint file is: a shard missing, truncated "
        "or with a header that does not parse or does not describe its data (a tensor's dtype x shape not the "
        "bytes of its data_offsets; offsets overlapping, leaving a gap or past the file: what the safetensors "
        "library refuses), a tensor the index names absent, no tokenizer or chat template for a served parser "
        "(the file named)",
    )
    UNCHECKED = (
        17,
        "the geometry cannot be checked",
        "pre-flight: the geometry cannot be checked (a setup the simulator does not model, the simulator and the "
        "installed vLLM disagree, no vLLM to parse the flags); the image's gate with `--oracle`: the simulator "
        "and vLLM (imported, or its recorded answer) disagree",
    )
    MANIFEST_INVALID = (
        18,
        "a generated manifest fails its schemas",
        "`deploy`: a generated Kubernetes manifest fails the Kubernetes schemas or the LeaderWorkerSet schema",
    )
    FIT_NOTHING_PASSES = (
        19,
        "no setting passes the gate",
        "`fit`: no setting it searches (block size, drafter KV dtype, prefix caching, num_speculative_tokens) "
        "passes the geometry gate; the one line says why (a recipe that fails but can be fixed exits 5 with the "
        "lines to change)",
    )
    SERVER_UNREACHABLE = (
        20,
        "the server does not answer",
        "`qualify`: nothing answers at the URL, or no generation streamed its first token within the readiness timeout",
    )
    NOT_VLLM = (
        21,
        "not a vLLM OpenAI server",
        "`qualify`: the server is not a vLLM OpenAI server (no `/v1/models`, or no `vllm:` counters in `/metrics`)",
    )
    API_KEY_REFUSED = (
        22,
        "the API key is refused",
        "`qualify`: the server refused the API key (HTTP 401/403): none given, or the wrong one (`--api-key-env`)",
    )
    MODEL_NOT_SERVED = (
        23,
        "the model is not served",
        "`qualify`: the model name (`--model`, or the recipe's `served_model_name`) is not one the server serves",
    )
    QUALIFY_FAILED = (
        24,
        "the deployment misbehaves",
        "`qualify`: the deployment misbehaves: speculation configured but no drafts or acceptance near zero, "
        "prefix caching hitting less than predicted, empty, non-UTF-8 or degenerate output (each finding with its "
        "numbers); a `max_model_len` (`/v1/models`) that holds none of its prompts with one output token",
    )
    BELOW_EXPECTATION = (
        25,
        "a figure is below the recipe's expectation",
        "`qualify`: a measured figure is below the recipe's `qualify.min_decode_tokens_per_s` / "
        "`qualify.min_acceptance`",
    )
    CHECKPOINT_MISMATCH = (
        26,
        "the mounted checkpoints are not the recipe's",
        "pre-flight: the mounted checkpoints are not the recipe's or do not fit each other: a snapshot commit "
        "other than the pinned revision, another quantization than target.quantization, drafter tensors not of "
        "drafter.precision, drafter target layers or hidden size the target lacks, num_speculative_tokens not the "
        "drafter block minus one",
    )
    RANKS_DIFFER = (
        27,
        "a worker's fingerprint differs from its leader's",
        "pre-flight, multi-node: a worker's fingerprint (image labels and digest, overlay series, checkpoint "
        "revisions and config sha256s, the checked geometry, the served flags) differs from its leader's; the "
        "worker and the leader both refuse, each line naming the first field that differs and both values",
    )
    RANK_MISSING = (
        28,
        "a rank of the group is missing",
        "pre-flight, multi-node: a rank is missing when GLM53_FINGERPRINT_TIMEOUT_S ends: on a worker, the "
        "leader's fingerprint did not reach it (the leader not started, not reachable on its fingerprint port, or "
        "started with GLM53_PREFLIGHT=off); on the leader, a worker never fetched it (the line names the node "
        "rank), or the leader cannot offer it on that port",
    )
    COMPOSE_VERSION = (
        29,
        "Docker Compose too old or silent",
        "Docker Compose older than 2.24 (the generated files' `env_file` entries say `required: false`), or a "
        "Compose binary that does not say its version: checking a generated file needs it, writing one does not",
    )
    KV_CACHE_DIFFERS = (
        30,
        "the served KV cache is not the gate's",
        "`qualify`: the server's KV cache is not what the gate predicts for the recipe: `num_gpu_blocks` or "
        "`block_size` of `/metrics` `vllm:cache_config_info`, or the `kv cache group sizes` / `KV cache size: N "
        "tokens` of `--server-log`, each difference with both numbers (checked first: a deployment that "
        "misbehaves too exits 30)",
    )
    PATCHED_MODULE_IMPORT = (
        31,
        "the image's gate: a patched module does not import",
        "the image's gate with `--import-patched` (the build's gate step): a module the overlay patched "
        "fails to import; `build.py build` reports that gate step as 5",
    )
    ENGINE_TOO_OLD = (
        32,
        "the Docker engine is too old",
        "the Docker engine is older than the oldest supported (README.md: its API version below Docker 20.10's "
        "1.41; the line names it, the oldest supported and the newest tested), or, `compose --engine-api`, older "
        "than the API the file would be written for",
    )
    CAPACITY_DIFFERS = (
        33,
        "the live requests at once are not the gate's",
        "`qualify --capacity`: the requests a running server ran together without a preemption (the most "
        "`vllm:num_requests_running` of `/metrics` while `vllm:num_preemptions_total` stays) are not what the gate "
        "predicts for the same requests, length and pool (both numbers named)",
    )
    SIGNER_MISSING = (
        40,
        "no cosign to sign or verify with",
        "a signing key or a verification key (or identity) was given and no `cosign` was found (`--cosign`, "
        "`STACKBUILD_COSIGN`, then `PATH`), or the key file or passphrase file is unreadable: refused before "
        "anything is built, pushed or pulled",
    )
    UNSIGNED = (
        41,
        "the image is not signed",
        "`verify --key`/`--certificate-identity`: no signature refers to the image's digest (or to one of its "
        "platforms' images)",
    )
    SIGNATURE_INVALID = (
        42,
        "the signature does not verify",
        "`verify --key`/`--certificate-identity`: the image has signatures, none of them by that key (or "
        "identity): another key signed it, or a signature was altered",
    )
    TAG_MOVED = (
        43,
        "the tag names another digest",
        "`verify REPOSITORY:TAG@DIGEST`: the registry's TAG no longer names DIGEST (it was moved to another "
        "image, even a validly built and signed one); checked before the signature",
    )
    ATTESTATION_TAMPERED = (
        44,
        "a signed attestation is missing or altered",
        "`verify --key`/`--certificate-identity`: the signed SBOM or provenance attestation is missing, does not "
        "verify, names another subject than the image's digest, or the provenance attached beside it differs "
        "from the signed one",
    )
    SBOM_MISMATCH = (
        45,
        "the SBOM no longer matches",
        "`verify --key`/`--certificate-identity`: the SBOM attached to the image is not the one its signed "
        "attestation holds (it was replaced or edited after signing)",
    )
    PUBLIC_KEY_INVALID = (
        46,
        "the policy's public key is not one",
        "`deploy --signature-key`, `compose --verify-key`: the public key file is unreadable, holds a private key "
        "or no PEM `PUBLIC KEY` block, or its key is not one cosign verifies with (ECDSA P-256/P-384/P-521, RSA, "
        "Ed25519); nothing is written",
    )
    INTERNAL = (
        70,
        "internal error (a bug)",
        "internal error: an exception nobody expected, reported as one line asking for a bug report (never a "
        "traceback)",
    )
    ARCHITECTURE_STEP = (
        86,
        "the patch step runs on another machine",
        "the build's patch step: `uname -m` is not the machine the recipe's platform needs (checked before "
        "anything is written); `build.py build` reports it as 6",
    )
