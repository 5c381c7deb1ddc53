"""End to end: `compose --signature-key` writes the file, `build.py up -f FILE` checks the image's signature in
the test registry (stock cosign underneath) and only then runs Compose; an unsigned image, or one signed by
another key, stops it with verify's exit code and Compose never runs.

No new build: the session's amd64 build (``amd64_build``), pushed again into repositories of its own, signed
with key pairs stock cosign makes (tests/signing_support.py). Compose is a stub (``GLM53_COMPOSE_BIN``) that
records its arguments and the ``STACKBUILD_SIGNATURE_VERIFIED`` it was given: what is under test is the order
(the check, then Compose) and what Compose is told, not Compose starting a GPU recipe's container.
"""

from __future__ import annotations

import json

import pytest
import yaml
from key_pairs import der_sha256
from signing_support import key_pair, push_copy, signed_copy
from stack_e2e import cli

pytestmark = [pytest.mark.docker, pytest.mark.registry]


@pytest.fixture(scope="module")
def keys(cosign, amd64_build, tmp_path_factory):
    return key_pair(cosign, amd64_build.docker_config, tmp_path_factory.mktemp("up-keys"))


@pytest.fixture(scope="module")
def signed(amd64_build, keys, cosign, tmp_path_factory):
    return signed_copy(amd64_build, keys, cosign, "up-signed", tmp_path_factory.mktemp("up-signed"))


def compose_stub(tmp_path):
    record = tmp_path / "compose-ran.json"
    stub = tmp_path / "docker-compose"
    stub.write_text(
        "#!/bin/sh\n"
        f'python3 -c \'import json, os, sys; json.dump({{"args": sys.argv[1:], '
        f'"verified": os.environ.get("STACKBUILD_SIGNATURE_VERIFIED")}}, open("{record}", "w"))\' "$@"\n'
    )
    stub.chmod(0o755)
    return stub, record


def write_file(build, copy, public, tmp_path):
    path = tmp_path / f"{copy.repository.rsplit('/', 1)[-1]}.compose.yaml"
    run = cli(
        "compose", "--recipe", str(build.recipe), "--repository", copy.repository, "--digest", copy.digest,
        "--signature-key", str(public), "-o", str(path), docker_config_dir=build.docker_config,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return path


def up(build, path, cosign, tmp_path, *args):
    stub, record = compose_stub(tmp_path)
    run = cli(
        "up", "-f", str(path), "--cosign", str(cosign), *args,
        docker_config_dir=build.docker_config, env={"GLM53_COMPOSE_BIN": str(stub)},
    )  # fmt: skip
    return run, (json.loads(record.read_text()) if record.exists() else None)


def test_up_checks_the_signature_then_runs_compose(amd64_build, signed, keys, cosign, tmp_path):
    path = write_file(amd64_build, signed, keys.public, tmp_path)
    assert yaml.safe_load(path.read_text())["x-signature-policy"]["key"] == keys.public.read_text()
    run, compose = up(amd64_build, path, cosign, tmp_path, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["started"] is True
    (checked,) = result["checked"]
    assert checked["signed"] is True and checked["digests"][0] == signed.digest
    assert compose["args"] == ["-f", str(path), "up", "-d"]
    assert compose["verified"] == f"{signed.digest} (ECDSA P-256 key sha256:{der_sha256(keys.public)[:16]})"


def test_check_only_runs_no_compose(amd64_build, signed, keys, cosign, tmp_path):
    path = write_file(amd64_build, signed, keys.public, tmp_path)
    run, compose = up(amd64_build, path, cosign, tmp_path, "--check-only")
    assert run.returncode == 0, run.stderr[-3000:]
    assert compose is None and run.stdout.strip().endswith("checked only (--check-only)")


def test_an_unsigned_image_stops_up_with_41(amd64_build, keys, cosign, tmp_path):
    unsigned = push_copy(amd64_build, "up-unsigned", tmp_path)
    path = write_file(amd64_build, unsigned, keys.public, tmp_path)
    run, compose = up(amd64_build, path, cosign, tmp_path)
    assert run.returncode == 41, run.stderr[-3000:]
    assert compose is None and run.stderr.count("error:") == 1 and "not signed" in run.stderr


def test_another_keys_signature_stops_up_with_42(amd64_build, signed, cosign, tmp_path):
    other = key_pair(cosign, amd64_build.docker_config, tmp_path / "other")
    path = write_file(amd64_build, signed, other.public, tmp_path)
    run, compose = up(amd64_build, path, cosign, tmp_path)
    assert run.returncode == 42, run.stderr[-3000:]
    assert compose is None and "no signature verifies with key" in run.stderr
