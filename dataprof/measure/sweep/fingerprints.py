"""Batch fingerprints: a cheap identity for a batch, to tell whether two streams (two ranks' workers, a thread
loader and one process) gave the same batches."""

from __future__ import annotations

import zlib
from typing import Any

BATCH_MARKS = 32
"""Fingerprints of a stream's first batches kept in the result, to compare ranks' streams."""


def fingerprint(batch: Any, whole: bool = False) -> int:
    """A cheap identity for a batch: shapes and the leading bytes of its arrays (16 of them at most); ``whole``:
    a checksum of everything in it, every byte of every array and every value's repr."""
    parts: list[bytes] = []

    def walk(obj: Any, depth: int) -> None:
        if not whole and (len(parts) >= 16 or depth > 8):
            return
        if hasattr(obj, "reshape") and hasattr(obj, "shape"):
            flat = obj.reshape(-1) if whole else obj.reshape(-1)[:64]
            flat = flat.detach().cpu().numpy() if hasattr(flat, "detach") else flat
            parts.append(repr(tuple(obj.shape)).encode() + bytes(memoryview(flat.tobytes())))
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj if whole else obj[:16]:
                walk(value, depth + 1)
        else:
            parts.append(repr(obj).encode() if whole else repr(obj)[:256].encode())

    walk(batch, 0)
    return zlib.crc32(b"\0".join(parts))
