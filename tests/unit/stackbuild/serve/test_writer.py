"""The writer sequence every serving file goes through (serve/writer.py) and the one check that a file
is this command's own output for a recipe (serve/generated.py)."""

from __future__ import annotations

from functools import partial

import pytest
from support.repo import REPO

from stackbuild.core.labels import NODE_ROLE
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import role_commands
from stackbuild.serve.compose import render_compose
from stackbuild.serve.generated import COMPOSE, DEPLOY
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.k8s import manifests, render
from stackbuild.serve.k8s_options import ModelVolume
from stackbuild.serve.multinode import render_role
from stackbuild.serve.writer import Document, write_documents

SINGLE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")
MULTI = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml")
IMAGE = ImagePin("ghcr.io/o/x", "t", "sha256:" + "e" * 64, "--digest")


def test_each_file_is_its_own_commands_for_its_own_recipe():
    compose = render_compose(SINGLE, image=IMAGE)
    roles = {c.role: render_role(MULTI, c, image=IMAGE) for c in role_commands(MULTI)}
    k8s = render(SINGLE, manifests(SINGLE, image=IMAGE.reference, volume=ModelVolume(host_path="/models")), IMAGE)
    assert COMPOSE.wrote(compose, SINGLE) and not COMPOSE.wrote(compose, MULTI) and not DEPLOY.wrote(compose, SINGLE)
    assert DEPLOY.wrote(k8s, SINGLE) and not DEPLOY.wrote(k8s, MULTI) and not COMPOSE.wrote(k8s, SINGLE)
    for role, text in roles.items():
        assert COMPOSE.wrote(text, MULTI, {NODE_ROLE: role})
        assert not any(COMPOSE.wrote(text, MULTI, {NODE_ROLE: other}) for other in roles if other != role)
    assert compose.splitlines()[0] == COMPOSE.first_line(SINGLE)
    assert k8s.splitlines()[0] == DEPLOY.first_line(SINGLE, "--target k8s")


def test_a_failed_check_writes_no_document_and_prints_no_notice(tmp_path, capsys):
    paths = [tmp_path / f"{c.role}.compose.yaml" for c in role_commands(MULTI)]
    paths[0].write_text("before\n")
    documents = [Document(p, f"{p.name}\n", partial(COMPOSE.wrote, recipe=MULTI)) for p in paths]

    def check(temps):
        assert [temps[p].read_text() for p in paths] == [f"{p.name}\n" for p in paths]
        raise RuntimeError("the second file is refused")

    with pytest.raises(RuntimeError, match="refused"):
        write_documents(MULTI, documents, "-o", check=check, notices=("said after writing",))
    assert paths[0].read_text() == "before\n" and not paths[1].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [paths[0].name]
    assert "said after writing" not in capsys.readouterr().err

    assert write_documents(MULTI, documents, "-o", check=lambda temps: sorted(temps), notices=("said",)) == paths
    assert [p.read_text() for p in paths] == [f"{p.name}\n" for p in paths]
    assert capsys.readouterr().err == "notice: said\n"
