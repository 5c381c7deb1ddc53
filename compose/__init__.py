"""The compose file that serves a built image with `docker compose up`.

``serve_args`` turns a recipe into the `vllm serve` argument list,
``generate`` turns a recipe (plus command-line overrides) into the compose
document and its YAML text, ``validate`` checks both with the real tools:
vLLM 0.33.0's own serve parser and the Docker Compose v2 binary.
"""
