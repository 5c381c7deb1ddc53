"""KV-cache geometry simulator and build gate for the GLM-5.3-Flash + DFlash2
vLLM image (stdlib only; the functions of ``oracle`` import the installed vLLM)."""
