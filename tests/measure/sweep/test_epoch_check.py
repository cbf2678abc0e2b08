"""The check that a DataLoader survives an IterableDataset's epoch end with persistent workers.

A trial's window seldom reaches an epoch's end; the check runs a tiny stream
through eight epochs. Its verdict narrows the search space before the sweep.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from dataprof.decide.search import rules_of_thumb
from dataprof.measure.sweep.commands import Command, EpochCheck
from dataprof.measure.sweep.epoch_check import EPOCH_CHECK_EPOCHS
from dataprof.measure.sweep.events import Event, TrialExit, heard
from dataprof.measure.sweep.runner import TrialRunner
from dataprof.results.environment import ProbeReply
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.vocabulary import TrialStatus
from dataprof.sweeper import check_persistent_epochs
from tests.conftest import FIXTURES, ROOT

FIX = FIXTURES / "datasets.py"

CHECK = """
import importlib.util, json, sys
from dataprof.backends.torch_backend import TorchBackend
from dataprof.results.knobs import LoaderConfig
from dataprof.measure.sweep.epoch_check import run_epoch_check

class Backend(TorchBackend):
    def counting_stream(self, items):
        if sys.argv[1] == "sound":
            return super().counting_stream(items)
        spec = importlib.util.spec_from_file_location("datasets", sys.argv[2])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.ReadOnce(items)

