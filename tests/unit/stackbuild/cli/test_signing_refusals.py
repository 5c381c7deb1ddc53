"""Signing and signature options refused before anything is built, pushed or pulled: one line, its exit code.

The engine is a dead socket (bad_input_helpers.invoke), so a refusal that came after the build or the
pull had started would be the engine's exit code (3), not these.
"""

from __future__ import annotations

from bad_input_helpers import assert_refused, invoke
from recipe_copies import copy_recipe, pinned

DIGEST = "sha256:" + "ab" * 32
IMAGE = f"127.0.0.1:5000/glm53/flash@{DIGEST}"


def test_a_signing_key_and_no_cosign_refuse_the_build_before_it_starts(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    key = tmp_path / "cosign.key"
    key.write_text("not read before cosign is found\n")
    for command in (["build", "--push"], ["push"]):
        result = invoke(
            [*command, "--recipe", recipe, "--owner", "someone", "--signing-key", key, "--cosign", tmp_path / "none"],
            STACKBUILD_COSIGN=None,
        )
        line = assert_refused(result, 40, "needs cosign", f"--cosign ({tmp_path / 'none'})")
        assert "nothing was built, pushed or pulled" in line


def test_no_cosign_on_path_names_path(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    key = tmp_path / "cosign.key"
    key.write_text("x\n")
    result = invoke(["push", "--recipe", recipe, "--owner", "someone", "--signing-key", key], PATH=str(tmp_path))
    assert_refused(result, 40, "none was found in PATH")


def test_an_unreadable_key_or_an_unset_key_variable_is_refused(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    missing = invoke(["push", "--recipe", recipe, "--owner", "o", "--signing-key", tmp_path / "absent.key"])
    assert_refused(missing, 40, f"--signing-key {tmp_path / 'absent.key'}")
    unset = invoke(["push", "--recipe", recipe, "--owner", "o", "--signing-key-env", "SIGN_TEST_UNSET"])
    assert_refused(unset, 40, "--signing-key-env SIGN_TEST_UNSET")


def test_a_signing_key_without_push_is_a_usage_error(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    key = tmp_path / "cosign.key"
    key.write_text("x\n")
    result = invoke(["build", "--recipe", recipe, "--signing-key", key])
    assert_refused(result, 2, "add --push")


def test_verify_with_a_key_and_no_cosign_refuses_before_the_pull(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    public = tmp_path / "cosign.pub"
    public.write_text("x\n")
    result = invoke(["verify", IMAGE, "--recipe", recipe, "--key", public, "--cosign", tmp_path / "none"])
    assert_refused(result, 40, "checking the signature needs cosign")


def test_verify_keyless_needs_both_identity_and_issuer(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    result = invoke(["verify", IMAGE, "--recipe", recipe, "--certificate-identity", "someone"])
    assert_refused(result, 2, "--certificate-identity and --certificate-oidc-issuer go together")
