"""Ending a script that overstays: SIGINT, SIGTERM, then SIGKILL, later while it is still writing; and the ranks
of a job telling each other that one's script failed."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from dataprof.measure.watch.collector import Outcome
from dataprof.measure.watch.meeting import FolderMeeting
from dataprof.measure.watch.ranks import RankFailures
from dataprof.measure.watch.settings import WatchSettings
from dataprof.measure.watch.stopping import Stopper
from dataprof.measure.watch.watcher import _overdue
from dataprof.results.vocabulary import StopCause


class FakeProc:
    pid = 4242

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        import signal

        self.sent.append(signal.Signals(sig).name)


def stepped(written: list[dict[str, int] | None], seconds: float, write_grace_s: float = 30.0,
            ends_at: float | None = None) -> tuple[list[tuple[float, str]], Stopper]:
    """The signals a Stopper sends over ``seconds`` of a fake clock (the process ending by itself at ``ends_at``),
    with the files open for writing read in turn, and the Stopper."""
    now = [0.0]
    proc = FakeProc()
    reads = iter(written)
    stopper = Stopper(proc, clock=lambda: now[0], grace_s=5.0, write_grace_s=write_grace_s,
                      written=lambda pid: next(reads, written[-1]))
    stopper.start()
    sent: list[tuple[float, str]] = [(0.0, name) for name in proc.sent]
    while now[0] < seconds:
        now[0] += 0.5
        if ends_at is not None and now[0] >= ends_at:
            proc.returncode = 0
        before = len(proc.sent)
        stopper.poll()
        sent += [(now[0], name) for name in proc.sent[before:]]
    return sent, stopper


def test_an_overstaying_script_gets_sigint_then_sigterm_then_sigkill() -> None:
    assert stepped([{}], 20.0)[0] == [(0.0, "SIGINT"), (5.0, "SIGTERM"), (10.0, "SIGKILL")]
    assert stepped([None], 20.0)[0] == [(0.0, "SIGINT"), (5.0, "SIGTERM"), (10.0, "SIGKILL")]  # nothing said: macOS


def test_no_signal_lands_while_a_file_the_script_writes_is_growing_within_a_stated_bound() -> None:
    """A ``finally: torch.save(...)`` still writing the user's checkpoint when the run's time is up: no signal
    until the file stops growing; one that writes without end is signalled once the bound is spent, and says
    which file was cut."""
    checkpoint = [{"ckpt.pt": size} for size in range(0, 16_000_000, 1_000_000)] + [{}]  # 16 looks, then closed
    sent, stopper = stepped(checkpoint, 40.0, ends_at=16.0)
    assert sent == [] and stopper.cut is None  # it finished writing and ended by itself: never signalled
    sent, stopper = stepped(checkpoint, 60.0)
    assert sent[0][1] == "SIGINT" and 20.0 <= sent[0][0] <= 22.0  # a grace after the write is done
    assert [name for _, name in sent] == ["SIGINT", "SIGTERM", "SIGKILL"] and stopper.said() == \
        "ended by SIGINT, then SIGTERM, then SIGKILL"
    idle = stepped([{"train.log": 10}], 20.0)[0]  # open for writing, not growing: one look more, then the signal
    assert idle[0] == (1.0, "SIGINT")
    endless = [{"run.log": size} for size in range(0, 100_000, 10)]
    sent, stopper = stepped(endless, 60.0, write_grace_s=30.0)
    assert sent[0] == (31.0, "SIGINT") and stopper.cut == "run.log"  # 30 s from the growth first seen
    assert "a signal landed while run.log was still being written: the 30 s the signals wait" in stopper.said()


def test_a_rank_whose_script_failed_ends_the_others_and_a_stale_mark_does_not(tmp_path: Path) -> None:
    now = time.time()
    one, zero = (RankFailures(FolderMeeting(tmp_path / "job", since=now), rank, 4) for rank in (1, 0))
    assert zero.failed() is None and one.failed() is None
    one.publish()
    assert zero.failed() == 1 and one.failed() is None  # a rank's own failure is not news to it
    earlier = tmp_path / "earlier"
    RankFailures(FolderMeeting(earlier), 3, 4).publish()
    for mark in earlier.iterdir():  # another job's with the same id, an hour ago
        os.utime(mark, (now - 3600, now - 3600))
    assert RankFailures(FolderMeeting(earlier, since=now), 0, 4).failed() is None
    assert RankFailures(FolderMeeting(earlier), 0, 4).failed() == 3
    assert RankFailures.of({"WORLD_SIZE": "1", "RANK": "0"}) is None


def test_a_run_past_its_limit_names_a_tmpdir_too_long_for_its_loader_workers_sockets() -> None:
    deep = "/tmp/" + "d" * 100
    stuck = _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": deep}), 31.0, Outcome(), None)
    assert stuck is not None and stuck[0] == StopCause.LIMIT
    assert stuck[1].startswith("did not end within its limit of 30 s (TMPDIR is too long: ")
    assert _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": "/tmp"}), 31.0, Outcome(), None) == \
        (StopCause.LIMIT, "did not end within its limit of 30 s")
    assert _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": deep}), 29.0, Outcome(), None) is None


def test_a_run_that_never_reached_its_training_names_the_start_up_allowance_that_ran_out() -> None:
    allowed = WatchSettings(target="train.py", limit_s=360.0, startup_s=300.0, env={"TMPDIR": "/tmp"})
    assert _overdue(allowed, 361.0, Outcome(), None) == (
        StopCause.STARTUP, "did not reach its training's first batch within its limit of 360 s (a start-up "
                           "allowance of 300 s; --startup-timeout sets the first run's)")
    assert _overdue(allowed, 361.0, Outcome(window_open=12.0), None) == \
        (StopCause.LIMIT, "did not end within its limit of 360 s")


def test_a_run_is_ended_for_another_ranks_failure_only_where_it_ends_with_its_job(tmp_path: Path) -> None:
    failures = RankFailures(FolderMeeting(tmp_path), 0, 2)
    RankFailures(FolderMeeting(tmp_path), 1, 2).publish()
    kept = WatchSettings(target="train.py", env={"TMPDIR": "/tmp"})
    assert _overdue(kept, 1.0, Outcome(), failures) is None  # dataprof run: a rank's own failure ends its job
    ended = _overdue(dataclasses.replace(kept, end_with_job=True), 1.0, Outcome(), failures)
    assert ended == (StopCause.PEER_FAILED, "rank 1 of the job failed")


def test_a_module_run_elsewhere_is_found_where_the_user_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tune -m pkg.train --workdir DIR``: each run runs in DIR/run-N, and the module is where the user is."""
    from dataprof.errors import TargetError
    from dataprof.measure.watch.settings import check_target

    (tmp_path / "workdir_pkg").mkdir()
    (tmp_path / "workdir_pkg" / "__init__.py").write_text("")
    (tmp_path / "workdir_pkg" / "train.py").write_text("")
    run_dir = tmp_path / "runs" / "run-1"
    run_dir.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    check_target(WatchSettings(target="workdir_pkg.train", module=True, cwd=str(run_dir)))
    with pytest.raises(TargetError, match="-m workdir_pkg.nothing: no module of that name"):
        check_target(WatchSettings(target="workdir_pkg.nothing", module=True, cwd=str(run_dir)))



