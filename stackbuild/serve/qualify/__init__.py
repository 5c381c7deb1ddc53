"""`build.py qualify`: measure a running vLLM OpenAI server the way the project's published numbers were
measured (readiness, decode throughput, speculative decoding, prefix caching, output sanity).

client (HTTP), metrics (/metrics snapshots and deltas), prompts (the fixed prompt set), sanity (the
output checks), measure (one server's figures), result (the versioned JSON record), report (table and
figure), run (the whole qualification and its verdict).
"""
