"""The overlay: a patch series for the installed vLLM and its all-or-nothing applier.

Standard library only (Python >= 3.9): the image's patch step runs
``python3 overlay/apply.py`` with the base image's Python, before anything else
of the project is in the image. One idea per module:

- ``lock``: the series (``series``, ``lock.json``, the patches) and ``series_sha256``;
- ``diff``: unified diffs, parsed and applied strictly in memory;
- ``locate``: the installed package and its version, found without importing it;
- ``tree``: what the installed tree holds against the lock (``TreeState``);
- ``bytecode``: which cached bytecode of a changed module is kept, replaced or removed;
- ``transaction``: writes staged next to their targets, committed or rolled back as one;
- ``smoke``: importing the patched modules in a subprocess;
- ``manifest``: the manifest the patch step writes (``OverlayManifest``), read by the gate,
  the start-time pre-flight and the SBOM;
- ``patch_tree``: the whole application (``apply_series``); ``apply``: its command line.

The maintainers' tools for the series are in tools/ (not in the image): ``refresh_lock``
(recomputing ``lock.json``), ``pristine`` (which wheel a series is made against, unpacking its
tree) and ``port_series`` (carrying a series to another pristine tree, hunk by hunk).
"""
