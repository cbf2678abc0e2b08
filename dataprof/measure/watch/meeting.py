"""Where the dataprof processes of one job's ranks meet: the rendezvous the job already has, or a directory.

Under ``torchrun`` the launcher's agent serves a key-value store (torch.distributed's ``TCPStore``) at
``MASTER_ADDR:MASTER_PORT`` for the job's life, and tells its ranks so (``TORCHELASTIC_USE_AGENT_STORE=True``):
the training's process group meets there, and so do dataprof's processes, as clients, under keys of their own
(``dataprof/<run id>/<round nonce>/``: :func:`~dataprof.measure.watch.joining.join_round`). Nodes that share
nothing but the network meet so; each keeps its own ``$TMPDIR``. Outside an agent's store (ranks started some
other way on one node), they meet through a directory under ``$TMPDIR``, one per job.

A meeting never raises: a store that cannot be reached is a meeting where nothing arrives and nothing can be
said (:attr:`Meeting.reachable` says so), and each caller decides what that means for the training.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

CONNECT_S = 10.0
"""How long a process tries to reach the job's store, once, before it takes the store as unreachable."""
ALIVE_KEY = "alive"
"""The counter under which each of a job's dataprof processes (a node's, a rank's) counts that it is there
(``alive-<node>``, ``alive-<rank>``)."""
ALIVE_EVERY_S = 1.0
"""How often each counts it."""


