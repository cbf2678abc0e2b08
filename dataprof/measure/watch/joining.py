"""How a rank joins the place its job's ranks meet (:mod:`~dataprof.measure.watch.meeting`): the round of the job
it belongs to, its ticket there and its end, and whether the ranks can meet at all (a launcher without torchrun's
agent, over several nodes, leaves them no common place)."""

from __future__ import annotations

import atexit
import json
import os
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta

from dataprof.measure.watch.launched import Launched
from dataprof.measure.watch.meeting import (
    CONNECT_S,
    END_KEY,
    HEARD_KEY,
    OWN_KEYS,
    WHOIS_KEY,
    FolderMeeting,
    Meeting,
    StoreMeeting,
)

ROUND_ENV = "DATAPROF_ROUND"
"""Where a rank's dataprof keeps the round it joined (``<run id> <nonce>``), for its own later meetings and the
script it watches."""


def meeting_of(env: Mapping[str, str] = os.environ, since: float | None = None,
               connect_s: float = CONNECT_S) -> Meeting | None:
    """Where this process's job meets: the launcher's store when torchrun serves one (under keys of the round this
    rank joined: :func:`join_round`; this process's own rank, with ``os.environ``, joins once and leaves at its
    exit), else a directory (where what is older than ``since`` is an earlier job's); None outside a job of two or
    more ranks."""
    launched = Launched(env)
    rank, store = launched.rank, launched.store
    if rank is None:
        return None
    if store is None:
        return FolderMeeting(launched.exchange_dir, since)
    kept = env.get(ROUND_ENV, "").split()
    if len(kept) == 3 and kept[0] == store.run_id:
        nonce = kept[1]
    else:
        job = StoreMeeting(store.host, store.port, f"dataprof/{store.run_id}/", connect_s)
        nonce, ticket = join_round(job)
        mine = job.within(f"{nonce}/")
        for key in [*(f"{name}-{rank}" for name in OWN_KEYS), *([END_KEY, HEARD_KEY] if rank == 0 else [])]:
            mine.remove(key)  # left by a rank of an earlier round joined so (its dataprof killed outright)
        mine.put(f"{WHOIS_KEY}-{rank}", str(ticket))
        if env is os.environ:
            os.environ[ROUND_ENV] = f"{store.run_id} {nonce} {ticket}"
            atexit.register(leave_round, job)
    return StoreMeeting(store.host, store.port, f"dataprof/{store.run_id}/{nonce}/", connect_s)


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
    store = job.connected()
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


def latest(meeting: Meeting, rank: int, text: str) -> bool:
    """Whether ``text``, what rank ``rank`` said, is from its latest dataprof in the round: its ticket is the one
    under ``whois-<rank>`` (or either is unknown: a directory, a store that was not reached)."""
    try:
        said = json.loads(text).get("ticket")
    except (ValueError, AttributeError):  # not a report (a sweep's rank says "done")
        return True
    whois = meeting.get(f"{WHOIS_KEY}-{rank}")
    return said is None or whois is None or str(said) == whois
