"""The comment lines over a compose file and the file's text."""

from __future__ import annotations

from support.repo import REPO

from stackbuild.core.recipe import load_recipe
from stackbuild.serve.compose_header import compose_text, header
from stackbuild.serve.generated import COMPOSE
from stackbuild.serve.image_pin import ImagePin

RECIPE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")


def test_the_header_says_how_the_image_is_pinned():
    pinned = header(RECIPE, ImagePin("ghcr.io/o/x", "t", "sha256:" + "e" * 64, "--digest"))
    unpinned = header(RECIPE, ImagePin("ghcr.io/o/x", "t", None, ""))
    assert pinned.image == ("# Image pinned by digest (from --digest).",)
    assert unpinned.image[0].startswith("# UNPINNED: ")
    assert pinned.about[0] == COMPOSE.first_line(RECIPE)


def test_the_text_is_the_header_then_the_document():
    image = ImagePin("ghcr.io/o/x", "t", None, "")
    head = header(RECIPE, image)
    text = compose_text(RECIPE, image, head, {"name": "n", "services": {"vllm": {"image": image.reference}}})
    assert text.startswith("\n".join(head.lines()) + "\nname: n\n")
    assert "    # UNPINNED: tag only, no digest; this tag can be moved to another image.\n    image: " in text