class Silences:
    """Who went silent, from their counts of being there read from time to time: one that counted, and whose count
    has not changed for ``silent_s`` since it was first read so."""

    def __init__(self, silent_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.silent_s = silent_s
        self.clock = clock
        self.heard: dict[int, tuple[int, float]] = {}
        """Per one counting: its count, and when it was first read so."""

    def silent_for(self, who: int, count: int) -> float | None:
        """How long ``who``, read now at ``count``, has been silent, once that is ``silent_s`` or more; else None."""
        now = self.clock()
        if self.heard.get(who, (None,))[0] != count:
            self.heard[who] = (count, now)
            return None
        silent = now - self.heard[who][1]
        return silent if count > 0 and silent >= self.silent_s else None


class Meeting(Protocol):
    """Short texts by key, shared by the job's ranks."""

    where: str
    """Where they meet, in words (``the job's store at 10.0.0.1:29500``)."""

    @property
    def reachable(self) -> bool:
        """False once the meeting place could not be reached (nothing said arrives, nothing is heard)."""

    def put(self, key: str, text: str) -> bool:
        """Say ``text`` under ``key``; whether it was said."""

    def get(self, key: str) -> str | None:
        """What was said under ``key``; None while nothing was (never waits)."""

    def count(self, key: str, add: int = 0) -> int:
        """Add ``add`` to the counter ``key`` and return its value (0 when unreachable)."""

    def remove(self, key: str) -> None:
        """Forget ``key``."""


class FolderMeeting:
    """A directory, a file per key: ranks on one node (or on a filesystem the nodes share). A file older than
    ``since`` (by more than a second) is an earlier job's with the same id, and is not heard."""

    def __init__(self, path: Path, since: float | None = None) -> None:
        self.path = path
        self.since = since
        self.where = f"the directory {path}"

    def _fresh(self, path: Path) -> bool:
        return self.since is None or path.stat().st_mtime >= self.since - 1.0

    @property
    def reachable(self) -> bool:
        """A directory is always there to write to (it is made when first written)."""
        return True

    def put(self, key: str, text: str) -> bool:
        """Write the key's file whole (a reader never sees half of it)."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            tmp = self.path / f"{key}.{os.getpid()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.path / key)
        except OSError:
            return False
        return True

    def get(self, key: str) -> str | None:
        """The key's file, if it is there."""
        try:
            return (self.path / key).read_text() if self._fresh(self.path / key) else None
        except OSError:
            return None

    def count(self, key: str, add: int = 0) -> int:
        """The counter as a file of one-byte marks (one per ``add``; appends are atomic on one node)."""
        with contextlib.suppress(OSError):
            if add:
                self.path.mkdir(parents=True, exist_ok=True)
                with open(self.path / key, "ab") as marks:
                    marks.write(b"." * add)
            return (self.path / key).stat().st_size if self._fresh(self.path / key) else 0
        return 0

    def remove(self, key: str) -> None:
        """Delete the key's file, and the directory once it is empty."""
        with contextlib.suppress(OSError):
            (self.path / key).unlink()
        with contextlib.suppress(OSError):
            self.path.rmdir()


class StoreMeeting:
    """The job's key-value store (torch.distributed's ``TCPStore``), reached lazily as a client. A client that
    fails (the store unreachable, a request that errs) is dropped and built again, at most every ``connect_s``:
    a hiccup on the way to the store is a silence for as long as it lasts, not for good."""

    def __init__(self, host: str, port: int, prefix: str, connect_s: float = CONNECT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host, self.port, self.prefix, self.connect_s = host, port, prefix, connect_s
        self.where = f"the job's store at {host}:{port}"
        self.clock = clock
        self._client: Any = None
        self._store: Any = None
        self._retry_at = -math.inf

    @property
    def reachable(self) -> bool:
        """Whether the store is reached now (or may be: no try has failed within ``connect_s``)."""
        return self.connected() is not None

    def connected(self) -> Any:
        """The store, through this meeting's client: built now if there is none (at most every ``connect_s``); None
        while it cannot be reached."""
        if self._store is None and self.clock() >= self._retry_at:
            try:
                import torch.distributed as dist

                self._client = dist.TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                                             timeout=timedelta(seconds=self.connect_s))
                self._store = dist.PrefixStore(self.prefix, self._client)
            except Exception:  # unreachable, refused, or no torch.distributed: nothing arrives for now
                self._broken()
        return self._store

    def within(self, prefix: str) -> StoreMeeting:
        """The keys under ``prefix`` of this meeting's, on this meeting's client (for the same thread)."""
        inner = StoreMeeting(self.host, self.port, self.prefix + prefix, self.connect_s, self.clock)
        inner._retry_at = self._retry_at  # a store just found unreachable is not tried again at once
        if self.connected() is not None:
            import torch.distributed as dist

            inner._client = self._client
            inner._store = dist.PrefixStore(inner.prefix, self._client)  # PrefixStores nest with a "/" between
        return inner

    def _broken(self) -> None:
        """Drop the client; the next request after ``connect_s`` builds another."""
        self._store = self._client = None
        self._retry_at = self.clock() + self.connect_s

    def put(self, key: str, text: str) -> bool:
        """Set the key in the store."""
        store = self.connected()
        if store is None:
            return False
        try:
            store.set(key, text)
        except Exception:
            self._broken()
            return False
        return True

    def get(self, key: str) -> str | None:
        """The key's value once it is set (``check`` first: ``get`` would wait for it)."""
        store = self.connected()
        try:
            return None if store is None or not store.check([key]) else bytes(store.get(key)).decode()
        except Exception:
            self._broken()
            return None

    def count(self, key: str, add: int = 0) -> int:
        """The store's atomic counter."""
        store = self.connected()
        try:
            return 0 if store is None else int(store.add(key, add))
        except Exception:
            self._broken()
            return 0

    def remove(self, key: str) -> None:
        """Delete the key from the store."""
        store = self.connected()
        with contextlib.suppress(Exception):
            if store is not None:
                store.delete_key(key)


FAILED_KEY = "failed"
"""The counter of ranks whose script failed; each also says so under ``failed-<rank>``."""
REPORT_KEY = "report"
"""Where each rank of a distributed ``dataprof run`` says its report (``report-<rank>``)."""
WHOIS_KEY = "whois"
"""The ticket of the latest dataprof of each rank in a round (``whois-<rank>``): a report of another ticket is an
earlier dataprof's of that rank (a node's restart under a static rendezvous joins its peers' round)."""
OWN_KEYS = (REPORT_KEY, FAILED_KEY, ALIVE_KEY)
"""What each rank says under its own key (``report-<rank>``…): removed as it joins a round."""
END_KEY = "end"
"""Where rank 0 names the loader and the batch at which every rank ends (``loader batches``)."""
HEARD_KEY = "end-heard"
"""The counter of the other ranks that have heard the end rank 0 named."""
