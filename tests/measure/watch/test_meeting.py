"""Where the ranks of one job meet: the launcher's store (nodes that share nothing but the network), or a
directory; a store that cannot be reached says so, and never raises."""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from dataprof.measure.watch.joining import leave_round, meeting_of
from dataprof.measure.watch.launched import Launched
from dataprof.measure.watch.meeting import FolderMeeting, Meeting, StoreMeeting
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


def heard(meeting: Meeting, key: str) -> str | None:
    """What ``meeting`` reads under ``key`` once what was said there reaches it: a store's ``set`` is not waited
    for, so another connection may read it a moment later."""
    import time

    deadline = time.monotonic() + 5.0
    while (said := meeting.get(key)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return said


def until(done: Callable[[], bool]) -> bool:
    """Whether ``done()`` holds within 5 s (what another connection said reaches this one a moment later)."""
    import time

    deadline = time.monotonic() + 5.0
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)
    return done()


def exchange(meeting: Meeting, other: Meeting) -> None:
    assert meeting.get("end") is None and meeting.count("failed") == 0
    assert meeting.put("end", "0 12")
    assert heard(other, "end") == "0 12"
    assert meeting.count("failed", 1) == 1 and other.count("failed", 1) == 2 and meeting.count("failed") == 2
    other.remove("end")
    assert meeting.get("end") is None


def test_ranks_meet_through_the_jobs_store_and_each_round_of_the_job_under_keys_of_its_own(store_port: int) -> None:
    env = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port),
           "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "job"}
    meeting, other = meeting_of(env), meeting_of({**env, "RANK": "0"})
    assert isinstance(meeting, StoreMeeting) and isinstance(other, StoreMeeting)
    exchange(meeting, other)
    assert meeting.reachable and "127.0.0.1" in meeting.where
    meeting.put("report-1", "{}")
    job = StoreMeeting("127.0.0.1", store_port, "dataprof/job/")
    leave_round(job)
    leave_round(job)  # the agents stopped both: an elastic restart
    # the agents' restart counts differ (only the failed rank's agent raises its own), and the next round's
    # ranks, whatever they say, read nothing of the last round's
    again = [meeting_of({**env, "RANK": "0"}), meeting_of({**env, "RANK": "1", "TORCHELASTIC_RESTART_COUNT": "1"})]
    assert all(m is not None and m.count("failed") == 0 and m.get("report-1") is None for m in again)
    assert again[0].put("end", "0 5") and heard(again[1], "end") == "0 5"  # type: ignore[arg-type, union-attr]
    leave_round(job)  # the second round ended too
    leave_round(job)
    grown = [meeting_of({**env, "WORLD_SIZE": "3", "RANK": str(rank)}) for rank in range(3)]  # a node joined
    assert grown[0].put("end", "0 9") and all(heard(m, "end") == "0 9" for m in grown)  # type: ignore[arg-type]
    assert heard(again[1], "end") == "0 5"  # type: ignore[arg-type]
    # node 2 restarted alone (a static rendezvous: its peers run on): its new dataprof joins their round, clears
    # what its last one said there, and says which ticket is its latest
    assert grown[2].put("report-2", "{}") and heard(grown[2], "whois-2") == "7"  # type: ignore[union-attr]
    assert heard(grown[0], "report-2") == "{}"  # type: ignore[arg-type]
    leave_round(job)
    restarted = meeting_of({**env, "WORLD_SIZE": "3", "RANK": "2"})
    assert restarted is not None and heard(restarted, "end") == "0 9"
    assert until(lambda: restarted.get("whois-2") == "8" and restarted.get("report-2") is None)


def test_ranks_meet_through_a_directory_without_a_store(tmp_path: Path) -> None:
    exchange(FolderMeeting(tmp_path / "job"), FolderMeeting(tmp_path / "job"))
    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    found = meeting_of(env)
    assert isinstance(found, FolderMeeting) and found.path == Launched(env).exchange_dir
    assert meeting_of({"WORLD_SIZE": "1", "RANK": "0"}) is None


@pytest.mark.slow  # torch's store client waits out its connect retries (about 2 s)
def test_an_unreachable_store_is_heard_as_silence_and_no_rank_ends_early() -> None:
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(closed_port()),
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    found = meeting_of({**env, "RANK": "0"}, connect_s=0.1)  # the round cannot be joined: a nonce of its own
    assert isinstance(found, StoreMeeting) and found.prefix.startswith("dataprof/job/")
    meeting = StoreMeeting(found.host, found.port, found.prefix, connect_s=0.1, clock=lambda: 0.0)  # no retry
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
    assert heard(follower.meeting, "end") == "0 8"
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
    assert watcher.reason() is None  # a rank gone silent is not waited for; no one's training ends for it


def test_a_store_client_that_fails_is_built_again_after_its_wait(store_port: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    clock = [0.0]
    meeting = StoreMeeting("127.0.0.1", store_port, "dataprof/job/r/", connect_s=5.0, clock=lambda: clock[0])
    real, down = dist.TCPStore, [True]

    def store(*args: object, **kwargs: object) -> object:
        if down[0]:
            raise RuntimeError("connect() timed out")  # a hiccup on the way to the store
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "TCPStore", store)
    assert not meeting.put("end", "0 3") and not meeting.reachable
    down[0] = False
    clock[0] = 4.9
    assert meeting.get("end") is None and not meeting.reachable  # not tried again within its wait
    clock[0] = 5.0
    assert meeting.put("end", "0 3") and meeting.get("end") == "0 3" and meeting.reachable


