"""The fixed prompt set of `qualify`'s throughput runs: prose and code-style prompts (the post's code-style
prompts land at the top of its range), and the word list the prefix-cache probe builds prompts from."""

from __future__ import annotations

from types import MappingProxyType

PROMPTS = MappingProxyType(
    {
        "prose": (
            "Explain in plain words how a CPU cache works and why it makes programs faster.",
            "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        ),
        "code": (
            "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring and tests.",
            "Write a C function that reverses a singly linked list in place, and a main() that checks it.",
        ),
    }
)

# Words the prefix-cache probe draws a random prefix from (any tokenizer splits them into known tokens).
PREFIX_WORDS = (
    "one two three four five six seven eight nine ten red green blue yellow black white "
    "orange purple brown the quick fox jumps over lazy dog model serves requests small"
).split()
