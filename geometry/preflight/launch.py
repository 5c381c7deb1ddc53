"""Where this container sits in a vLLM multi-node group, from its serve argv (stdlib only).

vLLM's own launch flags (``--nnodes``/``-n``, ``--node-rank``/``-r``, ``--master-addr``,
``--master-port``; ``=`` or a space, dashes or underscores, as vLLM's parser takes them)
and vLLM's defaults for what is not given (``ParallelConfig``). The rest of the argv is
vLLM's business: by the time this is read, vLLM's parser or the build's record has
accepted it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Sequence

# vLLM's torch.distributed rendezvous on the leader (ParallelConfig.master_addr / master_port).
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 29501
# The leader's pre-flight offers its fingerprint beside it (ranks.py): 29502 with the default.
PORT_OFFSET = 1


class LaunchUnreadable(ValueError):
    """A launch flag whose value vLLM would not take either (one line)."""


@dataclass(frozen=True)
class Launch:
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int

    @property
    def leader(self) -> bool:
        return self.node_rank == 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "--node_rank", "-r", dest="node_rank", type=int, default=0)
    p.add_argument("--master-addr", "--master_addr", dest="master_addr", default=DEFAULT_MASTER_ADDR)
    p.add_argument("--master-port", "--master_port", dest="master_port", type=int, default=DEFAULT_MASTER_PORT)
    return p


def launch_of(argv: Sequence[str]) -> Optional[Launch]:
    """The group this argv joins; None for a single-node start (``--nnodes`` 1 or absent)."""
    try:
        args, _rest = _parser().parse_known_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as exc:
        raise LaunchUnreadable(f"the multi-node launch flags: {exc}") from None
    if args.nnodes <= 1:
        return None
    return Launch(args.nnodes, args.node_rank, args.master_addr, args.master_port)
