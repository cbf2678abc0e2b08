"""Ranks under ``torchrun``: who this process is, and the few collectives a sweep needs.

Coordination uses ``torch.distributed`` with the ``gloo`` backend, so it works
with or without GPUs. Rank 0 runs the search; every config is broadcast from
it, a barrier opens each trial so all ranks measure at the same time, and the
ranks' results are gathered back on rank 0, which aggregates and reports.
Only the dataprof process of each rank joins the group: hosts, trials and
DataLoader workers never touch it. Beside the group, each rank counts that it is
there where the job's ranks meet (:meth:`Coordinator.watch_peers`): a rank gone
silent (its node off, its network cut, its process stopped) ends the sweep in
seconds, not at the group's timeout, which no signal interrupts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from dataprof.errors import DataprofError, ExitCode, TargetError, UsageError, terminated_as_interrupted
from dataprof.measure.exchange import all_gather_json, broadcast_json, gather_json
from dataprof.measure.launch import RANK_DIED, Stop, launch_ranks
from dataprof.measure.watch.joining import latest, meeting_of, own_ticket
from dataprof.measure.watch.meeting import (
    ALIVE_EVERY_S,
    ALIVE_KEY,
    CONNECT_S,
    END_KEY,
    FAILED_KEY,
    REPORT_KEY,
    WHOIS_KEY,
    Meeting,
    exchange_dir,
)
from dataprof.measure.watch.ranks import SILENT_S, RankFailures
from dataprof.measure.watch.settings import WatchSettings
from dataprof.measure.watch.watcher import watch
from dataprof.results.codec import decode, encode
from dataprof.results.environment import NodeJob, RankInfo
from dataprof.results.knobs import LoaderConfig
from dataprof.results.run import RankRun, RunReport
from dataprof.results.trial import TrialResult


def rank_from_env(env: Mapping[str, str] = os.environ) -> RankInfo | None:
    """The rank torchrun started this process as; None outside a job of two or more ranks."""
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        if world < 2 or "RANK" not in env:
            return None
        return RankInfo(rank=int(env["RANK"]), world_size=world, local_rank=int(env.get("LOCAL_RANK", "0")),
                        local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
                        node=int(env.get("GROUP_RANK", env.get("NODE_RANK", "0"))), host=socket.gethostname())
    except ValueError as exc:
        raise UsageError(f"torchrun's environment is malformed ({exc})") from None


class RankLost(DataprofError):
    """A collective of the sweep's group failed: a rank's dataprof is gone (its node died, its connection closed)
    or the group's timeout passed. The trials measured before are kept; this rank's sweep ends."""

    exit_code = ExitCode.INTERRUPTED


def _lost(exc: RuntimeError) -> RankLost:
    """``exc`` (gloo's ``[…/pair.cc:561] Connection closed by peer [10.0.0.2]:28385. This is typically …``) as a
    :class:`RankLost` that says, in one line, what gloo said."""
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    said = text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
    return RankLost(f"a rank left the sweep's group (gloo: {said.split('. ', 1)[0].rstrip('.')})")


class Coordinator:
    """The gloo process group of a distributed sweep (import of torch.distributed happens here). A collective
    that fails because a rank is gone raises :class:`RankLost`."""

    def __init__(self, info: RankInfo, timeout_s: float) -> None:
        import torch.distributed as dist

        self.info = info
        self.dist = dist
        self.reported_by_rank_0 = False
        """Set by :meth:`agree` on a rank whose failure to start rank 0 reports: this rank ends quietly."""
        self._peers: RankFailures | None = None
        self._closed = threading.Event()
        self._watching: threading.Thread | None = None
        if not dist.is_available():
            raise UsageError("this torch build has no torch.distributed: a distributed sweep cannot run")
        try:
            dist.init_process_group("gloo", rank=info.rank, world_size=info.world_size,
                                    timeout=timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as exc:
            raise UsageError(f"rank {info.rank} could not join the ranks' gloo group ({exc}); start the ranks with "
                             "torchrun, which sets MASTER_ADDR and MASTER_PORT") from exc

    @property
    def leader(self) -> bool:
        """Rank 0: it searches, aggregates and reports."""
        return self.info.rank == 0

    def _collective(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except RuntimeError as exc:  # gloo's own (DistBackendError is one): a peer's connection closed, a timeout
            raise _lost(exc) from exc

    def broadcast(self, config: LoaderConfig | None) -> LoaderConfig | None:
        """Rank 0's ``config`` (None: the sweep ends), on every rank."""
        said = self._collective(broadcast_json, self.dist, None if config is None or not self.leader
                                else config.to_dict(), self.leader)
        return None if said is None else LoaderConfig.from_dict(said)

    def gather(self, result: TrialResult) -> list[tuple[RankInfo, TrialResult]] | None:
        """Every rank's place and ``result`` in rank order, on rank 0 (None elsewhere)."""
        said = self._collective(gather_json, self.dist, {
            "info": dataclasses.asdict(self.info), "result": encode(result),
            "batch_marks": list(result.epochs.batch_marks)}, self.info.world_size, self.leader)  # not in its JSON
        return None if said is None else [(RankInfo(**one["info"]), decode(TrialResult, one["result"]).replaced(
            batch_marks=tuple(int(mark) for mark in one["batch_marks"]))) for one in said]

    def agree(self, error: str | None) -> bool:
        """Every rank says whether its dataset loaded (``error``: why not). A rank that loaded raises
        TargetError naming the first rank that did not; a rank that did not goes on to raise its own error.
        Returns whether rank 0 reports this rank's error: its own is the same, or it names this rank
        (:attr:`reported_by_rank_0` says so on ranks other than 0)."""
        errors = [str(said) if said is not None else None
                  for said in self._collective(all_gather_json, self.dist, error, self.info.world_size)]
        failed = [(rank, message) for rank, message in enumerate(errors) if message]
        if failed and error is None:
            rank, message = failed[0]
            self.reported_by_rank_0 = rank == 0  # rank 0 reports its own error
            raise TargetError(f"rank {rank} could not start: {message}")
        reported = error is not None and (errors[0] == error or (errors[0] is None and failed[0][0] == self.info.rank))
        self.reported_by_rank_0 = reported and not self.leader
        return reported

    def barrier(self) -> None:
        """Wait until every rank reaches this point (each trial starts on all ranks at once)."""
        self._collective(self.dist.barrier)

    def watch_peers(self, on_gone: Callable[[str], None]) -> None:
        """Count that this rank is there where the job's ranks meet, and, in a thread of its own, read the counts
        of the ranks it waits for (rank 0: every other; the others: rank 0, which ends the sweep everywhere):
        ``on_gone(why)``, from that thread, once one counted and then went silent for
        :data:`~dataprof.measure.watch.ranks.SILENT_S` before :meth:`close` said it was done. Nothing where the
        ranks have no place to meet."""
        peers = RankFailures.of(beat=True)
        if peers is None:
            return
        self._peers = peers
        self._watching = threading.Thread(target=self._watch, args=(peers, on_gone), name="dataprof-peers",
                                          daemon=True)
        self._watching.start()

    def _watch(self, peers: RankFailures, on_gone: Callable[[str], None]) -> None:
        waited_for = None if self.leader else (0,)
        while not self._closed.wait(ALIVE_EVERY_S):
            gone = peers.gone(waited_for)
            if gone:
                on_gone(f"rank {gone[0]} stopped answering (nothing from its dataprof for {SILENT_S:g} s)")
                return

    def close(self) -> None:
        """Say this rank is done (its silence from now on is no one's concern), stop counting, and leave the
        process group."""
        self._closed.set()
        if self._watching is not None:
            self._watching.join(timeout=CONNECT_S)  # its reads of the meeting are over: the client is not shared
        if self._peers is not None:
            self._peers.done()
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def follow_rank_0(coordinator: Coordinator, run: Callable[[], object]) -> None:
    """A rank other than 0: ``run`` its part of the sweep, which measures with rank 0 and reports nothing.

    An error rank 0 reports too ends this rank quietly (exiting with an error would let the launcher stop
    rank 0 before it prints; rank 0's exit code is the run's); its own error is raised, named by its rank.
    """
    try:
        run()
    except DataprofError as exc:
        if coordinator.reported_by_rank_0:
            return
        exc.message = f"rank {coordinator.info.rank}: {exc.message}"
        raise
    finally:
        coordinator.close()


def watch_ranks(settings: WatchSettings, nproc_per_node: int, nodes: NodeJob | None = None,
                run_id: str | None = None, stop: Stop | None = None) -> list[tuple[str, RunReport]] | None:
    """Run the script as ``nproc_per_node`` ranks of one job on this machine (torchrun's environment set for each,
    ``OMP_NUM_THREADS=1`` where it is not set, as torchrun sets it), every rank watched as ``dataprof run`` watches
    it under torchrun; each rank's host and report, in rank order. None when the ranks were interrupted (Ctrl-C)
    or one died.

    With ``nodes``, this node's ranks of the job ``run_id`` over every node: on node 0, every node's ranks'
    (they say them where the job's ranks meet); elsewhere, an empty list."""
    import uuid

    run_id = run_id or f"dataprof-tune-{uuid.uuid4()}"
    env = {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": "1"}  # as torchrun sets it for ranks
    try:
        launched = launch_ranks(nproc_per_node, _watch_rank, settings, env, nodes is not None, run_id=run_id,
                                nodes=nodes, stop=stop)
    finally:
        shutil.rmtree(exchange_dir({"TORCHELASTIC_RUN_ID": run_id}), ignore_errors=True)
    if launched.died is not None:
        raise DataprofError(f"{launched.died}; every rank of the run was stopped")
    if launched.code == RANK_DIED:
        return None
    if launched.code or len(launched.values) != nproc_per_node:
        raise DataprofError(f"the ranks' watch failed (exit code {launched.code})")
    if nodes is None:
        return [(socket.gethostname(), RunReport.from_dict(launched.values[rank])) for rank in sorted(launched.values)]
    if not nodes.leader:
        return []
    if launched.values[0] is None:  # rank 0 got SIGTERM (its script ended as by Ctrl-C): it gathered nothing
        return None
    said, _, gone = launched.values[0]
    world = nodes.nnodes * nproc_per_node
    if len(said) < world:
        raise DataprofError("; ".join(_missing(world, said, gone, RUN_GATHER_S)))
    return [(str(said[rank]["host"]), RunReport.from_dict(said[rank]["report"])) for rank in sorted(said)]


def _watch_rank(settings: WatchSettings, env: Mapping[str, str], across_nodes: bool) -> Any:
    """One rank of :func:`watch_ranks`, with ``env`` set: its script watched; its report as a document (returned
    to the launcher); ``across_nodes``, every rank's (said where the job's ranks meet), on rank 0 alone. SIGTERM
    (the launcher stopping the ranks) ends the script as Ctrl-C does, and then no rank waits for the others'
    reports (None: the launch that stops them keeps none)."""
    os.environ.update(env)
    with terminated_as_interrupted():
        report = watch(settings)
    if not across_nodes:
        return report.to_dict()
    if report.ended_by == "SIGTERM":
        return None
    info, meeting = rank_from_env(), meeting_of()
    assert info is not None and meeting is not None  # a rank of a launched job
    return gather_reports(report, info, meeting, give_up=False)


RUN_GATHER_S = 120.0
"""How long rank 0 of a distributed ``dataprof run`` waits for the other ranks' reports once its own ended."""


Gathered = tuple[dict[int, dict[str, Any]], bool, tuple[int, ...]]
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
    mine = json.dumps({"host": info.host or socket.gethostname(), "node": info.node, "ticket": own_ticket(),
                       "ranks_on_node": info.local_world_size, "report": report.to_dict()})
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
    for key in (*keys, END_KEY, FAILED_KEY, *(f"{name}-{rank}" for name in (FAILED_KEY, ALIVE_KEY, WHOIS_KEY)
                                              for rank in range(info.world_size))):
        meeting.remove(key)  # the reports, the end, the ranks whose script failed, their counts of being there
    return {rank: json.loads(text) for rank, text in sorted(found.items())}, said, tuple(sorted(gone))


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
    return dataclasses.replace(report, ranks=tuple(ranks), notes=report.notes + _missing(
        info.world_size, found, gone, timeout_s, "" if reached else f" ({meeting.where} could not be reached)"))


def _missing(world_size: int, found: Mapping[int, Any], gone: tuple[int, ...], timeout_s: float,
             unreachable: str = "") -> tuple[str, ...]:
    """What is said of the ranks whose report did not come: those gone silent, the others not in time."""
    late = [rank for rank in range(world_size) if rank not in found and rank not in gone]
    return tuple(note for note in (
        f"ranks {', '.join(map(str, gone))} stopped answering (nothing from their dataprof for {SILENT_S:g} s): "
        "no report" if gone else None,
        f"ranks {', '.join(map(str, late))} left no report within {timeout_s:g} s{unreachable}" if late else None)
        if note is not None)


def _rank_run(rank: int, said: dict[str, Any]) -> RankRun:
    """One rank's figures from what it said: its busiest loader's, its tree's and its node's."""
    theirs = RunReport.from_dict(said["report"])
    loader = theirs.loaders[0] if theirs.loaders else None
    res, env = theirs.resources, theirs.environment
    return RankRun(rank=rank, host=said["host"], exit_code=theirs.exit_code,
                   data_wait_fraction=loader.data_wait_fraction if loader else None,
                   samples_per_s=loader.samples_per_s if loader else None,
                   step_ms_p50=loader.step_ms["p50"] if loader and loader.step_ms else None,
                   node=said.get("node"), ranks_on_node=said.get("ranks_on_node"),
                   num_workers=loader.num_workers if loader else None, node_cpus=env.usable_cpus,
                   node_cpu_quota=env.cpu_quota,
                   cpu_percent=res.cpu_percent, node_busy_percent=res.cpu_percent_system,
                   foreign_cpu_percent=res.foreign_cpu_percent,
                   node_cpu_count=env.cpu_count, storage_read_bytes_per_s=res.storage_read_bytes_per_s,
                   iowait_percent=res.iowait_percent, peak_memory_bytes=res.peak_memory_bytes)
