"""Node 0's word to the other nodes of a tune: each run's settings, then the end (one process plays both)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dataprof.errors import DataprofError, UsageError
from dataprof.measure.watch.nodes import TuneNodes
from dataprof.measure.watch.settings import WatchSettings
from dataprof.results.environment import NodeJob
from dataprof.results.run import RunChanges
from tests.conftest import free_port


@pytest.fixture(autouse=True)
def _nodes_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every TuneNodes a test makes stops counting at its end (a thread left in a store's client at the
    interpreter's exit aborts it)."""
    made: list[TuneNodes] = []
    real = TuneNodes.__init__

    def init(self: TuneNodes, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(TuneNodes, "__init__", init)
    yield
    for nodes in made:
        nodes.close()


def test_the_other_nodes_hear_each_run_as_node_0_said_it_then_the_end() -> None:
    port = free_port()
    leader = TuneNodes(NodeJob(2, 0, "127.0.0.1", port, join_s=0.3))
    follower = TuneNodes(NodeJob(2, 1, "127.0.0.1", port, join_s=0.3))
    said = WatchSettings(target="/node0/train.py", args=("--epochs", "9"), seconds=4.0, limit_s=60.0,
                         training=("train.py:40", "train"), changes=RunChanges({"num_workers": 4}, None, "train.py:40"),
                         env={"DATAPROF_TRIAL": "1", "DATAPROF_TRIAL_ROLE": "headspace", "LD_PRELOAD": "x.so"})
    leader.say(1, said, "run-a")
    heard = follower.hear(1, 5)
    assert heard is not None and heard[1] == "run-a"
    settings = heard[0]
    assert (settings.seconds, settings.limit_s, settings.changes, settings.training) == \
        (4.0, 60.0, said.changes, said.training)
    # its own script, arguments and environment: node 0's are not taken
    assert settings.target == "" and settings.args == () and settings.env == {
        "DATAPROF_TRIAL": "1", "DATAPROF_TRIAL_ROLE": "headspace", "DATAPROF_TRIAL_INDEX": "1"}
    leader.end(2)  # returns once node 1 heard it (it has not yet, here): within the join timeout
    assert follower.hear(2, 5) is None


def test_a_node_with_knobs_of_its_own_hears_its_own_and_the_others_node_0_s() -> None:
    port = free_port()
    job = NodeJob(3, 0, "127.0.0.1", port, join_s=5)  # five seconds: a busy machine may stall a connect a second
    leader, second, third = (TuneNodes(job), TuneNodes(NodeJob(3, 1, "127.0.0.1", port, join_s=5)),
                             TuneNodes(NodeJob(3, 2, "127.0.0.1", port, join_s=5)))
    said = WatchSettings(target="train.py", seconds=4.0, changes=RunChanges({"num_workers": 4}, None, "train.py:40"))
    own = RunChanges({"num_workers": 1}, None, "train.py:40")
    leader.say(1, said, "run-b", {1: own, 2: said.changes})
    assert [(heard[0].changes, heard[1]) for heard in (second.hear(1, 5), third.hear(1, 5)) if heard] == \
        [(own, "run-b"), (said.changes, "run-b")]


def test_a_node_0_that_says_nothing_ends_the_others_with_one_line() -> None:
    port = free_port()
    leader = TuneNodes(NodeJob(2, 0, "127.0.0.1", port, join_s=5))
    follower = TuneNodes(NodeJob(2, 1, "127.0.0.1", port, join_s=5))
    with pytest.raises(DataprofError, match="node 0 said no run 1 within 0.2 s"):
        follower.hear(1, 0.2)
    del leader


@pytest.mark.slow  # it waits out a node's silence at a join timeout of 1 s (a busy machine's scheduling stays inside)
def test_node_0_hears_of_a_node_gone_silent_during_a_run_and_only_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr("dataprof.measure.watch.nodes.ALIVE_EVERY_S", 0.05)
    port = free_port()
    # a join timeout of two seconds: a test process beside others may stall a second, and the counting node with it
    leader = TuneNodes(NodeJob(3, 0, "127.0.0.1", port, join_s=2.0))
    counting = TuneNodes(NodeJob(3, 1, "127.0.0.1", port, join_s=2.0))
    silent = TuneNodes(NodeJob(3, 2, "127.0.0.1", port, join_s=2.0))  # counts, then goes quiet
    never = TuneNodes(NodeJob(4, 0, "127.0.0.1", free_port(), join_s=1.0))  # its nodes 1 to 3 never come
    said: list[str] = []
    heard = threading.Event()

    def gone(why: str) -> None:
        said.append(why)
        heard.set()

    with never.watched(1, gone):
        assert not heard.wait(2.0)  # twice the join timeout
    with leader.watched(3, gone):
        silent.close()
        assert heard.wait(10)
    assert len(said) == 1 and said[0].startswith("node 2 stopped answering during run 3")  # not node 1, once
    assert leader.gone == {2}
    counting.close()


@pytest.mark.slow  # it waits out node 0's silence (a second of join timeout, twice)
def test_every_other_node_stops_its_run_when_node_0_stopped_it_or_went_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr("dataprof.measure.watch.nodes.ALIVE_EVERY_S", 0.05)
    port = free_port()
    leader = TuneNodes(NodeJob(3, 0, "127.0.0.1", port, join_s=2.0))  # two seconds: a busy test process may stall
    nodes = [TuneNodes(NodeJob(3, node, "127.0.0.1", port, join_s=2.0)) for node in (1, 2)]
    said: dict[str, list[str]] = {"0": [], "1": []}
    done = {name: threading.Event() for name in said}

    def heard(name: str) -> Callable[[str], None]:
        return lambda why: (said[name].append(why), done[name].set())  # type: ignore[func-returns-value]

    with leader.watched(4, heard("0")), nodes[0].watched(4, heard("1")):
        nodes[1].close()  # node 2 dies: node 0 finds it, and node 1 hears it from node 0
        assert done["0"].wait(10) and done["1"].wait(10)
    assert said["1"] == [f"node 0 stopped run 4: {said['0'][0]}"] and said["0"][0].startswith("node 2 stopped")
    lost = threading.Event()
    lines: list[str] = []
    with nodes[0].watched(5, lambda why: (lines.append(why), lost.set())):  # type: ignore[func-returns-value]
        leader.close()  # node 0's dataprof stalls: it counts no more
        assert lost.wait(10)
    assert lines[0].startswith("node 0 stopped answering during run 5")


def test_node_0_s_end_waits_for_the_nodes_that_listen_not_for_one_found_gone_or_that_never_came() -> None:
    import threading
    import time

    from dataprof.measure.watch.meeting import ALIVE_KEY
    from dataprof.measure.watch.nodes import HEARD_KEY

    port = free_port()
    leader = TuneNodes(NodeJob(4, 0, "127.0.0.1", port, join_s=120))
    listening = TuneNodes(NodeJob(4, 1, "127.0.0.1", port, join_s=120))
    while not leader.store.add(f"{ALIVE_KEY}-1", 0):  # node 1 is there
        time.sleep(0.01)
    leader.store.add(f"{ALIVE_KEY}-2", 3)  # node 2 came, then died during the last run; node 3 never came
    leader.gone.add(2)
    ended = threading.Thread(target=leader.end, args=(4,), daemon=True)
    ended.start()
    time.sleep(0.3)
    assert ended.is_alive()  # node 1 has not heard it yet
    listening.store.set(f"{HEARD_KEY}-1", "1")
    ended.join(timeout=30)
    assert not ended.is_alive()  # not the join timeout's 120 s for a node that will never hear it
    listening.close()


@pytest.mark.parametrize(("job", "message"), [
    (NodeJob(1, 0, "h", 29500), "--nnodes 1"),
    (NodeJob(2, 2, "h", 29500), "--node-rank 2: give 0 to 1"),
    (NodeJob(2, 0, "h", 65535), "--master-port 65535"),
    (NodeJob(2, 0, "h", 29500, join_s=0), "--join-timeout 0"),
])
def test_words_that_cannot_make_a_job_are_a_usage_error(job: NodeJob, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        job.check()


def test_what_comes_over_the_network_is_data_checked_field_by_field_and_nothing_else_is_taken() -> None:
    import json

    from dataprof.measure.watch.nodes import PROTOCOL, heard

    crafted = {"protocol": PROTOCOL, "dataprof": "0.1.0", "run_id": "dataprof-tune-1", "nodes": {},
               "settings": {"seconds": 4.0, "env": {"LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp"},
                            "target": "/tmp/evil.py", "cwd": "/", "limit_s": "rm -rf", "a_field_of_a_later_version": 1,
                            "changes": {"knobs": {"num_workers": 2}, "replay": None, "loader": None, "split": None},
                            "role": "current"}}
    settings, run_id, ignored = heard(json.dumps(crafted), 3, 1)
    assert ignored == ["a_field_of_a_later_version", "cwd", "env", "limit_s", "target"]
    assert settings.env == {"DATAPROF_TRIAL": "1", "DATAPROF_TRIAL_ROLE": "current", "DATAPROF_TRIAL_INDEX": "3"}
    assert settings.seconds == 4.0 and settings.limit_s is None and settings.target == ""
    assert run_id == crafted["run_id"]
    assert settings.changes is not None and dict(settings.changes.knobs) == {"num_workers": 2}
    with pytest.raises(DataprofError, match=r"node 0's dataprof \(0.0.9, protocol 1\) is not this one's"):
        heard(json.dumps({**crafted, "protocol": 1, "dataprof": "0.0.9"}), 3, 1)
    with pytest.raises(DataprofError, match="not this dataprof's"):
        heard(json.dumps({**crafted, "settings": {**crafted["settings"], "changes": {"knobs": {"num_workers": "x"}}}}),
              3, 1)
    with pytest.raises(DataprofError, match="not this dataprof's"):
        heard(json.dumps({**crafted, "settings": {**crafted["settings"], "changes": {"knobs": {}, "replay": "3"}}}),
              3, 1)
    with pytest.raises(DataprofError, match="is not this one's"):
        heard("not json", 3, 1)


def test_another_node_says_in_one_line_what_it_ignored_of_node_0_s_word() -> None:
    import json

    from dataprof.measure.watch.nodes import PROTOCOL

    port = free_port()
    leader = TuneNodes(NodeJob(2, 0, "127.0.0.1", port, join_s=5))
    lines: list[str] = []
    follower = TuneNodes(NodeJob(2, 1, "127.0.0.1", port, join_s=5), said=lines.append)
    leader.store.set("run-1", json.dumps({"protocol": PROTOCOL, "run_id": "r1", "settings": {"env": {"A": "1"}}}))
    heard = follower.hear(1, 5)
    assert heard is not None and "A" not in heard[0].env
    assert lines == ["node 1: ignored what node 0 said of run 1 that this dataprof does not take: env"]


def test_node_0_s_listening_socket_is_its_store_s_alone() -> None:
    """torch's store closes the socket it is handed: a Python socket object still holding its descriptor would
    close that number again when collected, by then another socket's or pipe's (a store's, in the next test)."""
    import gc

    port = free_port()
    TuneNodes(NodeJob(2, 0, "127.0.0.1", port, join_s=1))
    holding = [o for o in gc.get_objects() if type(o) is socket.socket and o.fileno() != -1
               and o.getsockname()[1:2] == (port,)]
    assert holding == []


def test_node_0_s_store_listens_on_the_master_address_alone() -> None:
    import psutil

    port = free_port()
    TuneNodes(NodeJob(2, 0, "127.0.0.1", port, join_s=1))
    listening = [c.laddr for c in psutil.Process().net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert [address.ip for address in listening] == ["127.0.0.1"]  # not every interface (0.0.0.0, ::)
