"""Ending a script that overstays: SIGINT, SIGTERM, then SIGKILL, later while it is still writing; and the ranks
of a job telling each other that one's script failed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dataprof.measure.watch.meeting import FolderMeeting
from dataprof.measure.watch.ranks import RankFailures
from dataprof.measure.watch.stopping import Stopper
from dataprof.measure.watch.watcher import WatchSettings, _overdue


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


def stepped(written: list[int | None], seconds: float) -> list[tuple[float, str]]:
    """The signals a Stopper sends over ``seconds`` of a fake clock, with the bytes written read in turn."""
    now = [0.0]
    proc = FakeProc()
    reads = iter(written)
    stopper = Stopper(proc, clock=lambda: now[0], grace_s=5.0, write_grace_s=30.0,
                      written=lambda pid: next(reads, written[-1]))
    stopper.start()
    sent: list[tuple[float, str]] = [(0.0, proc.sent[0])]
    while now[0] < seconds:
        now[0] += 0.5
        before = len(proc.sent)
        stopper.poll()
        sent += [(now[0], name) for name in proc.sent[before:]]
    return sent


def test_an_overstaying_script_gets_sigint_then_sigterm_then_sigkill() -> None:
    assert stepped([100], 20.0) == [(0.0, "SIGINT"), (5.0, "SIGTERM"), (10.0, "SIGKILL")]


def test_sigkill_waits_while_the_script_is_still_writing_but_not_for_ever() -> None:
    growing = [100, 200, 300, 400, 400]  # a checkpoint written for 3 s after SIGTERM's grace, then done
    sent = stepped(growing, 20.0)
    assert sent[:2] == [(0.0, "SIGINT"), (5.0, "SIGTERM")] and sent[2][1] == "SIGKILL" and 12.0 <= sent[2][0] <= 15.0
    endless = list(range(0, 10_000, 10))  # writes without end: killed once the write grace is spent
    assert stepped(endless, 60.0)[-1] == (40.0, "SIGKILL")
    assert stepped([None], 20.0)[-1] == (10.0, "SIGKILL")  # no io counters (macOS): the plain grace


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
    stuck = _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": deep}), 31.0, {}, None)
    assert stuck is not None and stuck.startswith("did not end within its limit of 30 s (TMPDIR is too long: ")
    assert _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": "/tmp"}), 31.0, {}, None) == \
        "did not end within its limit of 30 s"
    assert _overdue(WatchSettings(target="train.py", limit_s=30.0, env={"TMPDIR": deep}), 29.0, {}, None) is None

