"""What a vLLM server's log says it allocated: the lines its engine logs once the KV cache is planned.

The modelled vLLM releases (vllm/v1/core/kv_cache_utils.py) log, at start:

- ``kv cache group sizes (B0, B1, ...)``: each KV-cache group's block size, in group order
  (``resolve_kv_cache_block_sizes``; logged only when there are several groups);
- ``<POOL> KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx``
  (``update_kv_cache_capacity``): POOL is ``GPU`` on CUDA, the device type upper-cased elsewhere
  (``CPU``, ``XPU``), followed by `` + host`` with a host-resident pool; N is
  ``int(num_blocks / blocks per request at max_model_len x max_model_len)`` with thousands commas.

A log may hold several starts (``docker compose logs`` of a restarted container): the last of each
line is the running server's. Lines may carry any prefix (``vllm-1  | (EngineCore pid=7) INFO ...``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stackbuild.core.errors import UsageError

GROUP_SIZES = re.compile(r"kv cache group sizes \((?P<sizes>[0-9, ]*)\)")
KV_SIZE = re.compile(r"(?P<pool>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[0-9,]+) tokens")
STDIN = "-"


@dataclass(frozen=True)
class LoggedAllocation:
    """The last start's allocation lines of one server log (None: the line is not in the log)."""

    source: str  # the file, or "stdin"
    group_block_sizes: Optional[tuple[int, ...]]
    kv_cache_tokens: Optional[int]
    pool: Optional[str]  # "GPU", "CPU", "GPU + host", ...


def parse(text: str, source: str) -> LoggedAllocation:
    """The allocation lines of ``text``; a log without a ``KV cache size`` line is a UsageError naming
    ``--server-log`` (not a vLLM log, or one cut before the engine planned its cache)."""
    sizes, tokens, pool = None, None, None
    for line in text.splitlines():
        found = GROUP_SIZES.search(line)
        if found:
            sizes = tuple(int(s) for s in found["sizes"].replace(" ", "").split(",") if s)
        found = KV_SIZE.search(line)
        if found:
            tokens, pool = int(found["tokens"].replace(",", "")), found["pool"]
    if tokens is None:
        raise UsageError(
            f"--server-log {source}: no 'KV cache size: N tokens' line (not a vLLM server's log, "
            "or one that ends before its engine planned the KV cache)"
        )
    return LoggedAllocation(source=source, group_block_sizes=sizes, kv_cache_tokens=tokens, pool=pool)


def read(where: str) -> LoggedAllocation:
    """The allocation of the log at ``where`` (a file, or ``-``: standard input)."""
    if where == STDIN:
        return parse(sys.stdin.read(), "stdin")
    path = Path(where)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise UsageError(f"--server-log {where}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--server-log {where}: a directory, not a log file") from None
    except OSError as exc:
        raise UsageError(f"--server-log {where}: cannot read it ({exc.strerror})") from None
    return parse(text, where)
