"""The signing options of build and push, the signature options of verify, and the signature options of
deploy and compose (what the served image's signature must verify with); each resolved before anything is
built, pushed, pulled or written."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

COSIGN_HELP = "The cosign binary (default: $STACKBUILD_COSIGN, then `cosign` on PATH); nothing installs it."


def signing_options(command):
    """--signing-key / --signing-key-env / --signing-passphrase-file / --cosign on a command that pushes."""
    for option in reversed(
        (
            click.option(
                "--signing-key",
                type=click.Path(dir_okay=False, path_type=Path),
                envvar="STACKBUILD_SIGNING_KEY",
                help="Sign what the push puts (each image, its SBOM and provenance as attestations, the index) with "
                "this cosign private key file (also $STACKBUILD_SIGNING_KEY); its passphrase from "
                "--signing-passphrase-file, else $COSIGN_PASSWORD. Without a key the push is unsigned and its "
                "record says so.",
            ),
            click.option(
                "--signing-key-env",
                metavar="VAR",
                help="Sign with the cosign private key held in this environment variable (its name only on the "
                "command line).",
            ),
            click.option(
                "--signing-passphrase-file",
                type=click.Path(dir_okay=False, path_type=Path),
                help="The signing key's passphrase, the file's one line (default: $COSIGN_PASSWORD).",
            ),
            click.option(
                "--sign-keyless",
                is_flag=True,
                help="Sign keyless instead: cosign's OIDC flow (in GitHub Actions the workflow's identity, with "
                "`id-token: write`), the signature entered in sigstore's public transparency log.",
            ),
            click.option("--cosign", "cosign_path", metavar="PATH", help=COSIGN_HELP),
        )
    ):
        command = option(command)
    return command


def verify_options(command):
    """--key / --certificate-identity / --certificate-oidc-issuer / --cosign on verify."""
    for option in reversed(
        (
            click.option(
                "--key",
                type=click.Path(dir_okay=False, path_type=Path),
                help="Check first that the image, its platforms' images and their SBOM and provenance attestations "
                "are signed with this cosign public key (transparency log off); refuse otherwise.",
            ),
            click.option(
                "--certificate-identity",
                metavar="ID",
                help="Keyless: the signing certificate's identity (the workflow's "
                "`https://github.com/OWNER/REPO/.github/workflows/image.yml@refs/...`).",
            ),
            click.option(
                "--certificate-oidc-issuer",
                metavar="URL",
                help="Keyless: the identity's OIDC issuer (`https://token.actions.githubusercontent.com`).",
            ),
            click.option("--cosign", "cosign_path", metavar="PATH", help=COSIGN_HELP),
        )
    ):
        command = option(command)
    return command


def signature_trust_options(command):
    """--signature-key / --signature-identity / --signature-issuer on deploy and compose: what the image's
    signature must verify with where it is served (verify's --key, --certificate-identity and
    --certificate-oidc-issuer)."""
    for option in reversed(
        (
            click.option(
                "--signature-key",
                type=click.Path(dir_okay=False, path_type=Path),
                help="Require the image signed, with its SBOM and provenance attestations, by this cosign public key "
                "(PEM, inlined in what is written; transparency log off, as `push --signing-key` signs). A file that "
                "is not a public key: exit 46. Needs the image pinned by digest.",
            ),
            click.option(
                "--signature-identity",
                metavar="ID",
                help="Keyless: require the signing certificate's identity (the workflow's "
                "`https://github.com/OWNER/REPO/.github/workflows/image.yml@refs/...`), with --signature-issuer.",
            ),
            click.option(
                "--signature-issuer",
                metavar="URL",
                help="Keyless: the identity's OIDC issuer (`https://token.actions.githubusercontent.com`).",
            ),
        )
    ):
        command = option(command)
    return command


def signer_of(
    key_file: Optional[Path],
    key_env: Optional[str],
    passphrase_file: Optional[Path],
    keyless: bool,
    cosign_path: Optional[str],
    push: bool,
):
    """The Signer the options name, or None; SignerMissing / UsageError before anything runs."""
    from stackbuild.core.errors import UsageError
    from stackbuild.image.cosign import Signer, SigningKey, find_cosign

    keyed = key_file is not None or key_env is not None
    if not keyed and not keyless:
        if passphrase_file is not None:
            raise UsageError("--signing-passphrase-file without --signing-key or --signing-key-env")
        return None
    if keyed and keyless:
        raise UsageError("--sign-keyless and a signing key: give one of them")
    if not push:
        raise UsageError("signing applies to what a push puts: add --push")
    key = SigningKey.of(key_file, key_env, passphrase_file) if keyed else None
    return Signer(find_cosign(cosign_path, "signing the push"), key)


def signature_check_of(key, identity, issuer, cosign_path):
    """verify's SignatureCheck, or None when no key or identity is given."""
    from stackbuild.image.cosign import TrustPolicy, find_cosign
    from stackbuild.image.verify import SignatureCheck

    policy = TrustPolicy.of(key, identity, issuer)
    if policy is None:
        return None
    return SignatureCheck(find_cosign(cosign_path, "checking the signature"), policy)
