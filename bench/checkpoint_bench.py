#!/usr/bin/env python3
"""Benchmark of the start-time check's checkpoint reading (not a test): the headers of a
40-shard checkpoint (geometry/preflight/checkpoint.py ``scan``).

The shards are synthetic and sparse: each header lists --tensors tensors (GLM-scale: ~2,000
per shard, a header of a few hundred KB) whose offsets span --shard-gib GiB, and the file is
that long without its data being written (a sparse file), so the size check sees a real
size. Reported: the median wall time of --runs scans in one process (the page cache warm,
as at a container's second start) and of the first scan (cold for this process). Target:
at most 1 s for 40 shards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from geometry.preflight.checkpoint import INDEX, scan  # noqa: E402

TARGET_S = 1.0
GIB = 2**30


def write_checkpoint(directory: Path, shards: int, tensors: int, shard_bytes: int) -> None:
    weight_map = {}
    per_tensor = shard_bytes // tensors
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header = {"__metadata__": {"format": "pt"}}
        for t in range(tensors):
            key = f"model.layers.{s}.mlp.experts.{t}.down_proj.weight"
            header[key] = {"dtype": "U8", "shape": [per_tensor], "data_offsets": [t * per_tensor, (t + 1) * per_tensor]}
            weight_map[key] = name
        raw = json.dumps(header, separators=(",", ":")).encode()
        with open(directory / name, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.truncate(8 + len(raw) + tensors * per_tensor)  # sparse: the data is never written
    (directory / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=40)
    ap.add_argument("--tensors", type=int, default=2000, help="tensors per shard")
    ap.add_argument("--shard-gib", type=float, default=2.5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as tmp:
        directory = Path(tmp)
        write_checkpoint(directory, args.shards, args.tensors, int(args.shard_gib * GIB))
        header_bytes = sum(
            struct.unpack("<Q", (directory / n).open("rb").read(8))[0]
            for n in os.listdir(directory)
            if n.endswith(".safetensors")
        )
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            ckpt = scan("target", str(directory))
            times.append(time.perf_counter() - t)
    median = statistics.median(times)
    result = {
        "checkpoint_headers": {
            "shards": len(ckpt.shards),
            "tensors": len(ckpt.tensor_names()),
            "header_bytes": header_bytes,
            "claimed_tensor_bytes": ckpt.tensor_bytes,
            "runs": args.runs,
            "first_s": round(times[0], 4),
            "median_s": round(median, 4),
            "target_s": TARGET_S,
            "meets_target": max(times) <= TARGET_S,
        }
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
