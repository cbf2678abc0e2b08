"""Ranks on this machine through torch.distributed's launcher (elastic launch, as ``torchrun`` does): how they
end, a rank that died named, and a stop said from another thread (a node gone silent)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dataprof.errors import Terminated, terminated_as_interrupted
from dataprof.results.environment import NodeJob

RANK_DIED = 130
"""Exit code when a rank dies or the ranks are interrupted: the sweep stopped on every rank, and what was
measured is kept (as for Ctrl-C)."""


@dataclasses.dataclass(frozen=True)
class Launched:
    """How ranks started by :func:`launch_ranks` ended."""

    code: int
    """0, or the lowest failing rank's own exit code, or :data:`RANK_DIED`."""
    died: str | None = None
    """When a rank died by a signal: which (``rank 1 died by SIGKILL``); the launcher then stopped the others."""
    values: Mapping[int, Any] = dataclasses.field(default_factory=dict)
    """What each rank's entry returned, by rank (when every rank returned)."""


class Stop:
    """Why the ranks under way must stop, said from another thread (a node gone silent): the reason is kept, and
    the launcher gets SIGTERM, as from Ctrl-C (it stops every rank of this node, then raises in the main thread),
    so the launch ends with the reason rather than waiting for ranks that wait for the gone node. Once the launch
    ended (:meth:`close`), nothing is sent."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, reason: str) -> None:
        with self._lock:
            if self.reason is None and not self._closed:
                self.reason = reason
                main = threading.main_thread().ident
                if main is not None:
                    signal.pthread_kill(main, signal.SIGTERM)

    def close(self) -> None:
        """The launch ended: no signal from now on; one sent as it ended is taken here, by a handler that does
        nothing, rather than by the command after it (which would read it as SIGTERM from outside)."""
        with self._lock:
            self._closed = True
        if self.reason is not None and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
            time.sleep(STOP_DELIVERY_S)  # a signal on its way lands in the sleep
            signal.signal(signal.SIGTERM, previous)


STOP_DELIVERY_S = 0.05
"""How long :meth:`Stop.close` leaves for a signal already sent to land."""


def launch_ranks(nproc_per_node: int, entry: Callable[..., Any], *args: Any, run_id: str | None = None,
                 nodes: NodeJob | None = None, stop: Stop | None = None, short_grace: bool = False) -> Launched:
    """Run ``entry(*args)`` as ``nproc_per_node`` ranks on this machine through torch.distributed's
    launcher (elastic launch, as ``torchrun --standalone``), as the job ``run_id`` (a fresh one by default); with
    ``nodes``, as this node's ranks of a job over every node (torchrun's static rendezvous at the port beside
    the tune's, node 0 hosting it; a node that has not joined within ``nodes.join_s`` fails the launch).

    When a rank dies by a signal, the launcher stops every other rank. Otherwise the code is the lowest failing
    rank's own (each rank prints its own error). A ``stop`` said meanwhile ends the launch with its reason, its
    ranks given :data:`STOP_GRACE_S` to end (``short_grace``: whenever the launcher stops them, as for ranks of
    dataprof's own that end at once on SIGTERM; a rank that does not then is stopped or hung). Across nodes,
    this node's launcher waits for the others' once its ranks ended for up to ``nodes.join_s`` (torch's launcher
    would wait 300 s for a node that vanished after its ranks ended).
    """
    import uuid

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _quiet_launcher()
    run_id = run_id or f"dataprof-{uuid.uuid4()}"
    logs = tempfile.mkdtemp(prefix="dataprof-ranks-")  # the launcher's own files, removed when it ends
    rendezvous: dict[str, Any] = {"min_nodes": 1, "max_nodes": 1, "rdzv_backend": "c10d",
                                  "rdzv_endpoint": "localhost:0"} if nodes is None else \
        {"min_nodes": nodes.nnodes, "max_nodes": nodes.nnodes, "rdzv_backend": "static",
         "rdzv_endpoint": nodes.runs_endpoint,
         "rdzv_configs": {"rank": nodes.node_rank, "timeout": max(1, int(nodes.join_s))}}
    config = LaunchConfig(nproc_per_node=nproc_per_node, run_id=run_id, max_restarts=0, start_method="spawn",
                          logs_specs=DefaultLogsSpecs(log_dir=logs), **rendezvous)
    handlers = {sig: handler for sig in (signal.SIGINT, signal.SIGTERM)
                if (handler := signal.getsignal(sig)) is not None}
    stop = stop or Stop()  # none given: one nobody says
    try:
        with terminated_as_interrupted(), one_thread_each(nproc_per_node), \
                _agent(nodes, stop, short_grace) as signalled:
            values = elastic_launch(config, entry)(*args)
    except SignalException:  # Ctrl-C (rank 0 has printed what it measured), or a stop
        return Launched(RANK_DIED, stop.reason)
    except Terminated:  # a stop before the launcher set its handlers; SIGTERM from outside stops the command
        if stop.reason is None:
            raise
        return Launched(RANK_DIED, stop.reason)
    except (RendezvousError, RuntimeError, TimeoutError) as exc:  # across nodes: a node that never joined
        if nodes is None:
            raise
        return Launched(RANK_DIED, stop.reason or
                        f"the nodes did not meet at {nodes.runs_endpoint} within {nodes.join_s:g} s ({exc})")
    except ChildFailedError as exc:
        return Launched(RANK_DIED, stop.reason) if stop.reason else _failed(exc, signalled)
    finally:  # the launcher's handlers raise its own SignalException: the caller's are put back
        stop.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        shutil.rmtree(logs, ignore_errors=True)
    return Launched(0, values=values or {})


def _quiet_launcher() -> None:
    """Torch's launcher logs nothing below critical: dataprof says what happened, in one line."""
    import logging

    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.multiprocessing")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.contextmanager
def one_thread_each(nproc_per_node: int) -> Iterator[None]:
    """``OMP_NUM_THREADS=1`` in the environment the ranks start with, while the block runs, where several ranks run
    here and it is not set, as torchrun sets it: else each rank's intra-op threads take every CPU and the ranks
    crowd each other out (a sweep's ranks loading in their main process ran 10x slower than under torchrun)."""
    if nproc_per_node < 2 or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


@contextlib.contextmanager
def _agent(nodes: NodeJob | None, stop: Stop, short_grace: bool = False) -> Iterator[dict[int, int]]:
    """Torch's launcher, while the block runs, with an agent that, across nodes, waits for the other nodes' once
    this node's ranks ended for ``nodes.join_s`` at most (its own default, 300 s, is not a launch option), and
    that, on a ``stop`` (or always, ``short_grace``), gives this node's ranks :data:`STOP_GRACE_S` after its
    SIGTERM before it kills them (its own 30 s is for a Ctrl-C, where a script may save its state; a rank of a
    stopped run waits on a node gone, in a collective no signal handler interrupts). With ``short_grace``, the
    ranks' processes, once one failed, get as long to end and as long again after a SIGTERM (torch's own join of
    them waits 30 s for a rank that does not end on SIGTERM), and those that already returned end at once. It
    yields the ranks seen dead by a signal before any was stopped (local rank: exit code), filled as they end:
    torch's launcher names the first failed rank it looks at, which may be one that ended after seeing it go."""
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext
    from torch.distributed.launcher import api as launcher
    from torch.multiprocessing.spawn import ProcessContext

    agent = launcher.LocalElasticAgent
    graced = inspect.signature(agent._shutdown).parameters.get("timeout") is not None  # older agents take none

    class Agent(agent):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if nodes is not None:
                kwargs["exit_barrier_timeout"] = nodes.join_s
            super().__init__(*args, **kwargs)

        def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, *args: Any, **kwargs: Any) -> None:
            if (short_grace or stop.reason is not None) and graced:
                super()._shutdown(death_sig, timeout=STOP_GRACE_S)
            else:
                super()._shutdown(death_sig, *args, **kwargs)

    join, poll = ProcessContext.join, MultiprocessContext._poll
    joined = short_grace and inspect.signature(join).parameters.get("grace_period") is not None

    def graced_join(self: Any, timeout: float | None = None, grace_period: float | None = None) -> Any:
        return join(self, timeout, STOP_GRACE_S if grace_period is None else grace_period)

    signalled: dict[int, int] = {}

    def poll_ending_returned(self: Any) -> Any:
        # a rank that returned waits for this event (its value read) before it ends; once a rank failed no value
        # is read, and a rank that returned would sit out the grace meant for ranks still running
        finished, ranks = getattr(self, "_worker_finished_event", None), getattr(self, "_pc", None)
        codes = [] if ranks is None else [process.exitcode for process in ranks.processes]
        signalled.update((rank, code) for rank, code in enumerate(codes) if code is not None and code < 0)
        if finished is not None and any(code not in (None, 0) for code in codes):
            finished.set()
        return poll(self)

    launcher.LocalElasticAgent = Agent  # type: ignore[misc]
    if joined:
        ProcessContext.join = graced_join  # type: ignore[method-assign]
        MultiprocessContext._poll = poll_ending_returned  # type: ignore[method-assign]
    try:
        yield signalled
    finally:
        launcher.LocalElasticAgent = agent  # type: ignore[misc]
        ProcessContext.join = join  # type: ignore[method-assign]
        MultiprocessContext._poll = poll  # type: ignore[method-assign]


STOP_GRACE_S = 5
"""How long a stopped launch's ranks have between SIGTERM and SIGKILL."""


def _failed(exc: Any, signalled: Mapping[int, int] | None = None) -> Launched:
    """How ranks that failed ended (a ``ChildFailedError``, and the ranks ``signalled``, by their exit codes, seen
    dead by a signal on this node): a rank that died by a signal, named; else the lowest failing rank's exit
    code."""
    died = {**(signalled or {}), **{rank: failure.exitcode for rank, failure in exc.failures.items()
                                    if failure.exitcode < 0}}
    if not died:
        return Launched(exc.failures[min(exc.failures)].exitcode)
    rank = min(died)
    try:
        name = signal.Signals(-died[rank]).name
    except ValueError:
        name = f"signal {-died[rank]}"
    return Launched(RANK_DIED, f"rank {rank} died by {name}")
