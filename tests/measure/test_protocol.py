"""The messages between dataprof's processes are typed end to end: a key the reader does not know, or one it
misses, is an error, never a silent None."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dataprof.errors import TargetError
from dataprof.measure.forked import killed_by
from dataprof.measure.probes import process_reads
from dataprof.measure.protocol import (
    AutotuneRequest,
    LoadRequest,
    ProtocolError,
    TrialError,
    TrialFigures,
    TrialSettings,
    error_event,
    read,
)
from dataprof.measure.sampler import Samples
from dataprof.measure.summary import summarize
from dataprof.measure.sweep.commands import COMMANDS, EpochCheck, Load, RunTrial, Share, Stop, ThreadCheckRequest
from dataprof.measure.sweep.events import (
    DatasetBuilt,
    FirstBatch,
    Found,
    Garbled,
    HostError,
    LogPaused,
    Progress,
    Ready,
    Shared,
    TrialExit,
    TrialStarted,
    WindowEnd,
    WindowStart,
    Workers,
    answer,
    heard,
    said,
)
from dataprof.measure.sweep.link import Host
from dataprof.measure.sweep.outcome import outcome_of, trial_result
from dataprof.results.codec import encode
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.vocabulary import TrialStatus

FIGURES = TrialFigures(
    samples_per_s=800.0, samples_per_s_spread=0.01, wait_fraction=0.5,
    wait_ms={"p50": 10.0, "p95": 12.0, "p99": 13.0, "max": 14.0, "mean": 10.5}, wait_cpu_ms_mean=1.0,
    copy_ms_mean=0.0, step_ms_mean=10.0, batches=40, samples=320, window_s=0.4, epoch_starts_in_window=0,
    epoch_start_wait_s=0.0, first_batch_s=0.2, worker_processes=2, epochs_started=1, epoch_samples=None,
    repeat_fraction=None, batch_marks=(), sampler_ms_mean=0.01, receive_ms_mean=0.2, first_pass_end=False)


EXITED = TrialExit(0)


def result_event(**changes: object) -> dict[str, object]:
    return {"ev": "result", **{k: v for k, v in dataclasses.asdict(FIGURES).items() if k not in changes},
            **{k: v for k, v in changes.items() if v is not None}}


def test_a_result_reads_back_whole() -> None:
    assert read(TrialFigures, result_event()) == FIGURES


@pytest.mark.parametrize(("changes", "message"), [
    ({"sampels_per_s": 1.0}, "unknown keys \\['sampels_per_s'\\]"),
    ({"window_s": None}, "missing keys \\['window_s'\\]"),
])
def test_a_result_with_a_key_unknown_or_missing_is_an_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        read(TrialFigures, result_event(**changes))


def test_an_error_event_is_typed_and_its_status_known() -> None:
    word = read(TrialError, error_event(TrialStatus.CRASHED, "a worker died", "tb"))
    assert word == TrialError(TrialStatus.CRASHED, "a worker died", "tb") and word.status is TrialStatus.CRASHED
    with pytest.raises(ProtocolError, match="unknown status 'exploded'"):
        read(TrialError, {"ev": "error", "status": "exploded", "message": "?"})


def test_the_parent_turns_a_broken_last_word_into_a_failed_trial_not_a_silent_none() -> None:
    outcome = outcome_of(heard(result_event(sampels_per_s=1.0)), EXITED, {}, {})
    assert outcome["status"] == TrialStatus.FAILED and "protocol" in outcome["error"]
    good = trial_result(LoaderConfig(2, False, 2, True), outcome_of(heard(result_event()), EXITED, {}, {}))
    assert good.samples_per_s == 800.0 and good.wait_ms is not None and good.wait_ms.p99 == 13.0


def test_reads_counted_by_the_trial_over_its_window_stand_for_the_parent_s_over_another_span() -> None:
    # FIGURES: 320 samples in a 0.4 s window; the parent's readings spanned the window's end and a pause after it
    parents = {"storage_read_bytes_per_s": 1000.0, "read_chars_per_s": 2000.0}
    counted = trial_result(LoaderConfig(2), outcome_of(
        heard(result_event(window_read_bytes=320 * 65536, window_read_chars=320 * 70000)), EXITED, {}, parents))
    assert counted.storage.storage_read_bytes_per_s == 320 * 65536 / 0.4
    assert counted.storage.read_bytes_per_sample == pytest.approx(65536)
    assert counted.storage.read_chars_per_sample == pytest.approx(70000)
    uncounted = trial_result(LoaderConfig(2), outcome_of(heard(result_event()), EXITED, {}, parents))  # not Linux
    assert uncounted.storage.storage_read_bytes_per_s == 1000.0


def test_a_trial_s_own_reads_grow_by_what_it_read_and_skip_a_child_already_gone(tmp_path: Path) -> None:
    if process_reads([]) is None:
        pytest.skip("no /proc/PID/io here")
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 100_000)
    before = process_reads([2 ** 22 + 1])  # no such process: a reaped child's count is in this process's own
    path.read_bytes()
    after = process_reads([])
    assert before is not None and after is not None and after[1] - before[1] >= 100_000


KNOWN = """
import json, subprocess, sys
from dataprof.measure.probes import only_children
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
print(json.dumps([only_children({child.pid}), only_children(set())]))
child.kill()
"""


@pytest.mark.slow
def test_reads_are_summed_only_where_every_process_below_is_known() -> None:
    # in a fresh process, as a trial is: a process below it that is not among the known ones means no sum
    out = subprocess.run([sys.executable, "-c", KNOWN], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == [True, False]


def test_a_trial_that_ended_without_a_word_is_told_by_how_it_and_its_workers_ended() -> None:
    assert outcome_of(None, TrialExit(1), {}, {})["error"] == \
        "the trial process exited with code 1 without a result"
    # a worker died by SIGSEGV, and the trial exited before its report: the host reaped the worker and says so
    crashed = outcome_of(None, TrialExit(1, None, ("SIGSEGV",)), {}, {})
    assert crashed["status"] == TrialStatus.CRASHED
    assert crashed["error"].startswith("a DataLoader worker died by SIGSEGV")
    killed = outcome_of(None, TrialExit(1, "SIGABRT", ("SIGSEGV",)), {}, {})
    assert killed["error"].startswith("the trial process died by SIGABRT")  # its own end comes first


def test_every_event_reads_back_as_it_was_said_and_a_line_off_the_protocol_is_garbled_not_dropped() -> None:
    events = [TrialStarted(12), DatasetBuilt(0.5), Shared(0.25), Ready("GPU-1", "0:1:0.0", "H100"), Ready(),
              FirstBatch(0.1), Progress(3), Progress(), WindowStart(), LogPaused(2.5), WindowEnd("/tmp/x"),
              WindowEnd(), Workers((3, 4)), HostError("it broke", "tb"), TrialError(TrialStatus.OOM, "too big"),
              TrialExit(-9, "SIGKILL", ("SIGBUS",)), Found("host_ready", {"framework": "torch"})]
    assert [heard(json.loads(json.dumps(said(event)))) for event in events] == events
    assert heard(answer(FIGURES)) == Found("result", encode(FIGURES))
    assert heard({"ev": "progres"}) == Garbled("unknown event in {'ev': 'progres'}")
    assert heard({"ev": "workers", "pid": [3]}).exit is False  # type: ignore[union-attr]
    assert heard({"ev": "trial_exit", "code": 1}).exit is True  # type: ignore[union-attr]


def test_every_command_reads_back_as_it_was_told_and_an_unknown_one_is_an_error() -> None:
    sweep = SweepSettings(target="x:y", space=SearchSpace((2,)))
    config = LoaderConfig(4, True, 2, True, multiprocessing_context="spawn")
    commands = [Load(LoadRequest.of(sweep)), Share(), Stop(), RunTrial(config, TrialSettings.of(sweep, opens_dir="o")),
                EpochCheck(config), ThreadCheckRequest(LoaderConfig.of(2, worker_kind="thread"), 32),
                AutotuneRequest(steps=8, batch_size=32, drop_last=False)]
    assert [COMMANDS.heard(json.loads(json.dumps(COMMANDS.said(command)))) for command in commands] == commands
    with pytest.raises(ProtocolError, match="unknown command"):
        COMMANDS.heard({"cmd": "trail"})


def test_a_load_answered_off_the_protocol_is_one_line_that_names_the_bug() -> None:
    host = object.__new__(Host)
    host.settings = SweepSettings(target="x:y", space=SearchSpace((2,)))
    replies = iter([heard({"ev": "built", "build_s": 0.1}), heard({"ev": "host_ready_"})])
    host.next_event = lambda timeout_s: next(replies)  # type: ignore[method-assign]
    with pytest.raises(TargetError, match=r"^the process loading x:y said something off dataprof's protocol "
                                          r"\(unknown event in .*\): a bug in dataprof, please report it$"):
        host._await(Found)


def test_a_trial_whose_exit_does_not_read_fails_as_a_bug_and_says_so() -> None:
    outcome = outcome_of(None, Garbled("missing keys ['returncode']", exit=True), {}, {})
    assert outcome["status"] == TrialStatus.FAILED
    assert outcome["error"].startswith("the trial's last word does not follow dataprof's protocol (missing keys")


def test_the_signals_that_ended_a_trial_s_workers_leave_out_dataprof_s_own_kill() -> None:
    def by(sig: int) -> int:  # a wait status: ended by ``sig``
        return sig & 0x7F

    def code(exit_code: int) -> int:  # a wait status: exited with ``exit_code``
        return (exit_code & 0xFF) << 8

    statuses = {10: by(signal.SIGSEGV), 11: by(signal.SIGKILL), 12: code(1), 13: by(signal.SIGBUS)}
    assert os.WIFSIGNALED(statuses[10]) and not os.WIFSIGNALED(statuses[12])
    assert killed_by(statuses, {10, 11, 12}) == ["SIGSEGV"]  # 13 is not the trial's
    assert killed_by(statuses, {10, 13}) == ["SIGSEGV", "SIGBUS"]


def test_every_figure_the_sampler_summarises_is_a_field_of_the_trial() -> None:
    trial = trial_result(LoaderConfig(0), {"status": TrialStatus.OK, **summarize(Samples())})
    assert trial.cpu.cpu_percent is None and trial.status is TrialStatus.OK
    with pytest.raises(TypeError):
        trial_result(LoaderConfig(0), {"status": TrialStatus.OK, "cpu_percnt": 1.0})


def test_requests_are_read_back_strictly_too() -> None:
    settings = TrialSettings(device="cpu", step_ms=0.0, batch_size=8, shuffle=False, drop_last=False,
                             trial_seconds=1.0)
    assert read(TrialSettings, encode(settings)) == settings
    with pytest.raises(ProtocolError, match="unknown keys \\['future_knob'\\]"):
        read(TrialSettings, {**encode(settings), "future_knob": 1})


def test_a_queued_channel_never_waits_on_a_reader_that_stalls_and_writes_every_line_in_order_once_it_reads() -> None:
    import os
    import threading

    from dataprof.measure.protocol import LineReader, QueuedChannel

    read_fd, write_fd = os.pipe()
    channel = QueuedChannel(write_fd)
    sent = threading.Thread(target=lambda: [channel.send({"ev": "batches", "n": n, "pad": "x" * 512})
                                            for n in range(1000)])  # 0.5 MB: eight times what a pipe holds
    sent.start()
    sent.join(timeout=5.0)
    assert not sent.is_alive()  # the reader has read nothing yet: a blocking write would still be waiting
    closing = threading.Thread(target=channel.close)
    closing.start()
    reader, got = LineReader(read_fd), []
    while len(got) < 1000:
        got.extend(reader.read() or [])
    closing.join(timeout=5.0)
    assert not closing.is_alive() and [m["n"] for m in got] == list(range(1000))
    os.close(write_fd)
    assert reader.read() is None
