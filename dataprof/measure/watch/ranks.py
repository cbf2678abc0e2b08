"""The ranks of one job end their watch at the same batch, and learn at once when one's script failed.

Synchronous data-parallel training moves in lockstep: each step all-reduces with every rank. A watch ended by
time on each rank's own clock stops the ranks at different batches, and a rank still stepping then all-reduces
with a rank that has left (gloo: "Connection closed by peer"): the training fails where it should have ended.
So only rank 0's clock counts: at its deadline it names a batch a little ahead, where the job's ranks meet
(``meeting``: the launcher's store, across nodes, or a directory on one), and every rank ends once its own loader
has delivered that many batches. Where rank 0 cannot say it, no rank ends early: the training goes on, watched to
its end. The ranks meet outside the training's process group because that group is the script's own.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from dataprof.measure.watch.meeting import ALIVE_EVERY_S, ALIVE_KEY, Meeting, Silences, job_rank, meeting_of

MARGIN_BATCHES = 2
"""Rank 0 names the batch this many past its own deadline: a rank in lockstep is at most one batch ahead of it
(it cannot fetch a batch before the step of the last one all-reduced). A rank further ahead (gradients
accumulated over more batches between all-reduces) ends where it is."""
END_KEY = "end"
"""The key under which rank 0 names the loader and the batch to end at (``loader batches``)."""
FAILED_KEY = "failed"
"""The counter of ranks whose script failed; each also says so under ``failed-<rank>``."""
REPORT_KEY = "report"
"""Where each rank of a distributed ``dataprof run`` says its report (``report-<rank>``)."""
SILENT_S = 15.0
"""A rank whose dataprof counted that it was there and has been silent this long since, its report unsaid, is
gone (its node died, or the network to it): the others stop waiting for it."""


class RankEnd:
    """One rank's side of the shared end: rank 0 says the batch to end at, the others hear it."""

    def __init__(self, meeting: Meeting, leader: bool) -> None:
        self.meeting = meeting
        self.leader = leader
        self.target: tuple[int, int] | None = None
        """The loader (its number in the script) and its batch count at which every rank ends, once known."""
        self.unsaid = False
        """Rank 0 could not say the end: no rank ends early (its own clock alone would break the training)."""

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ) -> RankEnd | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise."""
        meeting = meeting_of(env, since=time.time())
        return None if meeting is None else cls(meeting, job_rank(env) == 0)

    def publish(self, loader: int, batches: int) -> tuple[int, int] | None:
        """Rank 0 at its deadline, with its ``loader`` at ``batches``: name the batch every rank ends at; None
        when it could not be said."""
        target = (loader, batches + MARGIN_BATCHES)
        if not self.meeting.put(END_KEY, f"{target[0]} {target[1]}"):
            self.unsaid = True
            return None
        self.target = target
        return target

    def read(self) -> tuple[int, int] | None:
        """Another rank: the end rank 0 named, once it has (kept from then on)."""
        if self.target is None:
            said = self.meeting.get(END_KEY)
            try:
                loader, batches = (int(word) for word in (said or "").split())
            except ValueError:
                return None
            self.target = (loader, batches)
        return self.target

    def reached(self, loader: int, batches: int, deadline_passed: bool) -> bool:
        """Whether this rank ends now, its ``loader`` having delivered ``batches`` (``deadline_passed``: this
        rank's own clock says the window is over; only rank 0's counts)."""
        if self.target is None:
            if self.leader:
                if not deadline_passed or self.unsaid or self.publish(loader, batches) is None:
                    return False
            elif self.read() is None:
                return False
        assert self.target is not None
        return loader == self.target[0] and batches >= self.target[1]


class RankFailures:
    """A job's ranks tell each other when one's script failed, and, while they watch, that they are there: the
    others' watches end their scripts at once when one failed or went silent (its node gone), rather than leave
    them in a collective until its timeout, and rank 0 stops waiting for a gone rank's report."""

    def __init__(self, meeting: Meeting, rank: int, world_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.meeting = meeting
        self.rank = rank
        self.world_size = world_size
        self.clock = clock
        self.silences = Silences(SILENT_S, clock)
        self._checked = -math.inf
        self._beating = threading.Event()

    @classmethod
    def of(cls, env: Mapping[str, str] = os.environ, beat: bool = False) -> RankFailures | None:
        """This process's, in a job of two or more ranks (torchrun's environment); None otherwise. ``beat``:
        counting that this rank is there (:meth:`beat`) until :meth:`ended`."""
        meeting, rank = meeting_of(env, since=time.time()), job_rank(env)
        if meeting is None or rank is None:
            return None
        failures = cls(meeting, rank, int(env["WORLD_SIZE"]))
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

    def reason(self, gone: bool = True) -> str | None:
        """Why this rank's script must end now for the others' sake: another rank's script failed, or (``gone``)
        another rank went silent; None while neither."""
        if (failed := self.failed()) is not None:
            return f"rank {failed} of the job failed"
        if gone and (gone_ranks := self.gone()):
            return f"rank {gone_ranks[0]} of the job stopped answering (nothing from its dataprof for {SILENT_S:g} s)"
        return None

    def beat(self, meeting: Meeting) -> None:
        """Count that this rank is there every :data:`ALIVE_EVERY_S` on ``meeting`` (a connection of its own: the
        store's client is not shared between threads) until :meth:`stop`."""
        self._beating.clear()
        threading.Thread(target=self._beat, args=(meeting,), name="dataprof-alive", daemon=True).start()

    def _beat(self, meeting: Meeting) -> None:
        while not self._beating.is_set():
            meeting.count(f"{ALIVE_KEY}-{self.rank}", 1)
            self._beating.wait(ALIVE_EVERY_S)

    def stop(self) -> None:
        """Stop counting: this rank's watch is over (its report follows)."""
        self._beating.set()

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
