#!/usr/bin/env python3
"""``python build.py COMMAND``: the stack builder's command line (stackbuild/cli/) from a checkout."""

from stackbuild.cli import main

if __name__ == "__main__":
    main()
