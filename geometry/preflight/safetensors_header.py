"""One safetensors file's header, read without its tensor data (stdlib only).

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON (tensor
name -> ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional
``__metadata__``), then the data buffer, which the offsets must cover exactly: the file's
size is 8 + N + the largest ``end``. A file shorter than that is truncated (a partial
download); only the header is read, never the data.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Mapping

# A header above this is not one a checkpoint writes (safetensors itself refuses above 100 MB).
MAX_HEADER_BYTES = 100_000_000


class ShardUnusable(Exception):
    """A weights file is missing, not a regular file, or its header does not describe it (one line)."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    nbytes: int  # end - begin of its data_offsets


@dataclass(frozen=True)
class ShardHeader:
    path: str
    size: int  # the file's size in bytes
    tensors: Mapping[str, Tensor]

    @property
    def tensor_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def _open(path: str, shown: str):
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise ShardUnusable(
            f"{shown} does not exist" + (" (a dangling symlink)" if os.path.islink(path) else "")
        ) from None
    except IsADirectoryError:
        raise ShardUnusable(f"{shown} is a directory, not a safetensors file") from None
    except OSError as exc:  # ELOOP (a symlink loop), EACCES, ...
        raise ShardUnusable(f"{shown} cannot be opened: {exc.strerror}") from None


def _tensor(name: str, entry, shown: str) -> Tensor:
    if not isinstance(entry, dict):
        raise ShardUnusable(f"{shown}: header entry {name!r} is not an object")
    offsets, dtype = entry.get("data_offsets"), entry.get("dtype")
    if not isinstance(dtype, str):
        raise ShardUnusable(f"{shown}: header entry {name!r} has no dtype")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ShardUnusable(
            f"{shown}: header entry {name!r} has data_offsets {offsets!r}, not [begin, end] with 0 <= begin <= end"
        )
    return Tensor(dtype=dtype, nbytes=offsets[1] - offsets[0])


def read_header(path: str, shown: str) -> ShardHeader:
    """The header of the safetensors file at ``path`` (``shown``: how messages name it); ShardUnusable otherwise."""
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise ShardUnusable(f"{shown} is not a regular file")  # a FIFO or a device: never opened
    with _open(path, shown) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            if size < 8:
                raise ShardUnusable(f"{shown} is {size} bytes: truncated (no 8-byte header length)")
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > size - 8:
                raise ShardUnusable(
                    f"{shown}: the header length {length:,} is longer than the file ({size:,} bytes): "
                    "truncated or not a safetensors file"
                )
            if length > MAX_HEADER_BYTES:
                raise ShardUnusable(
                    f"{shown}: the header length {length:,} is above {MAX_HEADER_BYTES:,} bytes: not a safetensors file"
                )
            raw = fh.read(length)
        except OSError as exc:
            raise ShardUnusable(f"{shown} cannot be read: {exc.strerror}") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
        raise ShardUnusable(f"{shown}: the header is not JSON ({why})") from None
    if not isinstance(header, dict):
        raise ShardUnusable(f"{shown}: the header is JSON but not an object")
    tensors = {name: _tensor(name, entry, shown) for name, entry in header.items() if name != "__metadata__"}
    end = max((e["data_offsets"][1] for n, e in header.items() if n != "__metadata__"), default=0)
    expected = 8 + length + end
    if size != expected:
        what = "truncated" if size < expected else "longer than its header says"
        raise ShardUnusable(
            f"{shown} is {size:,} bytes, the header says {expected:,} (8 + {length:,} header + {end:,} data): {what}"
        )
    return ShardHeader(path=path, size=size, tensors=tensors)