def test_rank_0_names_an_end_far_enough_ahead_for_ranks_that_read_it_from_a_thread(store_port: int) -> None:
    from dataprof.measure.watch.ranks import MARGIN_BATCHES, READ_EVERY_S

    def meeting() -> StoreMeeting:
        return StoreMeeting("127.0.0.1", store_port, "dataprof/job/t/")

    clock = [0.0]
    leader = RankEnd(meeting(), leader=True, threaded=True, clock=lambda: clock[0])
    follower = RankEnd(meeting(), leader=False, threaded=True)
    for batch in range(1, 11):  # 10 ms steps
        assert not leader.reached(0, batch, deadline_passed=False) and not follower.reached(0, batch, False)
        clock[0] += 0.01
    assert not leader.reached(0, 11, deadline_passed=True) and leader.target is not None
    ahead = leader.target[1] - 11  # two reads' time at its pace, beyond the margin
    assert 0 <= ahead - MARGIN_BATCHES - 2 * READ_EVERY_S / 0.01 <= 1
    deadline = clock[0] + 20.0  # an upper bound: a busy machine may delay either thread
    while follower.target is None and clock[0] < deadline:  # its thread reads what rank 0's thread said
        follower.reached(0, 11, deadline_passed=False)
        threading_sleep(0.05)
        clock[0] += 0.05
    assert follower.target == (0, 11 + ahead)
    assert leader.reached(0, 11 + ahead, deadline_passed=True) and follower.reached(0, 11 + ahead, False)


def test_rank_0_waits_a_batch_before_the_end_until_every_rank_heard_it(store_port: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy machine runs another rank's reading thread late: rank 0 waits for it a batch before the end, while
    that rank cannot take the last batch (it waits in its step for rank 0's), so it ends at the same batch."""
    import threading

    from dataprof.measure.watch import ranks

    def meeting() -> StoreMeeting:
        return StoreMeeting("127.0.0.1", store_port, "dataprof/job/late/")

    leader = RankEnd(meeting(), leader=True, threaded=True, world_size=2)
    late = RankEnd(meeting(), leader=False, threaded=True, world_size=2)
    for batch in range(1, 6):
        assert not leader.reached(0, batch, deadline_passed=False)
    assert not leader.reached(0, 6, deadline_passed=True) and leader.target is not None
    end = leader.target[1]
    for batch in range(7, end - 1):
        assert not leader.reached(0, batch, deadline_passed=True)
    done = threading.Event()
    waiting = threading.Thread(target=lambda: (leader.reached(0, end - 1, deadline_passed=True), done.set()))
    waiting.start()
    assert not done.wait(0.3)  # no other rank has heard: rank 0 does not step the batch before the end
    assert not late.reached(0, end - 1, deadline_passed=False)  # its thread starts, reads, says it heard
    assert done.wait(20.0) and late.target == leader.target
    assert leader.reached(0, end, deadline_passed=True) and late.reached(0, end, deadline_passed=False)
    monkeypatch.setattr(ranks, "HEARD_S", 0.2)
    alone = RankEnd(StoreMeeting("127.0.0.1", store_port, "dataprof/job/alone/"), leader=True, threaded=True)
    assert not alone.reached(0, 1, deadline_passed=True) and alone.target is not None
    assert alone.reached(0, alone.target[1], deadline_passed=True)  # no one heard within HEARD_S: it ends there
    for rank_end in (leader, late, alone):
        rank_end.close()


def threading_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def cannot_meet(env: dict[str, str]) -> str | None:
    return Launched(env).cannot_meet()


def test_ranks_started_without_torchrun_s_agent_on_several_nodes_know_they_cannot_meet() -> None:
    slurm = {"RANK": "0", "WORLD_SIZE": "16", "MASTER_ADDR": "n0", "MASTER_PORT": "29400"}  # srun python train.py
    assert "one of 16 started without torchrun's agent, its ranks per node unknown" in str(cannot_meet(slurm))
    assert "on more than one node" in str(cannot_meet({**slurm, "LOCAL_WORLD_SIZE": "8"}))
    assert cannot_meet({**slurm, "LOCAL_WORLD_SIZE": "16"}) is None  # one node: they meet in its directory
    assert cannot_meet({**slurm, "TORCHELASTIC_USE_AGENT_STORE": "True"}) is None  # torchrun's agent serves a store
    assert "8 ranks mpirun started" in str(cannot_meet({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "3"}))
    assert cannot_meet({"SLURM_NTASKS": "1"}) is None and cannot_meet({}) is None


def test_what_the_launcher_says_is_read_in_one_way_for_every_reader() -> None:
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                "MASTER_ADDR": "n0", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
                "TORCHELASTIC_RUN_ID": "job7"}
    launched = Launched(torchrun)
    assert launched.rank == 3 and launched.store is not None and launched.store.port == 29500
    info = launched.rank_info("h")
    assert info is not None and (info.rank, info.local_rank, info.local_world_size, info.node) == (3, 1, 2, 1)
    assert launched.exchange_dir.name == "dataprof-run-job7" and cannot_meet(torchrun) is None
    # a port that is no number is no store: the ranks meet in a directory named by the rendezvous
    folder = Launched({**torchrun, "MASTER_PORT": "x", "TORCHELASTIC_RUN_ID": ""})
    assert folder.store is None and folder.exchange_dir.name == "dataprof-run-n0-x"
    assert Launched({"RANK": "1", "WORLD_SIZE": "2", "NODE_RANK": "4"}).rank_info("h").node == 4  # type: ignore[union-attr]
    # the watch takes a rank that does not read for no rank; the sweep says the environment is malformed
    assert Launched({**torchrun, "RANK": "three"}).rank is None
    with pytest.raises(ValueError):
        Launched({**torchrun, "RANK": "three"}).rank_info("h")
    assert Launched({"RANK": "0", "WORLD_SIZE": "1"}).rank is None and Launched({}).rank_info("h") is None
