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
import os
import shutil
import socket
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from dataprof.errors import DataprofError, ExitCode, TargetError, UsageError, terminated_as_interrupted
from dataprof.measure.exchange import all_gather_json, broadcast_json, gather_json
from dataprof.measure.launch import RANK_DIED, Stop, launch_ranks
from dataprof.measure.watch.gather import RUN_GATHER_S, gather_reports, missing_note
from dataprof.measure.watch.joining import meeting_of
from dataprof.measure.watch.launched import Launched
from dataprof.measure.watch.meeting import ALIVE_EVERY_S, CONNECT_S
from dataprof.measure.watch.ranks import SILENT_S, RankFailures
from dataprof.measure.watch.settings import WatchSettings
from dataprof.measure.watch.watcher import watch
from dataprof.results.codec import decode, encode
from dataprof.results.environment import NodeJob, RankInfo
from dataprof.results.knobs import LoaderConfig
from dataprof.results.run import RunReport
from dataprof.results.trial import TrialResult


def rank_from_env(env: Mapping[str, str] = os.environ) -> RankInfo | None:
    """The rank torchrun started this process as; None outside a job of two or more ranks."""
    try:
        return Launched(env).rank_info(socket.gethostname())
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
    ``OMP_NUM_THREADS`` as torchrun sets it: ``measure.launch.one_thread_each``), every rank watched as ``dataprof
    run`` watches it under torchrun; each rank's host and report, in rank order. None when the ranks were
    interrupted (Ctrl-C) or one died.

    With ``nodes``, this node's ranks of the job ``run_id`` over every node: on node 0, every node's ranks'
    (they say them where the job's ranks meet); elsewhere, an empty list."""
    import uuid

    run_id = run_id or f"dataprof-tune-{uuid.uuid4()}"
    try:
        launched = launch_ranks(nproc_per_node, _watch_rank, settings, nodes is not None, run_id=run_id,
                                nodes=nodes, stop=stop)
    finally:
        shutil.rmtree(Launched({"TORCHELASTIC_RUN_ID": run_id}).exchange_dir, ignore_errors=True)
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
        raise DataprofError("; ".join(missing_note(world, said, gone, RUN_GATHER_S)))
    return [(said[rank].host, said[rank].report) for rank in sorted(said)]


def _watch_rank(settings: WatchSettings, across_nodes: bool) -> Any:
    """One rank of :func:`watch_ranks`: its script watched; its report as a document (returned
    to the launcher); ``across_nodes``, every rank's (said where the job's ranks meet), on rank 0 alone. SIGTERM
    (the launcher stopping the ranks) ends the script as Ctrl-C does, and then no rank waits for the others'
    reports (None: the launch that stops them keeps none)."""
    with terminated_as_interrupted():
        report = watch(settings)
    if not across_nodes:
        return report.to_dict()
    if report.ended_by == "SIGTERM":
        return None
    info, meeting = rank_from_env(), meeting_of()
    assert info is not None and meeting is not None  # a rank of a launched job
    return gather_reports(report, info, meeting, give_up=False)
