"""Where the dataprof processes of one job's ranks meet: the rendezvous the job already has, or a directory.

Under ``torchrun`` the launcher's agent serves a key-value store (torch.distributed's ``TCPStore``) at
``MASTER_ADDR:MASTER_PORT`` for the job's life, and tells its ranks so (``TORCHELASTIC_USE_AGENT_STORE=True``):
the training's process group meets there, and so do dataprof's processes, as clients, under keys of their own
(``dataprof/<run id>/<round nonce>/``: :func:`join_round`). Nodes that share nothing but the network meet so;
each keeps its own ``$TMPDIR``. Outside an agent's store (ranks started some other way on one node), they meet
through a directory under ``$TMPDIR``, one per job.

A meeting never raises: a store that cannot be reached is a meeting where nothing arrives and nothing can be
said (:attr:`Meeting.reachable` says so), and each caller decides what that means for the training.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
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


def job_rank(env: Mapping[str, str]) -> int | None:
    """This process's rank in a job of two or more ranks (torchrun's environment); None otherwise."""
    try:
        world, rank = int(env.get("WORLD_SIZE", "1")), int(env.get("RANK", "-1"))
    except ValueError:
        return None
    return None if world < 2 or rank < 0 else rank


LAUNCHERS = (("OMPI_COMM_WORLD_SIZE", "mpirun"), ("PMI_SIZE", "an MPI launcher"), ("SLURM_NTASKS", "srun"))
"""Launchers that start a job's ranks one process each, without torchrun's agent: the size they set."""


def cannot_meet(env: Mapping[str, str] = os.environ) -> str | None:
    """Why this process, one rank of a job over several nodes (or of unknown shape), cannot meet the other nodes'
    ranks: started without torchrun's agent (``srun python train.py``, ``mpirun``, DeepSpeed's launcher), there is
    no store they all reach, and the directory they would meet in is this node's alone. None where they can meet
    (an agent's store, or every rank on this node) or it is no job of several ranks."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True) and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return None
    world = job_rank(env) is not None and int(env.get("WORLD_SIZE", "1"))
    if world:
        local = env.get("LOCAL_WORLD_SIZE", "")
        if local.isdigit() and int(local) >= world:
            return None
        return (f"this rank is one of {world} started without torchrun's agent, "
                + ("on more than one node" if local.isdigit() else "its ranks per node unknown (no LOCAL_WORLD_SIZE)"))
    for key, launcher in LAUNCHERS:
        size = env.get(key, "")
        if size.isdigit() and int(size) > 1:
            return f"this process is one of {size} ranks {launcher} started, with no RANK and WORLD_SIZE set"
    return None


def exchange_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where the ranks of one job meet without a store (one job, one directory): torchrun's run id, else its
    rendezvous address."""
    job = env.get("TORCHELASTIC_RUN_ID") or f"{env.get('MASTER_ADDR', 'local')}-{env.get('MASTER_PORT', '0')}"
    return Path(tempfile.gettempdir()) / f"dataprof-run-{job}"


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
        return self._connected() is not None

    def _connected(self) -> Any:
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
        if self._connected() is not None:
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
        store = self._connected()
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
        store = self._connected()
        try:
            return None if store is None or not store.check([key]) else bytes(store.get(key)).decode()
        except Exception:
            self._broken()
            return None

    def count(self, key: str, add: int = 0) -> int:
        """The store's atomic counter."""
        store = self._connected()
        try:
            return 0 if store is None else int(store.add(key, add))
        except Exception:
            self._broken()
            return 0

    def remove(self, key: str) -> None:
        """Delete the key from the store."""
        store = self._connected()
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
ROUND_ENV = "DATAPROF_ROUND"
"""Where a rank's dataprof keeps the round it joined (``<run id> <nonce>``), for its own later meetings and the
script it watches."""


def meeting_of(env: Mapping[str, str] = os.environ, since: float | None = None,
               connect_s: float = CONNECT_S) -> Meeting | None:
    """Where this process's job meets: the launcher's store when torchrun serves one (under keys of the round this
    rank joined: :func:`join_round`; this process's own rank, with ``os.environ``, joins once and leaves at its
    exit), else a directory (where what is older than ``since`` is an earlier job's); None outside a job of two or
    more ranks."""
    if job_rank(env) is None:
        return None
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True) and host and port.isdigit():
        run_id = env.get("TORCHELASTIC_RUN_ID", "job")
        kept = env.get(ROUND_ENV, "").split()
        if len(kept) == 3 and kept[0] == run_id:
            nonce = kept[1]
        else:
            job = StoreMeeting(host, int(port), f"dataprof/{run_id}/", connect_s)
            nonce, ticket = join_round(job)
            mine, rank = job.within(f"{nonce}/"), job_rank(env)
            for key in [*(f"{name}-{rank}" for name in OWN_KEYS), *([END_KEY] if rank == 0 else [])]:
                mine.remove(key)  # left by a rank of an earlier round joined so (its dataprof killed outright)
            mine.put(f"{WHOIS_KEY}-{rank}", str(ticket))
            if env is os.environ:
                os.environ[ROUND_ENV] = f"{run_id} {nonce} {ticket}"
                atexit.register(leave_round, job)
        return StoreMeeting(host, int(port), f"dataprof/{run_id}/{nonce}/", connect_s)
    return FolderMeeting(exchange_dir(env), since)


def join_round(job: StoreMeeting, nonce: Callable[[], str] = lambda: uuid.uuid4().hex[:12]) -> tuple[str, int]:
    """The nonce of this rank's round of the job, which its keys carry (nothing of an earlier round, an elastic
    restart whose agents count restarts each their own way, is read), and its ticket (0 where the store could not
    be reached), which its report carries: a rank's report is read only from its latest dataprof
    (``whois-<rank>``).

    Each rank's dataprof takes a ticket (``arrivals``, a counter in the store) as it starts and counts ``ended``
    as it exits (:func:`leave_round`). An elastic round starts only once the agents have stopped every rank of
    the round before; so a ticket that finds every earlier one ended starts a round (a new nonce), and any other
    joins the round of the ticket before it (``round-<ticket>``). A rank's dataprof killed outright never counts
    its end: the next round then joins its round. A store that cannot be reached gives a nonce of this rank's
    own (it meets no one, as before)."""
    store = job._connected()
    if store is None:
        return nonce(), 0
    try:
        ticket = int(store.add("arrivals", 1))
        if int(store.add("ended", 0)) == ticket - 1:
            said = nonce()
        else:
            store.wait([f"round-{ticket - 1}"], timedelta(seconds=job.connect_s))
            said = bytes(store.get(f"round-{ticket - 1}")).decode()
        store.set(f"round-{ticket}", said)
    except Exception:  # the store went, or the rank before died before it said its round
        return nonce(), 0
    return said, ticket


def own_ticket(env: Mapping[str, str] = os.environ) -> int | None:
    """This rank's ticket in its round (:func:`join_round`); None where it joined none."""
    kept = env.get(ROUND_ENV, "").split()
    return int(kept[2]) if len(kept) == 3 and kept[2].isdigit() and int(kept[2]) else None


def leave_round(job: StoreMeeting) -> None:
    """This rank's dataprof is ending: the next rank to come, once every one has, starts a round."""
    job.count("ended", 1)