@pytest.mark.slow
def test_a_checkpoint_written_in_finally_after_the_window_is_left_whole(tmp_path: Path) -> None:
    """The run's end reaches the script at a batch boundary; its ``finally:`` then writes a 20 MB checkpoint over
    4 s, longer than the second the watch gives it after its window: the signals wait, and the file is whole."""
    from dataprof.measure.watch.watcher import watch

    checkpoint = tmp_path / "ckpt.pt"
    settings = WatchSettings(target="tests/fixtures/trial_script.py", cwd=os.getcwd(),
                             args=("--checkpoint", str(checkpoint), "--save-seconds", "4", "--epochs", "1000"),
                             seconds=1.0, seconds_from_first_batch=True, after_window_s=1.0, limit_s=120.0,
                             interactive=False, training=(None, None))
    report = watch(settings)
    assert checkpoint.stat().st_size == 20 << 20 and report.stopped is None and report.exit_code == 0


@pytest.mark.slow
def test_a_loader_a_thread_of_the_script_prefetches_is_timed_where_the_training_takes_it_and_ends_quietly(
        capfd: pytest.CaptureFixture[str]) -> None:
    """``BackgroundGenerator``'s shape: a thread iterates the loader (10 ms a batch) into a queue the training
    takes from (5 ms a step). The training waits about half of each iteration there, where the thread waits for
    the loader all the time; the run's end reaches the training at a batch, and the thread says nothing."""
    from dataprof.measure.watch.watcher import watch

    settings = WatchSettings(target="tests/fixtures/trial_script.py", cwd=os.getcwd(), interactive=False,
                             args=("--prefetch-thread", "--load-ms", "10", "--step-ms", "5", "--epochs", "1000"),
                             seconds=2.0, seconds_from_first_batch=True, after_window_s=10.0, limit_s=120.0,
                             training=(None, None))
    report = watch(settings)
    err = capfd.readouterr().err
    assert report.stopped is None and report.exit_code == 0 and report.ended_by == "--seconds reached", err
    assert "Traceback" not in err and "Exception in thread" not in err
    loader = report.loaders[0]
    assert loader.data_wait_fraction is not None and 0.2 < loader.data_wait_fraction < 0.8
    assert loader.step_ms is not None and loader.step_ms.p50 > 4.0  # the training's step, not the thread's put
