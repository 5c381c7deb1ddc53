"""What serves a built image: the `vllm serve` argv and the compose files (written to compose/).

``serve_args`` turns a recipe into the `vllm serve` argument list,
``generate`` turns a recipe (plus command-line overrides) into the compose
document and its YAML text, ``validate`` checks both with the real tools:
vLLM 0.33.0's own serve parser and the Docker Compose v2 binary.
"""
