"""From the configs to the typed model a run plans (stdlib only).

Takes: the target's and the drafter's ``config.json``, the recipe's serve settings and the vLLM
release (``inputs.build_inputs``). Gives: ``GeometryInputs``, the validated inputs of one run, and
``Model``, the target's layers (built by its entry in ``architectures/``) followed by the
drafter's, with their KV specs (``model.build_model``).
"""
