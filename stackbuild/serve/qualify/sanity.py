"""Output sanity of the generations qualify saw: non-empty, valid UTF-8, no degenerate repetition."""

from __future__ import annotations

from dataclasses import dataclass

# A reply whose last words are one short cycle (a word, or two or three words) repeated at least this
# many times is degenerate: what a broken drafter or a corrupt KV cache produces (and dummy weights do).
MIN_REPEATS = 6
MAX_CYCLE_WORDS = 3
REPLACEMENT = "\ufffd"  # what vLLM's detokenizer puts where the bytes are not UTF-8


@dataclass(frozen=True)
class OutputCheck:
    """One generation's checks."""

    prompt_class: str
    completion_tokens: int  # the server's usage
    characters: int
    empty: bool  # tokens generated, no text (dummy weights can do that)
    invalid_utf8: bool
    degenerate: bool
    sample: str  # the first characters, for the report


def repeated_cycle(text: str) -> bool:
    words = text.split()
    for cycle in range(1, MAX_CYCLE_WORDS + 1):
        span = cycle * MIN_REPEATS
        if len(words) < span:
            continue
        tail = words[-span:]
        if all(tail[i] == tail[i % cycle] for i in range(span)):
            return True
    return False


def check(prompt_class: str, text: str, completion_tokens: int) -> OutputCheck:
    return OutputCheck(
        prompt_class=prompt_class,
        completion_tokens=completion_tokens,
        characters=len(text),
        empty=not text.strip(),
        invalid_utf8=REPLACEMENT in text or _not_encodable(text),
        degenerate=repeated_cycle(text),
        sample=text[:80],
    )


def _not_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return True
    return False
