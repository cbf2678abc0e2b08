"""What the ranks of a distributed sweep exchange in their gloo group: JSON, as bytes in tensors. Nothing a peer
sends is unpickled (``broadcast_object_list`` and its kin would run what a peer's bytes say)."""

from __future__ import annotations

import json
from typing import Any


def broadcast_json(dist: Any, value: Any, leader: bool) -> Any:
    """Rank 0's ``value`` (JSON), on every rank."""
    import torch

    data = json.dumps(value).encode() if leader else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=0)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if leader \
        else torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(payload, src=0)
    return json.loads(bytes(payload.tolist()))


def _sized(dist: Any, value: Any, world_size: int) -> tuple[list[int], Any]:
    """Every rank's length of ``value``'s JSON, and this rank's bytes padded to the longest."""
    import torch

    data = json.dumps(value).encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64))
    lengths = [int(size.item()) for size in sizes]
    payload = torch.zeros(max(lengths), dtype=torch.uint8)
    payload[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return lengths, payload


def gather_json(dist: Any, value: Any, world_size: int, leader: bool) -> list[Any] | None:
    """Every rank's ``value`` (JSON) in rank order, on rank 0 (None elsewhere)."""
    import torch

    lengths, payload = _sized(dist, value, world_size)
    out = [torch.zeros_like(payload) for _ in lengths] if leader else None
    dist.gather(payload, out, dst=0)
    if out is None:
        return None
    return [json.loads(bytes(one[:n].tolist())) for one, n in zip(out, lengths, strict=True)]


def all_gather_json(dist: Any, value: Any, world_size: int) -> list[Any]:
    """Every rank's ``value`` (JSON) in rank order, on every rank."""
    import torch

    lengths, payload = _sized(dist, value, world_size)
    out = [torch.zeros_like(payload) for _ in lengths]
    dist.all_gather(out, payload)
    return [json.loads(bytes(one[:n].tolist())) for one, n in zip(out, lengths, strict=True)]
