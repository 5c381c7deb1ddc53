"""The image's start-time gate: before ``vllm serve`` runs, check the KV geometry of the
argv it was given and the model configs mounted where that argv points (stdlib only,
plus the installed vLLM when anything differs from what the build checked)."""
