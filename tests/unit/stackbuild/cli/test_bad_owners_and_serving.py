"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written:
owners, the compose file's digest and serving defaults.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs ,
`build --dry-run` and `compose -o` on it (or the one command the case is about). Expected numbers are
worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from bad_input_helpers import (
    DIGEST,
    assert_refused,
    invoke,
    run_everywhere,
    with_base_digest,
)
from recipe_copies import copy_recipe
from recipe_copies import set_key as _set
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.cli import gate as gate_commands

# --- owners and serving defaults -----------------------------------------------------------------


def test_push_without_an_owner_is_refused(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest())
    for args in (["build", "--push"], ["push"]):
        assert_refused(
            invoke([*args, "--recipe", recipe]),
            2,
            "image.repository: ghcr.io/{owner}/glm53-flash-dflash2-gb300 has no owner to push to: "
            "pass --owner or set IMAGE_OWNER",
        )


def test_a_build_without_an_owner_says_so(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest())
    result = invoke(["build", "--dry-run", "--recipe", recipe])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "notice: no image owner (--owner, IMAGE_OWNER): naming the image "
        "ghcr.io/local/glm53-flash-dflash2-gb300; it stays in this engine (a push needs an owner)\n"
        "warning: label org.opencontainers.image.source is https://github.com/{owner}/glm53-dflash2-images, "
        "the placeholder {owner} unfilled (image.source; --owner or IMAGE_OWNER fills it; a push refuses it)\n"
    )
    result = invoke(["build", "--dry-run", "--recipe", recipe], IMAGE_OWNER="acme")
    assert result.exit_code == 0 and result.stderr == ""
    assert "ghcr.io/acme/glm53-flash-dflash2-gb300:latest" in result.stdout


def test_make_image_refuses_to_push_without_an_owner():
    env = {k: v for k, v in os.environ.items() if k != "IMAGE_OWNER"}
    proc = subprocess.run(
        ["make", "-C", str(REPO), "--no-print-directory", "owner", "PUSH=1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode != 0
    assert (
        "make image: no image owner to push to: set IMAGE_OWNER=your-namespace (or PUSH=0 to build without pushing)"
        in proc.stderr
    )
    proc = subprocess.run(
        ["make", "-C", str(REPO), "--no-print-directory", "owner", "PUSH=1", "IMAGE_OWNER=acme"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "image owner: acme (IMAGE_OWNER)\n"


def test_committed_compose_file_has_no_placeholder_owner():
    text = (REPO / "compose" / "glm53-flash-dflash2-gb300.compose.yaml").read_text()
    image = yaml.safe_load(text)["services"]["vllm"]["image"]
    assert "/local/" not in image and "OWNER" not in image.replace("${IMAGE_OWNER:?set IMAGE_OWNER", "")
    assert image.startswith(
        "ghcr.io/${IMAGE_OWNER:?set IMAGE_OWNER to the registry namespace the image was pushed to}/"
    )


def _report(path: Path, **fields) -> Path:
    data = {
        "recipe_name": "glm53-flash-dflash2-gb300",
        "image": "ghcr.io/acme/glm53-flash-dflash2-gb300",
        "pushed_digest": DIGEST,
        "tags": ["latest", "sm100-gb300-20251130"],
        "status": "pushed",
    }
    data.update(fields)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "fields,pinned,notice",
    [
        ({}, True, "image owner 'acme' taken from {report}"),
        (
            {"recipe_name": "other"},
            False,
            "unpinned: {report} is the report of recipe 'other', not 'glm53-flash-dflash2-gb300'",
        ),
        ({"pushed_digest": None, "status": "built"}, False, "unpinned: {report} records no push (status 'built')"),
        (
            {"pushed_digest": "sha256:abc"},
            False,
            "unpinned: {report}: pushed_digest 'sha256:abc' is not a sha256 digest",
        ),
    ],
)
def test_compose_takes_the_digest_from_a_matching_report_or_says_why_not(tmp_path, fields, pinned, notice):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.image_pin import resolve_image

    recipe = load_recipe(copy_recipe(tmp_path, with_base_digest()))
    report = _report(tmp_path / "report.json", **fields)
    pin = resolve_image(recipe, owner="acme" if fields else None, report_path=report)
    assert bool(pin.digest) is pinned
    text = notice.format(report=report)
    if text.startswith("unpinned: "):
        assert pin.unpinned_because == text[len("unpinned: ") :]
    else:
        assert (
            pin.owner_note == text
            and pin.reference == f"ghcr.io/acme/glm53-flash-dflash2-gb300:sm100-gb300-20251130@{DIGEST}"
        )


def test_compose_without_a_report_says_why_it_is_unpinned(tmp_path):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.image_pin import resolve_image

    recipe = load_recipe(copy_recipe(tmp_path, with_base_digest()))
    pin = resolve_image(recipe, owner="acme", report_path=tmp_path / "none.json")
    assert pin.digest is None
    assert (
        pin.unpinned_because
        == f"no readable build report at {tmp_path / 'none.json'} (pass --digest, or build and push first)"
    )


@pytest.mark.parametrize("host_ip", [None, "0.0.0.0", "::1"])
def test_served_port_binds_loopback_unless_the_recipe_asks(tmp_path, host_ip):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.compose import render_compose

    edit = _set("serving.host_ip", host_ip) if host_ip else None
    recipe = load_recipe(copy_recipe(tmp_path, with_base_digest(edit)))
    doc = yaml.safe_load(render_compose(recipe, owner="acme", digest=DIGEST, report_path=tmp_path / "none.json"))
    assert doc["services"]["vllm"]["ports"][0]["host_ip"] == (host_ip or "127.0.0.1")


def test_bad_host_ip(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest(_set("serving.host_ip", "localhost")))
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: serving.host_ip: must be an IP address")


def test_api_key_comes_from_the_env_file(tmp_path):
    """vLLM reads VLLM_API_KEY when --api-key is absent; the compose file loads the env file, never inlines it."""
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.compose import render_compose
    from stackbuild.serve.compose_service import env_file_name

    source = (
        REPO / ".cache" / f"vllm-{DEFAULT_VERSION}" / "vllm" / "entrypoints" / "serve" / "middleware" / "register.py"
    )
    if source.exists():
        assert "args.api_key or [envs.VLLM_API_KEY]" in source.read_text()
    recipe = load_recipe(copy_recipe(tmp_path, with_base_digest()))
    text = render_compose(recipe, owner="acme", digest=DIGEST, report_path=tmp_path / "none.json")
    svc = yaml.safe_load(text)["services"]["vllm"]
    assert svc["env_file"] == [{"path": env_file_name(recipe), "required": False}]
    assert "VLLM_API_KEY" not in svc["environment"] and "--api-key" not in svc["command"]
    assert "#   VLLM_API_KEY=... there makes vLLM require that key" in text
    # A recipe cannot inline one: secret-looking env names are refused.
    bad = copy_recipe(tmp_path / "bad", with_base_digest(_set("serving.env", {"VLLM_API_KEY": "x"})))
    assert_refused(invoke(["geometry", "--recipe", bad]), 2, "serving.env.VLLM_API_KEY: looks like a secret")


def test_an_unexpected_exception_is_one_line_with_its_own_code(monkeypatch, tmp_path):
    """The last resort (exit 70): an exception the driver did not expect, injected here, never a traceback."""

    def broken(path):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(gate_commands, "load_recipe", broken)
    assert_refused(
        invoke(["geometry", "--recipe", tmp_path / "r.yaml"]),
        70,
        "error: internal error: ZeroDivisionError: division by zero; please report it",
    )
