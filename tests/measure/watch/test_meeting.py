"""Where the ranks of one job meet: the launcher's store (nodes that share nothing but the network), or a
directory; a store that cannot be reached says so, and never raises."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest

from dataprof.measure.watch.meeting import FolderMeeting, Meeting, StoreMeeting, exchange_dir, meeting_of
from dataprof.measure.watch.ranks import RankEnd, RankFailures


@pytest.fixture
def store_port() -> int:
    """A TCPStore served in this process, as torchrun's agent serves one: its port."""
    dist = pytest.importorskip("torch.distributed")
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
    yield server.port
    del server


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exchange(meeting: Meeting, other: Meeting) -> None:
    assert meeting.get("end") is None and meeting.count("failed") == 0
    assert meeting.put("end", "0 12")
    assert other.get("end") == "0 12"
    assert meeting.count("failed", 1) == 1 and other.count("failed", 1) == 2 and meeting.count("failed") == 2
    other.remove("end")
    assert meeting.get("end") is None


def test_ranks_meet_through_the_jobs_store(store_port: int) -> None:
    env = {"WORLD_SIZE": "4", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port),
           "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "job"}
    meeting, other = meeting_of(env), meeting_of({**env, "RANK": "3"})
    assert isinstance(meeting, StoreMeeting) and isinstance(other, StoreMeeting)
    exchange(meeting, other)
    assert meeting.reachable and "127.0.0.1" in meeting.where
    restarted = meeting_of({**env, "TORCHELASTIC_RESTART_COUNT": "1"})
    assert restarted is not None and restarted.count("failed") == 0  # a restart of the job is a new meeting


def test_ranks_meet_through_a_directory_without_a_store(tmp_path: Path) -> None:
    exchange(FolderMeeting(tmp_path / "job"), FolderMeeting(tmp_path / "job"))
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    found = meeting_of(env)
    assert isinstance(found, FolderMeeting) and found.path == exchange_dir(env)
    assert meeting_of({"WORLD_SIZE": "1", "RANK": "0"}) is None


def test_an_unreachable_store_is_heard_as_silence_and_no_rank_ends_early() -> None:
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(closed_port()),
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    meeting = meeting_of({**env, "RANK": "0"}, connect_s=0.3)
    assert meeting is not None
    assert not meeting.put("end", "0 3") and meeting.get("end") is None and meeting.count("failed", 1) == 0
    assert not meeting.reachable
    leader = RankEnd(meeting, leader=True)
    assert not leader.reached(0, 50, deadline_passed=True)  # rank 0 could not say the end: it does not end
    assert leader.unsaid and not leader.reached(0, 51, deadline_passed=True)
    failures = RankFailures(meeting, 0, 2)
    failures.publish()
    assert failures.failed() is None


def test_rank_0_names_the_end_and_another_rank_hears_it_through_the_store(store_port: int) -> None:
    meeting = StoreMeeting("127.0.0.1", store_port, "dataprof/job/0/")
    leader, follower = RankEnd(meeting, leader=True), RankEnd(StoreMeeting("127.0.0.1", store_port,
                                                                          "dataprof/job/0/"), leader=False)
    assert not follower.reached(0, 5, deadline_passed=True)  # its own clock does not count
    assert not leader.reached(0, 5, deadline_passed=False)
    assert not leader.reached(0, 6, deadline_passed=True) and leader.target == (0, 8)
    assert not follower.reached(0, 7, deadline_passed=False) and follower.reached(0, 8, deadline_passed=False)


def test_a_rank_that_went_silent_with_its_report_unsaid_is_gone_and_only_it(
        store_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from dataprof.measure.watch import ranks

    def meeting() -> StoreMeeting:
        return StoreMeeting("127.0.0.1", store_port, "dataprof/job/0/")

    monkeypatch.setattr(ranks, "ALIVE_EVERY_S", 0.01)
    beating = [RankFailures(meeting(), rank, 4) for rank in range(4)]
    for rank in (1, 2):  # rank 3's dataprof never came: the rendezvous, not this, says so
        beating[rank].beat(meeting())
    time.sleep(0.2)
    beating[1].ended(failed=False)  # its watch is over, and its report follows
    beating[2].stop()  # its node gone: its dataprof counts no more, and its report never comes
    time.sleep(0.1)
    meeting().put(f"{ranks.REPORT_KEY}-1", "{}")
    clock = [0.0]
    watcher = RankFailures(meeting(), 0, 4, clock=lambda: clock[0])
    for now in (0.0, ranks.SILENT_S - 0.1):
        clock[0] = now
        assert watcher.gone() == () and watcher.reason() is None
    clock[0] = ranks.SILENT_S + 0.1
    assert watcher.gone() == (2,)
    clock[0] += 0.001
    assert watcher.gone() == ()  # read once a second at most
    clock[0] += 1.0
    assert watcher.reason() == "rank 2 of the job stopped answering (nothing from its dataprof for 15 s)"
