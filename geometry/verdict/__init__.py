"""The gate's verdict on a plan, and what is made from it (stdlib only).

Takes: ``GeometryInputs`` and the ``GeometryReport`` of each behaviour. Gives: the gate's run
(``gate_run.run_gate``: simulate, judge, and hold to vLLM), its verdict and reasons (``gate``), the
verdict table and JSON (``table``), stock against overlay (``behaviours``) and the search for
settings that fit more requests (``fit``).
"""
