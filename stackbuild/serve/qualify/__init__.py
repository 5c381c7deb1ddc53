"""`build.py qualify`: hold a running vLLM OpenAI server to the recipe's gate and measure it the way the project's
published numbers were measured (readiness, end-to-end output tok/s, TTFT/TPOT/ITL, speculative decoding, prefix
caching, output sanity).

client (HTTP), metrics (/metrics snapshots and deltas), server_log (the allocation lines of the server's log),
allocation (the gate's KV cache against the server's), prompts (the fixed prompt set), sanity (the output
checks), sizing (what is sent, sized to the server's max_model_len), measure (one server's figures), result (the
versioned JSON record), result_file (its one writer and one reader: qualify.json, --baseline-result), report
(table and figure), run (the whole qualification and its verdict).
"""