words = []
run_epoch_check(Backend(), LoaderConfig(2, False, 2, sys.argv[3] == "persistent"), words.append)
print(json.dumps([{k: v for k, v in w.items() if k != "traceback"} for w in words if w["ev"] != "progress"]))
"""


def check(stream: str, persistent: bool, workers: list[list[int]] | None = None) -> list[dict[str, Any]]:
    """The check's words but its progress; the worker pids it told of, each epoch, go to ``workers``."""
    proc = subprocess.run([sys.executable, "-c", CHECK, stream, str(FIX), "persistent" if persistent else "respawn"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    words = json.loads(proc.stdout.strip().splitlines()[-1])
    if workers is not None:
        workers.extend(w["pids"] for w in words if w["ev"] == "workers")
    return [w for w in words if w["ev"] != "workers"]


@pytest.mark.slow
def test_a_sound_loader_passes_every_epoch_with_persistent_workers() -> None:
    workers: list[list[int]] = []
    assert check("sound", persistent=True, workers=workers) == [
        {"ev": "result", "batches": [16] * EPOCH_CHECK_EPOCHS, "expected": 16}]
    # each epoch names its workers (the host removes what they leave behind): the same two, kept
    assert len(workers) == EPOCH_CHECK_EPOCHS and len(workers[0]) == 2 and all(pids == workers[0] for pids in workers)


@pytest.mark.slow
def test_a_loader_that_breaks_at_an_epoch_end_is_named() -> None:
    (word,) = check("read-once", persistent=True)
    assert word["ev"] == "error" and "RuntimeError: this stream was already read" in word["message"]
    # Workers started again each epoch read a fresh copy: no failure; each epoch's workers are new ones.
    workers: list[list[int]] = []
    assert check("read-once", persistent=False, workers=workers)[0]["ev"] == "result"
    assert len(workers) == EPOCH_CHECK_EPOCHS
    assert len({pid for pids in workers for pid in pids}) == 2 * EPOCH_CHECK_EPOCHS


NO_SUCH_PID = 2**22 + 1
"""Above Linux's largest pid: the sampler finds no process to read."""


class ScriptedHost:
    """A host whose check (or trial) sends ``events``, then nothing until it is killed; each wait for an event
    moves the runner's fake clock on by the time it waited."""

    def __init__(self, runner: TrialRunner, events: list[dict[str, Any]]) -> None:
        self.proc = SimpleNamespace(poll=lambda: None, pid=4243)
        self.events = [{"ev": "trial_started", "pid": NO_SUCH_PID}, *events]
        self.runner = runner
        self.now = 0.0

    def send(self, request: Command) -> None:
        self.request = request

    def next_event(self, timeout: float) -> Event | None:
        if self.events:
            return heard(self.events.pop(0))
        if self.runner.killed:  # type: ignore[attr-defined]
            return TrialExit(-9, "SIGKILL")
        self.now += timeout
        return None


def scripted_runner(events: list[dict[str, Any]], settings: SweepSettings | None = None) -> TrialRunner:
    """A runner over a :class:`ScriptedHost` sending ``events``, on the host's fake clock."""
    runner = TrialRunner(settings or SweepSettings(target="x:y", space=SearchSpace((2,)), trial_seconds=1.0,
                                                   trial_timeout_s=30.0))
    runner.killed = False  # type: ignore[attr-defined]
    runner.kill_current = lambda: setattr(runner, "killed", True)  # type: ignore[method-assign]
    host = ScriptedHost(runner, events)
    runner.host = host  # type: ignore[assignment]
    runner.clock = lambda: host.now
    return runner


def test_a_check_that_stops_delivering_batches_is_killed_as_a_hang() -> None:
    runner = scripted_runner([{"ev": "progress"}])
    problem = runner.side_runs.epoch_check(LoaderConfig(2, False, 2, True), timeout_s=600, stall_s=45)
    assert runner.killed and problem == "it hung: no batch for 45 s"
    assert runner.host.now == pytest.approx(45.25)  # type: ignore[union-attr]  # killed at its first wait past it
    assert runner.host.request == EpochCheck(LoaderConfig(2, False, 2, True))


def test_a_trial_that_stops_delivering_batches_times_out_on_the_clock_the_runner_is_given() -> None:
    runner = scripted_runner([{"ev": "ready"}, {"ev": "first_batch", "first_batch_s": 0.5}])
    result = runner.measure(LoaderConfig(2, False, 2, True))
    assert runner.killed and result.status == TrialStatus.TIMEOUT
    assert result.error == "no batch for 30 s: the loader hung; killed the trial and its workers"
    assert result.duration_s == pytest.approx(30.25)


def test_a_trial_whose_exit_does_not_follow_the_protocol_ends_as_a_bug_at_once() -> None:
    runner = scripted_runner([{"ev": "ready"}, {"ev": "trial_exit", "code": 1}])
    result = runner.measure(LoaderConfig(2, False, 2, True))
    assert not runner.killed and result.status == TrialStatus.FAILED  # type: ignore[attr-defined]
    assert "does not follow dataprof's protocol (TrialExit: unknown keys ['code']" in str(result.error)
    assert result.duration_s == 0.0  # no wait for a timeout


def test_ctrl_c_during_a_trial_kills_it_before_the_trial_is_let_go() -> None:
    runner = scripted_runner([{"ev": "trial_started", "pid": 4242}, {"ev": "ready"}])
    host = runner.host

    def interrupted(timeout: float) -> Event | None:
        if host.events:  # type: ignore[union-attr]
            return heard(host.events.pop(0))  # type: ignore[union-attr]
        raise KeyboardInterrupt

    host.next_event = interrupted  # type: ignore[union-attr, method-assign]
    killed: list[int | None] = []
    runner.kill_current = lambda: killed.append(runner.current_pid)  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        runner.measure(LoaderConfig(2, False, 2, True))
    assert killed == [4242]  # while its pid was known: its host is free for the exit at once


class CheckRunner:
    def __init__(self, problem: str | None) -> None:
        self.problem = problem
        self.checked: list[LoaderConfig] = []
        self.host_info = ProbeReply(framework_version="9.9")
        self.side_runs = self

    def epoch_check(self, config: LoaderConfig, timeout_s: float, stall_s: float) -> str | None:
        self.checked.append(config)
        return self.problem


def settings(workers: tuple[int, ...] = (0, 2, 8), persistent: tuple[bool, ...] = (True,)) -> SweepSettings:
    return SweepSettings(target="x:y", space=SearchSpace(workers=workers, persistent_workers=persistent),
                         framework="paddle")


@pytest.mark.parametrize("persistent", [(True,), (True, False)])
def test_a_failed_check_drops_persistent_workers_from_the_sweep_and_says_why(persistent: tuple[bool, ...]) -> None:
    notes: list[str] = []
    runner = CheckRunner("AssertionError: too many indices have been put to queue")
    narrowed = check_persistent_epochs(settings(persistent=persistent), runner, notes)
    assert narrowed.space.persistent_workers == (False,)
    assert runner.checked[0].num_workers == 2 and runner.checked[0].persistent_workers is True
    assert notes == ["persistent_workers=True not tried: paddle 9.9's DataLoader fails at the end of an "
                     "IterableDataset's epoch with 2 persistent workers (checked on a tiny stream: AssertionError: "
                     "too many indices have been put to queue); each epoch starts its workers again"]
    # The rules of thumb follow the space: they would otherwise measure the failing config.
    assert all(config.persistent_workers is not True for _, config in rules_of_thumb(4, narrowed.space))


def test_a_passed_or_needless_check_leaves_the_sweep_alone() -> None:
    notes: list[str] = []
    passed = CheckRunner(None)
    assert check_persistent_epochs(settings(), passed, notes) == settings() and passed.checked and not notes
    for needless in (settings(workers=(0, 1)), settings(persistent=(False,))):
        runner = CheckRunner("broken")
        assert check_persistent_epochs(needless, runner, notes) == needless and not runner.checked and not notes
