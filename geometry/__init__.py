"""KV-cache geometry simulator and build gate for the GLM-5.3-Flash + DFlash2
vLLM 0.33.0 image (stdlib only; the functions of ``oracle`` import the installed vLLM)."""

# The vLLM release whose KV-cache planning the simulator models (and the oracle runs: requirements/vllm.txt).
MODELLED_VLLM_VERSION = "0.33.0"
