"""The ranks of one job end their watch at the same batch, and learn at once when one's script failed.

Synchronous data-parallel training moves in lockstep: each step all-reduces with every rank. A watch ended by
time on each rank's own clock stops the ranks at different batches, and a rank still stepping then all-reduces
with a rank that has left (gloo: "Connection closed by peer"): the training fails where it should have ended.
So only rank 0's clock counts: at its deadline it names a batch a little ahead, where the job's ranks meet
(``meeting``: the launcher's store, across nodes, or a directory on one), and every rank ends once its own loader
has delivered that many batches. Each other rank says it has heard, and rank 0 waits for that a batch before the
end: in lockstep no rank can take the last batch before rank 0 has stepped the one before it, so every rank has
heard in time, however late a busy machine ran its reading thread (one that heard after taking the last batch
would step one batch past the others, and all-reduce with ranks that have left). Where rank 0 cannot say it, no
rank ends early: the training goes on, watched to its end. The ranks meet outside the training's process group
because that group is the script's own.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from dataprof.measure.watch.joining import meeting_of
from dataprof.measure.watch.launched import Launched
from dataprof.measure.watch.meeting import (
    ALIVE_EVERY_S,
    ALIVE_KEY,
    END_KEY,
    FAILED_KEY,
    HEARD_KEY,
    REPORT_KEY,
    Meeting,
    Silences,
)

MARGIN_BATCHES = 2
"""Rank 0 names the batch this many past its own deadline: a rank in lockstep is at most one batch ahead of it
(it cannot fetch a batch before the step of the last one all-reduced). A rank further ahead (gradients
accumulated over more batches between all-reduces) ends where it is."""
READ_EVERY_S = 0.25
"""How often another rank reads, from its own thread, whether rank 0 has named the end."""
HEARD_S = 10.0
"""How long rank 0 waits, a batch before the end it named, for every other rank to have heard it; past that it ends
there anyway (a rank that never hears is gone, or never took a batch)."""
SILENT_S = 15.0
"""A rank whose dataprof counted that it was there and has been silent this long since, its report unsaid, is
gone (its node died, or the network to it): the others stop waiting for it."""


class RankEnd:
    """One rank's side of the shared end: rank 0 says the batch to end at, the others hear it.

    Made by :meth:`of` (a watched script), the store is talked to from a thread of its own, never from the training
    loop: another rank reads the end every :data:`READ_EVERY_S` and says it heard it, and rank 0 names a batch far
    enough ahead for that (its pace times twice the read interval, beyond :data:`MARGIN_BATCHES`), then waits a
    batch before it until the ``world_size - 1`` others have heard it (at most :data:`HEARD_S`), and at it until
    the store has taken it or failed (its client's timeout). Made directly, it reads and says in line (one thread,
    as the tests drive it), and rank 0 waits for no one."""

    def __init__(self, meeting: Meeting, leader: bool, threaded: bool = False,
                 clock: Callable[[], float] = time.monotonic, world_size: int = 2) -> None:
        self.meeting = meeting
        self.leader = leader
        self.world_size = world_size
        self.clock = clock
        self.target: tuple[int, int] | None = None
        """The loader (its number in the script) and its batch count at which every rank ends, once known."""
        self.unsaid = False
        """Rank 0 could not say the end: no rank ends early (its own clock alone would break the training)."""
        self._said = threading.Event()
        self._heard = threading.Event()
        """Every other rank heard the end (or :data:`HEARD_S` passed, or it could not be said)."""
        self._asked = threading.Event()
        self._done = threading.Event()
        self._last: float | None = None
        self._step_s = 0.0
        self._thread = threading.Thread(target=self._talk, name="dataprof-rank-end", daemon=True) if threaded else None

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ) -> RankEnd | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise."""
        meeting, launched = meeting_of(env, since=time.time()), Launched(env)
        return None if meeting is None else cls(meeting, launched.rank == 0, threaded=True,
                                                world_size=launched.number("WORLD_SIZE", 1))

    def _talk(self) -> None:
        """The thread: rank 0 says the end once asked; another rank reads it until it is said (or :meth:`close`)."""
        while not self._done.is_set():
            if self.leader:
                self._asked.wait()
                if not self._done.is_set():
                    self._say()
                    self._wait_heard()
                return
            self._read()
            if self.target is not None or self._done.wait(READ_EVERY_S):
                return

    def close(self) -> None:
        """The script is ending: the thread stops, out of the store's client before the process exits (one left
        in it would abort the interpreter's exit)."""
        self._done.set()
        self._asked.set()
        self._heard.set()
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join(timeout=2.0)

    def _say(self) -> None:
        assert self.target is not None
        if not self.meeting.put(END_KEY, f"{self.target[0]} {self.target[1]}"):
            self.unsaid = True
        self._said.set()

    def _wait_heard(self) -> None:
        """Rank 0's thread, the end said: until every other rank has heard it, :data:`HEARD_S` at most."""
        until = time.monotonic() + HEARD_S
        while not self.unsaid and not self._done.is_set() and time.monotonic() < until \
                and self.meeting.count(HEARD_KEY) < self.world_size - 1:
            self._done.wait(READ_EVERY_S / 5)
        self._heard.set()

    def _read(self) -> None:
        said = self.meeting.get(END_KEY)
        try:
            loader, batches = (int(word) for word in (said or "").split())
        except ValueError:
            return
        self.target = (loader, batches)
        self.meeting.count(HEARD_KEY, 1)

    def publish(self, loader: int, batches: int) -> tuple[int, int] | None:
        """Rank 0 at its deadline, with its ``loader`` at ``batches``: name the batch every rank ends at (said in
        line, or asked of the thread); None when it could not be said."""
        margin = MARGIN_BATCHES + (math.ceil(2 * READ_EVERY_S / self._step_s)
                                   if self._thread is not None and self._step_s > 0 else 0)
        self.target = (loader, batches + margin)
        if self._thread is None:
            self._say()
            self._heard.set()
        else:
            self._asked.set()
        return None if self.unsaid else self.target

    def reached(self, loader: int, batches: int, deadline_passed: bool) -> bool:
        """Whether this rank ends now, its ``loader`` having delivered ``batches`` (``deadline_passed``: this
        rank's own clock says the window is over; only rank 0's counts)."""
        now = self.clock()
        if self._last is not None:
            self._step_s = now - self._last if not self._step_s else 0.8 * self._step_s + 0.2 * (now - self._last)
        self._last = now
        if self._thread is not None and self._thread.ident is None:
            self._thread.start()
        if self.unsaid:
            return False
        if self.target is None:
            if not self.leader:
                if self._thread is None:
                    self._read()
                if self.target is None:
                    return False
            elif not deadline_passed or self.publish(loader, batches) is None:
                return False
        assert self.target is not None
        if self.leader and loader == self.target[0] and batches >= self.target[1] - 1:
            self._heard.wait(2 * HEARD_S)  # before the last batch: no other rank takes it before it heard the end
        if loader != self.target[0] or batches < self.target[1]:
            return False
        if self.leader:
            self._said.wait()  # said or failed within the store client's timeout: either is final
        return not self.unsaid


