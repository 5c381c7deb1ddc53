"""The maintainer's tools: the generators of docs/cli.md and of the generated sections of README.md and docs/.

Each runs as a script (``python tools/NAME.py``) and the tests import it (pytest's pythonpath holds
tools/). Nothing under stackbuild/, geometry/ or overlay/ imports them (pyproject.toml's import
contracts), and they are not in the image's build context.
"""
