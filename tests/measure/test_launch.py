"""How a launch's ranks end: a stop said from another thread (node 0's watch of the other nodes) reaches the launch, and
only the launch; the graces ranks get; a rank that returned is not held by one that failed."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from dataprof.errors import Terminated, terminated_as_interrupted
from dataprof.measure.launch import STOP_GRACE_S, Stop, _agent, one_thread_each
from dataprof.results.environment import NodeJob


def test_a_stop_reaches_the_main_thread_as_sigterm_with_its_reason_and_nothing_after_the_launch() -> None:
    stop = Stop()
    with terminated_as_interrupted(), pytest.raises(Terminated):
        threading.Timer(0.05, stop, ["node 1 stopped answering"]).start()
        time.sleep(10)  # the launch, waiting for ranks that wait for the gone node
    stop("said again")  # once: the first reason stands, no second signal
    stop.close()
    assert stop.reason == "node 1 stopped answering"

    ended = Stop()
    ended.close()  # the launch ended before the node fell silent
    with terminated_as_interrupted():
        ended("node 1 stopped answering")
        time.sleep(0.1)  # nothing lands
    assert ended.reason is None


class _Agent:
    """Torch's launcher's agent, as far as the launch's shutdown goes: the grace it gives the ranks."""

    graces: list[tuple[int, float]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.kwargs = kwargs

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> None:
        self.graces.append((death_sig, timeout))


def test_a_stopped_launch_gives_its_ranks_a_short_grace_and_a_ctrl_c_the_launcher_s_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.launcher import api as launcher

    monkeypatch.setattr(launcher, "LocalElasticAgent", _Agent)
    stop = Stop()
    with _agent(NodeJob(2, 0, "127.0.0.1", 29500, join_s=7.0), stop):
        agent = launcher.LocalElasticAgent()
        assert agent.kwargs == {"exit_barrier_timeout": 7.0}  # not torch's 300 s for a node gone at the end
        agent._shutdown(signal.SIGINT, timeout=30)  # Ctrl-C: the script may save its state
        stop.reason = "node 1 stopped answering"
        agent._shutdown(signal.SIGTERM, timeout=30)
    assert _Agent.graces == [(signal.SIGINT, 30), (signal.SIGTERM, STOP_GRACE_S)]
    assert launcher.LocalElasticAgent is _Agent  # put back


def test_a_rank_dead_by_a_signal_is_named_even_when_the_launcher_first_saw_one_that_ended_after_it() -> None:
    from types import SimpleNamespace

    from dataprof.measure.launch import RANK_DIED, Launched, _failed

    seen_first = SimpleNamespace(failures={0: SimpleNamespace(exitcode=130)})  # rank 0 ended once rank 1 left
    assert _failed(seen_first, {1: -signal.SIGKILL}) == Launched(RANK_DIED, "rank 1 died by SIGKILL")
    assert _failed(seen_first, {}) == Launched(130)
    killed = SimpleNamespace(failures={1: SimpleNamespace(exitcode=-signal.SIGSEGV)})
    assert _failed(killed) == Launched(RANK_DIED, "rank 1 died by SIGSEGV")


def _fails_on_rank_0(marks: str) -> None:
    """Rank 0 fails; rank 1 returns at once and leaves a mark when its process ends by itself (a finalizer runs at
    a process's own end, not when it is terminated)."""
    import multiprocessing.util
    import os
    from pathlib import Path

    if os.environ["RANK"] == "0":
        time.sleep(0.5)  # rank 1 has returned and waits to be read
        raise SystemExit(3)
    multiprocessing.util.Finalize(None, Path(marks, "rank-1-ended").touch, exitpriority=0)



def test_ranks_get_one_openmp_thread_each_as_torchrun_gives_them_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with one_thread_each(2):
        assert os.environ["OMP_NUM_THREADS"] == "1"  # what the ranks start with
    assert "OMP_NUM_THREADS" not in os.environ  # dataprof's own process as it was
    with one_thread_each(1):
        assert "OMP_NUM_THREADS" not in os.environ  # one rank: torchrun leaves it too
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    with one_thread_each(2):
        assert os.environ["OMP_NUM_THREADS"] == "4"  # the user's own

@pytest.mark.slow
def test_a_rank_that_returned_ends_by_itself_once_another_failed_not_at_the_end_of_the_grace(tmp_path: Path) -> None:
    from dataprof.measure.launch import launch_ranks

    launched = launch_ranks(2, _fails_on_rank_0, str(tmp_path), short_grace=True)
    assert launched.code == 3 and launched.died is None
    assert (tmp_path / "rank-1-ended").exists()  # not SIGTERMed after the grace, as torch's launcher would
