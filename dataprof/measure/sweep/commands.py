"""What the sweep's parent tells its host, one JSON line each: a typed record per command (:data:`COMMANDS`)."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.measure.protocol import AutotuneRequest, LoadRequest, TrialSettings, Wire
from dataprof.results.knobs import LoaderConfig


@dataclass(frozen=True)
class Load:
    """Probe the dataset (the host's first command)."""

    request: LoadRequest


@dataclass(frozen=True)
class Share:
    """Build the dataset once in the host, for every trial to be forked from it."""


@dataclass(frozen=True)
class Stop:
    """End the host."""


@dataclass(frozen=True)
class RunTrial:
    """Measure ``config`` in a forked trial."""

    config: LoaderConfig
    settings: TrialSettings


@dataclass(frozen=True)
class EpochCheck:
    """Run ``config``'s DataLoader over eight epochs of a tiny stream (``measure/sweep/epoch_check.py``)."""

    config: LoaderConfig


@dataclass(frozen=True)
class ThreadCheckRequest:
    """Compare ``config``'s thread loader's batches with the same indices fetched one by one."""

    config: LoaderConfig
    batch_size: int


Forked = RunTrial | EpochCheck | ThreadCheckRequest | AutotuneRequest
"""A command the host forks a process for (a trial, a side run)."""
Command = Load | Share | Stop | Forked
COMMANDS: Wire[Command] = Wire("cmd", "command", {
    "load": Load, "share": Share, "exit": Stop, "trial": RunTrial, "epoch_check": EpochCheck,
    "thread_check": ThreadCheckRequest, "autotune": AutotuneRequest})
"""The host's commands, each by its ``cmd`` on the wire."""
