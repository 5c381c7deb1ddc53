"""One safetensors file's header, read without its tensor data (stdlib only).

A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an
object: tensor name -> ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an
optional ``__metadata__`` of string values), then the data buffer. The header is refused
as the safetensors library (0.8) refuses it when it loads the file: N at most 100 MB and
within the file; each tensor's ``end - begin`` is its shape's element count times its
dtype's width (a sub-byte dtype's bits end on a byte); the tensors, in the order of their
offsets, tile the buffer from byte 0 with no gap and no overlap; and the file's size is
8 + N + the last ``end``. A file shorter than that is truncated (a partial download); only
the header is read, never the data.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Mapping, Optional

# A header above this is not one a checkpoint writes (safetensors itself refuses above 100 MB).
MAX_HEADER_BYTES = 100_000_000
# The shortest header that is a JSON object: "{}".
MIN_HEADER_BYTES = 2

# The dtypes the safetensors library reads, and the bits of one element of each.
DTYPE_BITS: Mapping[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


class ShardUnusable(Exception):
    """A weights file is missing, not a regular file, or its header does not describe it (one line)."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    begin: int  # its data_offsets, in the data buffer
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


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


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _brief(value) -> str:
    """A header value as a message shows it: its JSON, cut at 60 characters."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The count of a tensor's bits stops past this (2**64 bytes: no file holds that many).
MAX_BITS = 8 * 2**64


def _bits(dtype: str, shape: list) -> Optional[int]:
    """The bits of a ``dtype`` tensor of ``shape``; None above MAX_BITS."""
    if 0 in shape:
        return 0
    bits = DTYPE_BITS[dtype]
    for dim in shape:
        bits *= dim
        if bits > MAX_BITS:
            return None
    return bits


def _tensor(name: str, entry, shown: str) -> Tensor:
    if not isinstance(entry, dict):
        raise ShardUnusable(f"{shown}: header entry {name!r} is not an object")
    offsets, dtype, shape = entry.get("data_offsets"), entry.get("dtype"), entry.get("shape")
    if not isinstance(dtype, str):
        raise ShardUnusable(f"{shown}: header entry {name!r} has no dtype")
    if dtype not in DTYPE_BITS:
        raise ShardUnusable(f"{shown}: header entry {name!r} has dtype {dtype!r}, which is not a safetensors dtype")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise ShardUnusable(f"{shown}: header entry {name!r} has shape {_brief(shape)}, not a list of sizes >= 0")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise ShardUnusable(
            f"{shown}: header entry {name!r} has data_offsets {_brief(offsets)}, "
            "not [begin, end] with 0 <= begin <= end"
        )
    begin, end = offsets
    bits = _bits(dtype, shape)
    if bits != 8 * (end - begin):
        if bits is None:
            needs = "more than 2**64 bytes"
        elif bits % 8:
            needs = f"{bits:,} bits, which end inside a byte"
        else:
            needs = f"{bits // 8:,} bytes, not its {end - begin:,}"
        raise ShardUnusable(
            f"{shown}: header entry {name!r} is {dtype} {_brief(shape)}: {needs} (data_offsets {_brief(offsets)})"
        )
    return Tensor(dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _tiled(tensors: Mapping[str, Tensor], shown: str) -> int:
    """The end of the data buffer: the tensors, in offset order, must cover it from 0 with no gap or overlap."""
    at, previous = 0, None
    for name, t in sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end, item[0])):
        if t.begin != at:
            after = f"where {previous!r} ends" if previous is not None else "where the data begins"
            what = f"a gap of {t.begin - at:,} bytes" if t.begin > at else f"overlapping {previous!r}"
            raise ShardUnusable(
                f"{shown}: header entry {name!r} begins at data byte {t.begin:,}, not at {at:,} {after}: {what}"
            )
        at, previous = t.end, name
    return at


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _parse(raw: bytes, shown: str) -> dict:
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ShardUnusable(f"{shown}: the header is not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ShardUnusable(f"{shown}: the header is not JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:  # NaN, Infinity
        raise ShardUnusable(f"{shown}: the header is not JSON ({exc})") from None
    except RecursionError:
        raise ShardUnusable(f"{shown}: the header is not a safetensors header (JSON nested too deep)") from None
    if not isinstance(header, dict):
        raise ShardUnusable(f"{shown}: the header is JSON but not an object")
    metadata = header.get("__metadata__")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise ShardUnusable(f"{shown}: the header's __metadata__ is not an object of strings")
    return header


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
            if length < MIN_HEADER_BYTES:
                raise ShardUnusable(
                    f"{shown}: the header length {length} is shorter than a JSON object: not a safetensors file"
                )
            raw = fh.read(length)
        except OSError as exc:
            raise ShardUnusable(f"{shown} cannot be read: {exc.strerror}") from None
    header = _parse(raw, shown)
    tensors = {name: _tensor(name, entry, shown) for name, entry in header.items() if name != "__metadata__"}
    end = _tiled(tensors, shown)
    expected = 8 + length + end
    if size != expected:
        what = "truncated" if size < expected else "longer than its header says"
        raise ShardUnusable(
            f"{shown} is {size:,} bytes, the header says {expected:,} (8 + {length:,} header + {end:,} data): {what}"
        )
    return ShardHeader(path=path, size=size, tensors=tensors)