class RankFailures:
    """A job's ranks tell each other when one's script failed, and, while they watch, that they are there (each
    writes its own count: O(ranks) requests a second in all). Tune's runs end at once when one failed, rather than
    wait in a collective until its timeout; rank 0 stops waiting for the report of a rank gone silent, and a
    sweep's rank 0 ends on it. Under ``run`` no rank's news ends another's training."""

    def __init__(self, meeting: Meeting, rank: int, world_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.meeting = meeting
        self.rank = rank
        self.world_size = world_size
        self.clock = clock
        self.silences = Silences(SILENT_S, clock)
        self._checked = self._asked = -math.inf
        self._beating = threading.Event()
        self._beater: threading.Thread | None = None

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ, beat: bool = False) -> RankFailures | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise. ``beat``:
        counting that this rank is there (:meth:`beat`) until :meth:`ended`."""
        meeting, launched = meeting_of(env, since=time.time()), Launched(env)
        if meeting is None or launched.rank is None:
            return None
        failures = cls(meeting, launched.rank, launched.number("WORLD_SIZE", 1))
        if beat:
            failures.beat(meeting_of(env, since=time.time()) or meeting)
        return failures

    def publish(self) -> None:
        """This rank's script failed."""
        if self.meeting.put(f"{FAILED_KEY}-{self.rank}", str(self.rank)):
            self.meeting.count(FAILED_KEY, 1)

    def ended(self, failed: bool) -> None:
        """This rank's watch is over: it stops counting that it is there (its report follows); ``failed``: its
        script failed, and the others' end now, not at their collective's timeout."""
        self.stop()
        if failed:
            self.publish()

    def done(self) -> None:
        """This rank's part of the job is over with nothing to report (a sweep's rank at its end): it says so, so
        that its silence from now on is no one's concern, and stops counting."""
        self.meeting.put(f"{REPORT_KEY}-{self.rank}", "done")
        self.stop()

    def reason(self) -> int | None:
        """Why this rank's script must end now for the others' sake (tune's runs): the rank whose script failed;
        None while none has."""
        now = self.clock()
        if now - self._asked < ALIVE_EVERY_S:
            return None
        self._asked = now
        return self.failed()

    def beat(self, meeting: Meeting) -> None:
        """Count that this rank is there every :data:`ALIVE_EVERY_S` on ``meeting`` (a connection of its own: the
        store's client is not shared between threads) until :meth:`stop`."""
        self._beating.clear()
        self._beater = threading.Thread(target=self._beat, args=(meeting,), name="dataprof-alive", daemon=True)
        self._beater.start()

    def _beat(self, meeting: Meeting) -> None:
        while not self._beating.is_set():
            meeting.count(f"{ALIVE_KEY}-{self.rank}", 1)
            self._beating.wait(ALIVE_EVERY_S)

    def stop(self) -> None:
        """Stop counting: this rank's watch is over (its report follows); the thread that counts is waited for
        (out of the store's client before the process may exit)."""
        self._beating.set()
        if self._beater is not None and self._beater is not threading.current_thread():
            self._beater.join(timeout=2.0)

    def gone(self, ranks: Iterable[int] | None = None) -> tuple[int, ...]:
        """The other ``ranks`` (every other by default) that counted that they were there, then went silent for
        :data:`SILENT_S` with their report unsaid. Read at most every :data:`ALIVE_EVERY_S` (a store's round trip
        per rank): none in between."""
        now = self.clock()
        if now - self._checked < ALIVE_EVERY_S:
            return ()
        self._checked = now
        found = []
        for rank in range(self.world_size) if ranks is None else ranks:
            count = self.meeting.count(f"{ALIVE_KEY}-{rank}") if rank != self.rank else 0
            if self.silences.silent_for(rank, count) is not None and self.meeting.get(f"{REPORT_KEY}-{rank}") is None:
                found.append(rank)
        return tuple(found)

    def failed(self) -> int | None:
        """The lowest other rank whose script failed in this job; None while none has."""
        if not self.meeting.count(FAILED_KEY):
            return None
        return next((rank for rank in range(self.world_size)
                     if rank != self.rank and self.meeting.get(f"{FAILED_KEY}-{rank}") is not None), None)
