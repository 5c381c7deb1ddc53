"""The deploy command's options: refused before the image is resolved, and the models volume they name."""

from __future__ import annotations

import pytest
from support.repo import REPO

from stackbuild.core.errors import DeployOptionError, OutputError
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.k8s_options import DeployOptions, ModelVolume, deploy_options, object_name

RECIPE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"ifname": "b a d", "namespace": "Bad"}, DeployOptionError, "^--ifname: "),
        ({"namespace": "Bad_Name"}, DeployOptionError, "^--namespace: "),
        ({"api_key_secret": "Not/A/Name"}, DeployOptionError, "^--api-key-secret: "),
        ({"image_pull_secrets": ("ok", "not ok")}, DeployOptionError, "^--image-pull-secret: "),
        ({"output_dir": REPO / "no-such-directory"}, OutputError, "not an existing directory$"),
    ],
)
def test_an_option_that_is_not_one_is_refused(options, error, message):
    with pytest.raises(error, match=message):
        deploy_options(**options)


def test_the_options_as_given():
    options = deploy_options(output_dir=REPO, ifname="ib0,ib1", namespace="ns", image_pull_secrets=["a", "b"])
    assert options == DeployOptions(output_dir=REPO, ifname="ib0,ib1", namespace="ns", image_pull_secrets=("a", "b"))


def test_the_models_volume_is_a_host_path_or_a_claim():
    assert DeployOptions().volume(RECIPE) == ModelVolume(host_path=RECIPE.model_mount_point)
    assert DeployOptions(models_pvc="models").volume(RECIPE).volume()["persistentVolumeClaim"]["claimName"] == "models"
    with pytest.raises(DeployOptionError, match="give one, not both"):
        DeployOptions(models_host_path="/m", models_pvc="models").volume(RECIPE)
    with pytest.raises(DeployOptionError, match="must be an absolute path"):
        DeployOptions(models_host_path="models").volume(RECIPE)


def test_the_object_name_is_a_dns_label():
    assert object_name(RECIPE) == RECIPE.name
