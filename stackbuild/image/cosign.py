"""The cosign binary the signing and the signature checks run, and what they give it.

Nothing here installs cosign: :func:`find_cosign` takes ``--cosign``, then
``$STACKBUILD_COSIGN``, then ``cosign`` on ``PATH``, and refuses
(:class:`SignerMissing`) when none is there. cosign reads the registry
credentials where the engine's ``docker login`` stored them (``DOCKER_CONFIG``
or ``~/.docker``), as the rest of the push does.

A :class:`SigningKey` names the private key (a file, or ``env://NAME``: an
environment variable holding it) and where its passphrase comes from (a file,
else ``$COSIGN_PASSWORD``); neither the key nor the passphrase is ever an
argument, a log line or a report field: the passphrase reaches cosign through
its environment alone. A :class:`TrustPolicy` is what a signature must verify
with: a public key (transparency log off), or a keyless certificate identity
and OIDC issuer (checked against the public sigstore trust root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from stackbuild.core.errors import SignerMissing, UsageError

COSIGN_ENV = "STACKBUILD_COSIGN"
PASSPHRASE_ENV = "COSIGN_PASSWORD"
KEY_ENV_PREFIX = "env://"
# Signing with a key and no transparency log: cosign 3 needs its signing config off for that.
KEY_SIGNING_ARGS = ("--yes", "--use-signing-config=false", "--tlog-upload=false")
SECONDS = 300


@dataclass(frozen=True)
class Cosign:
    path: str

    def run(self, args: Sequence[str], *, passphrase: Optional[str] = None) -> subprocess.CompletedProcess:
        """cosign ARGS, no stdin (it never prompts), output captured; the passphrase only in its environment."""
        env = dict(os.environ)
        if passphrase is not None:
            env[PASSPHRASE_ENV] = passphrase
        try:
            return subprocess.run(
                [self.path, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=env,
                timeout=SECONDS,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SignerMissing(f"{self.path}: cosign could not run ({exc.__class__.__name__}: {exc})") from None


def find_cosign(explicit: Optional[str], why: str) -> Cosign:
    """The cosign to run (``explicit``, ``$STACKBUILD_COSIGN``, ``PATH``); SignerMissing naming ``why`` it is needed."""
    named = explicit or os.environ.get(COSIGN_ENV)
    where = "--cosign" if explicit else f"${COSIGN_ENV}" if named else "PATH"
    found = shutil.which(named) if named else shutil.which("cosign")
    if found is None:
        shown = f" ({named})" if named else ""
        raise SignerMissing(
            f"{why} needs cosign and none was found in {where}{shown}: install cosign or pass --cosign PATH; "
            "nothing was built, pushed or pulled"
        )
    return Cosign(found)


def first_error_line(result: subprocess.CompletedProcess) -> str:
    """cosign's own reason, one line: its first ``Error:`` line, else its last line."""
    lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    return (errors or lines or [f"exit code {result.returncode}"])[0]


def registry_args(plain_http: bool) -> list[str]:
    return ["--allow-http-registry", "--allow-insecure-registry"] if plain_http else []


@dataclass(frozen=True)
class SigningKey:
    """The private key cosign signs with: a file path or ``env://NAME``; the passphrase's file, if any."""

    reference: str
    passphrase_file: Optional[Path] = None

    @classmethod
    def of(cls, key_file: Optional[Path], key_env: Optional[str], passphrase_file: Optional[Path]) -> "SigningKey":
        """From the options; SignerMissing when what they name cannot be read (checked before anything is built)."""
        if key_file and key_env:
            raise UsageError("--signing-key and --signing-key-env: give one of them")
        if key_env:
            if not os.environ.get(key_env):
                raise SignerMissing(f"--signing-key-env {key_env}: the environment variable is not set or empty")
            reference = KEY_ENV_PREFIX + key_env
        else:
            assert key_file is not None
            if not os.access(key_file, os.R_OK) or not Path(key_file).is_file():
                raise SignerMissing(f"--signing-key {key_file}: no readable key file there")
            reference = str(key_file)
        if passphrase_file is not None and not os.access(passphrase_file, os.R_OK):
            raise SignerMissing(f"--signing-passphrase-file {passphrase_file}: not readable")
        return cls(reference, passphrase_file)

    @property
    def source(self) -> str:
        """Where the key comes from, for the record: ``file`` or ``environment variable NAME`` (never the key)."""
        if self.reference.startswith(KEY_ENV_PREFIX):
            return f"environment variable {self.reference.removeprefix(KEY_ENV_PREFIX)}"
        return "file"

    def passphrase(self) -> Optional[str]:
        """The passphrase from its file (its one line), else None: cosign reads ``$COSIGN_PASSWORD`` itself."""
        if self.passphrase_file is None:
            return None if PASSPHRASE_ENV in os.environ else ""
        return Path(self.passphrase_file).read_text().rstrip("\n")


@dataclass(frozen=True)
class Signer:
    """cosign and what it signs with: a key (transparency log off), or None: keyless, the CI's OIDC identity
    (a Fulcio certificate, the signature entered in the Rekor log)."""

    cosign: Cosign
    key: Optional[SigningKey]

    def args(self) -> list[str]:
        if self.key is None:
            return ["--yes"]
        return [*KEY_SIGNING_ARGS, "--key", self.key.reference]

    def passphrase(self) -> Optional[str]:
        return self.key.passphrase() if self.key is not None else None

    @property
    def source(self) -> str:
        return self.key.source if self.key is not None else "keyless (OIDC identity)"


@dataclass(frozen=True)
class TrustPolicy:
    """What a signature must verify with: a public key, or a keyless identity and its OIDC issuer."""

    key: Optional[Path] = None
    identity: Optional[str] = None
    issuer: Optional[str] = None

    @classmethod
    def of(cls, key: Optional[Path], identity: Optional[str], issuer: Optional[str]) -> Optional["TrustPolicy"]:
        """From verify's options; None when none is given (the signature is then not checked)."""
        if key is None and identity is None and issuer is None:
            return None
        if key is not None and (identity or issuer):
            raise UsageError("--key and --certificate-identity/--certificate-oidc-issuer: give one way to trust")
        if key is None and not (identity and issuer):
            raise UsageError("--certificate-identity and --certificate-oidc-issuer go together")
        if key is not None and not (os.access(key, os.R_OK) and Path(key).is_file()):
            raise SignerMissing(f"--key {key}: no readable public key file there")
        return cls(key, identity, issuer)

    def args(self) -> list[str]:
        if self.key is not None:
            return ["--key", str(self.key), "--insecure-ignore-tlog"]
        return ["--certificate-identity", str(self.identity), "--certificate-oidc-issuer", str(self.issuer)]

    @property
    def describe(self) -> str:
        return f"key {self.key}" if self.key is not None else f"identity {self.identity} ({self.issuer})"
