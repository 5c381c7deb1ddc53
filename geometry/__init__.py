"""KV-cache geometry simulator and build gate for the GLM-5.3-Flash + DFlash2
vLLM image (stdlib only; the functions of ``oracle`` import the installed vLLM)."""

from .vllm_versions import DEFAULT_VERSION

# The vLLM release the oracle runs (requirements/vllm.txt) and the recipes' bases carry.
MODELLED_VLLM_VERSION = DEFAULT_VERSION
