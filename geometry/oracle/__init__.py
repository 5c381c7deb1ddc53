"""vLLM's own KV-cache planning, run with the imported vLLM on a CPU box (no GPU), for the GPU.

The oracle the gate and the tests hold the simulator to:

* ``plan_with_vllm(inputs)``, ``compare_reports(sim, vllm)``,
  ``blocks_per_request(inputs)`` (plan.py): vLLM's geometry for a gate input,
  from a ``VllmConfig`` (vllm_config.py) and the model's layer objects
  (layers.py), through vLLM's platform alignment, spec collection and planner;
* layers.py, layer_objects.py: the layer objects, through vLLM's own constructors where
  they run on the CPU (``Attention``, kernel implementation stood in; the GLM ``Indexer`` on
  the meta device), with constructors skipped where they need the served TP group or CUDA
  kernels (MLA, KDA/GDN);
* backend_selection.py: ``CudaPlatform``'s attention-backend selection for the serving
  capability (the drafter's backend is vLLM's choice);
* cpu_shims.py: what lets vLLM's model and kernel modules import on the CPU;
* serving_platform.py: the platform every plan runs under, the serving GPU's,
  whatever platform vLLM detects in this process (VLLM_TARGET_DEVICE included).

Importing this package imports no vLLM and no torch (the gate payload is
stdlib-importable up to here); its functions import them. This package module imports none of
its modules: the gate with a matching record imports only the record and the cross-check.
"""
