"""Rank 0 of a distributed ``dataprof run`` (or of a tune run across ranks) gathers every rank's report where the
job's ranks meet, and turns each into the figures a run's document holds per rank."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dataprof.measure.watch.joining import latest, own_ticket
from dataprof.measure.watch.meeting import (
    ALIVE_KEY,
    END_KEY,
    FAILED_KEY,
    HEARD_KEY,
    REPORT_KEY,
    WHOIS_KEY,
    Meeting,
)
from dataprof.measure.watch.ranks import SILENT_S, RankFailures
from dataprof.results.codec import decode, encode
from dataprof.results.environment import RankInfo
from dataprof.results.run import RankRun, RunReport

RUN_GATHER_S = 120.0
"""How long rank 0 of a distributed ``dataprof run`` waits for the other ranks' reports once its own ended."""


@dataclass(frozen=True)
class RankWord:
    """What a rank says where the job's ranks meet: its host, its report, its node and the ranks on it, its ticket in
    the round (:func:`~dataprof.measure.watch.joining.latest` reads it)."""

    host: str
    report: RunReport
    node: int | None = None
    ranks_on_node: int | None = None
    ticket: int | None = None


Gathered = tuple[dict[int, RankWord], bool, tuple[int, ...]]
"""What rank 0 gathered: every rank's that came, by rank; whether the meeting could be reached; the ranks gone."""


def gather_reports(report: RunReport, info: RankInfo, meeting: Meeting, timeout_s: float = RUN_GATHER_S,
                   sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                   give_up: bool = True) -> Gathered | None:
    """Every rank says its report where the job's ranks meet (``meeting``: the launcher's store, across nodes, or
    a directory on one); rank 0 gets every rank's that came within ``timeout_s`` (by rank: its host, its node, the
    ranks on that node and the report as a document), whether the meeting could be reached (only its own when
    not), and the ranks it stopped waiting for once they went silent (:data:`SILENT_S` with nothing from their
    dataprof: their node gone; not where ``give_up`` is False: dataprof's own launch watches the nodes, and a
    rank 0 that ends is one its launcher cannot stop); other ranks None. The keys are removed once read.

    The ranks share no process group here: the training script has its own, so they meet outside it.
    """
    mine = json.dumps(encode(RankWord(info.host or socket.gethostname(), report, info.node, info.local_world_size,
                                      own_ticket())))
    said = meeting.put(f"{REPORT_KEY}-{info.rank}", mine)
    if info.rank != 0:
        return None
    deadline = clock() + timeout_s
    keys = [f"{REPORT_KEY}-{rank}" for rank in range(info.world_size)]
    found: dict[int, str] = {}
    peers, gone = RankFailures(meeting, info.rank, info.world_size, clock), set[int]()
    while said and len(found) + len(gone) < len(keys) and clock() < deadline:
        found.update({rank: text for rank, key in enumerate(keys)
                      if rank not in found and (text := meeting.get(key)) is not None and latest(meeting, rank, text)})
        gone.update(peers.gone(rank for rank in range(info.world_size) if rank not in found) if give_up else ())
        if len(found) + len(gone) < len(keys):
            sleep(0.2)
    found = found if said else {0: mine}
    for key in (*keys, END_KEY, HEARD_KEY, FAILED_KEY, *(f"{name}-{rank}" for name in (FAILED_KEY, ALIVE_KEY, WHOIS_KEY)
                                              for rank in range(info.world_size))):
        meeting.remove(key)  # the reports, the end, the ranks whose script failed, their counts of being there
    return {rank: decode(RankWord, json.loads(text)) for rank, text in sorted(found.items())}, said, \
        tuple(sorted(gone))


def gather_runs(report: RunReport, info: RankInfo, meeting: Meeting, timeout_s: float = RUN_GATHER_S,
                sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> RunReport | None:
    """Distributed ``dataprof run``: rank 0 gets its own report with every rank's figures (``ranks``), other ranks
    None (:func:`gather_reports`). A rank gone silent, or missing after ``timeout_s``, is named in a note."""
    gathered = gather_reports(report, info, meeting, timeout_s, sleep, clock)
    if gathered is None:
        return None
    found, reached, gone = gathered
    ranks = [_rank_run(rank, found[rank]) for rank in sorted(found)]
    return dataclasses.replace(report, ranks=tuple(ranks), notes=report.notes + missing_note(
        info.world_size, found, gone, timeout_s, "" if reached else f" ({meeting.where} could not be reached)"))


def missing_note(world_size: int, found: Mapping[int, Any], gone: tuple[int, ...], timeout_s: float,
             unreachable: str = "") -> tuple[str, ...]:
    """What is said of the ranks whose report did not come: those gone silent, the others not in time."""
    late = [rank for rank in range(world_size) if rank not in found and rank not in gone]
    return tuple(note for note in (
        f"ranks {', '.join(map(str, gone))} stopped answering (nothing from their dataprof for {SILENT_S:g} s): "
        "no report" if gone else None,
        f"ranks {', '.join(map(str, late))} left no report within {timeout_s:g} s{unreachable}" if late else None)
        if note is not None)


def _rank_run(rank: int, said: RankWord) -> RankRun:
    """One rank's figures from what it said: its busiest loader's, its tree's and its node's."""
    theirs = said.report
    loader = theirs.loaders[0] if theirs.loaders else None
    res, env = theirs.resources, theirs.environment
    return RankRun(rank=rank, host=said.host, exit_code=theirs.exit_code,
                   data_wait_fraction=loader.data_wait_fraction if loader else None,
                   samples_per_s=loader.samples_per_s if loader else None,
                   step_ms_p50=loader.step_ms.p50 if loader and loader.step_ms else None,
                   node=said.node, ranks_on_node=said.ranks_on_node,
                   num_workers=loader.num_workers if loader else None, node_cpus=env.usable_cpus,
                   node_cpu_quota=env.cpu_quota,
                   cpu_percent=res.cpu_percent, node_busy_percent=res.cpu_percent_system,
                   foreign_cpu_percent=res.foreign_cpu_percent,
                   node_cpu_count=env.cpu_count, storage_read_bytes_per_s=res.storage_read_bytes_per_s,
                   iowait_percent=res.iowait_percent, peak_memory_bytes=res.peak_memory_bytes)
