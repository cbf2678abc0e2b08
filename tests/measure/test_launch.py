"""A stop said from another thread (node 0's watch of the other nodes) reaches the launch, and only the launch."""

from __future__ import annotations

import threading
import time

import pytest

from dataprof.errors import Terminated, terminated_as_interrupted
from dataprof.measure.launch import Stop


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
