#!/usr/bin/env python3
"""The in-image geometry gate under the name the published images use.

``python3 /opt/glm53-overlay/geometry/sim_glm5_drafter_hades.py ARGS`` runs
``python3 -m geometry.gate_main ARGS`` (same arguments, exit codes and output).
"""

import gc
import os
import sys

if __name__ == "__main__":
    # Run as a script: the payload root (the directory holding geometry/) goes on sys.path.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from geometry import gate_main

    gc.disable()  # as gate_main does when run as a module
    sys.exit(gate_main.main())

from geometry.gate_main import main  # noqa: E402,F401
