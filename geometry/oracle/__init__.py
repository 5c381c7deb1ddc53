"""vLLM's own KV-cache planning, run with the imported vLLM on a CPU box (no GPU), for the GPU.

The oracle the gate and the tests hold the simulator to:

* ``plan_with_vllm(inputs)``, ``compare_reports(sim, vllm)``,
  ``blocks_per_request(inputs)`` (plan.py): vLLM's geometry for a gate input,
  from a ``VllmConfig`` (vllm_config.py) and the model's layer objects
  (layers.py), through vLLM's platform alignment, spec collection and planner;
* ``engine_core_plan(params)`` / ``engine_core_summary(params)``
  (engine_core.py): explicit GLM-5.3 + DFlash2 parameters planned by
  ``EngineCore._initialize_kv_caches``; ``python -m geometry.oracle
  --engine-core CASES`` (__main__.py) prints one summary per case;
* ``requests_until_refused(inputs, contexts)`` (concurrency.py): requests of each length
  admitted by vLLM's own scheduler, on the pool vLLM's engine core plans, until it refuses one;
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
stdlib-importable up to here); its functions import them.
"""

from geometry.oracle.engine_core import ENGINE_CORE_DEFAULTS, engine_core_plan, engine_core_summary
from geometry.oracle.plan import blocks_per_request, compare_reports, plan_with_vllm

__all__ = [
    "ENGINE_CORE_DEFAULTS",
    "blocks_per_request",
    "compare_reports",
    "engine_core_plan",
    "engine_core_summary",
    "plan_with_vllm",
]
