from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace
from typing import Any

import pytest

from dataprof.measure.consumer import visible_gpu_uuid
from dataprof.measure.gpu import GpuSample, NullGpuProbe, NvmlProbe
from dataprof.measure.probes import PrivatePages, ProcessTreeProbe, TreeSample
from dataprof.measure.sampler import Sampler, Samples
from dataprof.measure.summary import summarize
from dataprof.measure.system import SystemSample


def tree(t: float, cpu_s: float, pss: int, workers_uss: int = 0) -> TreeSample:
    return TreeSample(t=t, cpu_s=cpu_s, main_cpu_s=cpu_s / 2, main_thread_cpu_s=cpu_s / 4, pss_bytes=pss,
                      main_uss_bytes=100, workers_uss_bytes=workers_uss, processes=3)


def system(t: float, busy: float, total: float, iowait: float = 0.0, available: int = 10**9) -> SystemSample:
    return SystemSample(t=t, busy_s=busy, total_s=total, iowait_s=iowait, available_bytes=available)


def test_summary_uses_the_window_only() -> None:
    samples = Samples(
        tree=[tree(0, 0.0, 500), tree(1, 5.0, 900, 10), tree(3, 8.0, 700, 30), tree(4, 20.0, 600)],
        system=[system(0, 0, 0), system(1, 1.0, 2.0, 0.2, 800), system(3, 4.0, 6.0, 0.6, 700), system(4, 9, 9)],
        window_start=1.0, window_end=3.0,
    )
    out = summarize(samples)
    assert out["cpu_percent"] == pytest.approx(150.0)  # 3 CPU-seconds over 2 s
    assert out["main_cpu_percent"] == pytest.approx(75.0)
    assert out["main_thread_cpu_percent"] == pytest.approx(37.5)
    assert out["cpu_percent_system"] == pytest.approx(75.0)
    assert out["iowait_percent"] == pytest.approx(10.0)
    assert out["peak_memory_bytes"] == 900  # peak over the whole trial
    assert (out["workers_uss_start_bytes"], out["workers_uss_end_bytes"]) == (10, 30)
    assert out["available_memory_min_bytes"] == 700
    assert out["gpu_util_percent"] is None


def test_each_thread_of_the_main_process_is_read_through_the_window() -> None:
    start = dataclasses.replace(tree(1, 5.0, 900), thread_cpu_s=((11, 1.0), (12, 0.5), (13, 0.0)))
    end = dataclasses.replace(tree(3, 8.0, 700), thread_cpu_s=((11, 2.8), (12, 0.7), (14, 0.9)))  # 13 ended, 14 new
    out = summarize(Samples(tree=[start, end], system=[system(1, 0, 1), system(3, 1, 2)], window_start=1,
                            window_end=3))
    assert out["thread_cpu_percent"] == (90.0, 10.0)  # busiest first; a thread not there throughout left out


def test_threads_started_again_at_each_epoch_are_read_over_the_part_of_the_window_they_ran() -> None:
    # torchdata.nodes starts its mapper's threads at each epoch: none lives through a window of several epochs
    readings = [(1, ((11, 0.0), (21, 0.0))), (2, ((11, 0.1), (21, 0.8))), (3, ((11, 0.2), (21, 1.6), (22, 0.1))),
                (4, ((11, 0.3), (22, 0.9))), (5, ((11, 0.4), (22, 1.7), (23, 0.05)))]
    tree_readings = [dataclasses.replace(tree(t, float(t), 900), thread_cpu_s=threads) for t, threads in readings]
    out = summarize(Samples(tree=tree_readings, system=[system(1, 0, 1), system(5, 1, 2)], window_start=1,
                            window_end=5))
    assert out["thread_cpu_percent"] == (80.0, 80.0, 10.0)  # 23, seen once at the end, left out


def test_window_ends_on_a_complete_process_tree() -> None:
    # The last reading caught the workers exiting (1 process instead of 3): their CPU would vanish.
    exiting = TreeSample(t=3, cpu_s=2.5, main_cpu_s=1.0, main_thread_cpu_s=0.5, pss_bytes=10,
                         main_uss_bytes=100, workers_uss_bytes=0, processes=1)
    samples = Samples(tree=[tree(0, 0.0, 1), tree(1, 1.0, 1), tree(2, 3.0, 1), exiting],
                      system=[system(0, 0, 1), system(3, 1, 2)], window_start=0, window_end=3)
    assert summarize(samples)["cpu_percent"] == pytest.approx(150.0)


def test_transient_worker_memory_is_not_growth() -> None:
    readings = [tree(t, t, 1, uss) for t, uss in enumerate([50, 90, 52, 51, 95, 53])]
    samples = Samples(tree=readings, system=[system(0, 0, 1), system(5, 1, 2)], window_start=0, window_end=5)
    out = summarize(samples)
    assert (out["workers_uss_start_bytes"], out["workers_uss_end_bytes"]) == (50, 53)


def test_one_memory_reading_in_the_window_says_nothing_about_growth() -> None:
    light = [dataclasses.replace(tree(t, t, 1), workers_uss_bytes=None) for t in (0, 2)]
    samples = Samples(tree=[light[0], tree(1, 1, 1, 70), light[1]], system=[system(0, 0, 1), system(2, 1, 2)],
                      window_start=0, window_end=2)
    out = summarize(samples)
    assert (out["workers_uss_start_bytes"], out["workers_uss_end_bytes"]) == (None, None)


def test_gpu_utilisation_is_averaged_over_window_samples() -> None:
    samples = Samples(tree=[tree(1, 0, 1), tree(2, 1, 1)], system=[system(1, 0, 1), system(2, 1, 2)],
                      gpu=[GpuSample(0.5, [0.0], 1), GpuSample(1.5, [80.0, 100.0], 5), GpuSample(2, [90.0], 7)],
                      window_start=1, window_end=2)
    out = summarize(samples)
    assert out["gpu_util_percent"] == pytest.approx(90.0)
    assert out["gpu_memory_bytes"] == 7


class FakeNvml:
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, uuids: list[str], fail_init: bool = False, samples_fail: bool = False) -> None:
        self.uuids = uuids
        self.fail_init = fail_init
        self.samples_fail = samples_fail
        self.shutdown = 0
        self.asked: list[int] = []

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.uuids:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return uuid

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        raise RuntimeError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetSamples(self, handle: str, kind: int, since: int) -> tuple[int, list[Any]]:
        if self.samples_fail:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        self.asked.append(since)
        values = [(since + 1, 40), (since + 2, 60)]
        return 1, [SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=v)) for ts, v in values]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=33)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(used=123)


def test_nvml_matches_the_torch_device_by_uuid() -> None:
    nvml = FakeNvml(["GPU-abc"])
    probe = NvmlProbe.open("abc", None, nvml=nvml)
    assert isinstance(probe, NvmlProbe)
    first = probe.sample(0.0)
    assert first is not None and first.util_percent == [40.0, 60.0] and first.memory_used_bytes == 123
    probe.sample(1.0)
    assert nvml.asked[1] == nvml.asked[0] + 2  # only samples newer than the last one seen


def test_nvml_falls_back_to_instant_utilisation() -> None:
    probe = NvmlProbe.open("GPU-abc", None, nvml=FakeNvml(["GPU-abc"], samples_fail=True))
    sample = probe.sample(0.0)
    assert sample is not None and sample.util_percent == [33.0]


def test_missing_nvml_or_device_is_data_not_an_exception() -> None:
    no_lib = NvmlProbe.open("abc", None, nvml=FakeNvml([], fail_init=True))
    assert isinstance(no_lib, NullGpuProbe) and "NVML unavailable" in no_lib.reason
    nvml = FakeNvml(["GPU-other"])
    unmatched = NvmlProbe.open("abc", None, nvml=nvml)
    assert isinstance(unmatched, NullGpuProbe) and "could not match" in unmatched.reason
    assert nvml.shutdown == 1
    assert unmatched.sample(0.0) is None


class Clock:
    """A clock that moves only when a probe's reading takes time."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class CountingProbe:
    """A tree whose CPU time grows by one second per reading; a memory reading takes ``memory_s`` of
    ``clock``'s time, and is cut off (no memory) when that passes its deadline."""

    def __init__(self, clock: Clock | None = None, memory_s: float = 0.0) -> None:
        self.clock, self.memory_s = clock, memory_s
        self.calls = 0
        self.memory: list[bool] = []
        self.breakdown: list[bool] = []

    def sample(self, now: float, memory: bool = True, breakdown: bool = False, deadline: float | None = None,
               threads: int = 1) -> TreeSample:
        self.calls += 1
        self.memory.append(memory)
        self.breakdown.append(memory and breakdown)
        reading = dataclasses.replace(tree(now, float(self.calls), 10 * self.calls),
                                      workers_private=PrivatePages(0, 0, 0) if breakdown else None)
        if memory and self.clock is not None:
            self.clock.t += self.memory_s
            memory = deadline is None or self.clock.t <= deadline
        return reading if memory else dataclasses.replace(reading, pss_bytes=None, main_uss_bytes=None,
                                                          workers_uss_bytes=None, workers_private=None)


def machine(available: list[int] | None = None) -> SimpleNamespace:
    """A system probe; ``available``: the machine's available memory, one value per reading (the last repeats)."""
    left = list(available or [10**9])
    return SimpleNamespace(sample=lambda now: system(now, now, 2 * now, available=left.pop(0) if len(left) > 1
                                                     else left[0]))


def test_sampler_marks_window_and_reports_to_the_guard() -> None:
    seen: list[int] = []
    clock = Clock()
    sampler = Sampler(CountingProbe(), machine(), NullGpuProbe(), interval_s=3600, clock=clock,
                      on_sample=lambda s: seen.append(s.pss_bytes or 0))
    sampler.start()
    clock.t = 1.0
    sampler.mark_window_start()
    clock.t = 2.0
    sampler.mark_window_end()
    samples = sampler.stop()
    assert samples.window_start == 1.0 and samples.window_end == 2.0
    assert seen == [10, 20, 30]
    assert summarize(samples)["cpu_percent"] == pytest.approx(100.0)


def test_memory_readings_keep_to_the_duty_however_costly_they_are() -> None:
    clock = Clock()
    probe = CountingProbe(clock, memory_s=0.5)  # PSS of many workers: half a second a reading
    sampler = Sampler(probe, machine(), NullGpuProbe(), interval_s=3600, clock=clock, window_s=100.0)
    sampler.start()
    for _ in range(8):  # the workers start (that start-up is timed): CPU times only
        clock.t += 0.25
        sampler.sample_now(memory=None)
    assert probe.memory == [True] + [False] * 8
    sampler.mark_window_start()  # a long window affords the reading
    for _ in range(240):  # a reading every 0.25 s for 60 s
        clock.t += 0.25
        sampler.sample_now(memory=None)
    window = probe.memory[9:]
    assert window[0] and window.count(True) == 2  # the start, then one 50 s on: 0.5 s is 1% of 50 s in the window
    assert window.count(False) == 239  # CPU times at every other tick
    sampler.samples.window_end = clock.t  # after the window, 5% of a core: 10 s apart, not 50
    for _ in range(80):
        clock.t += 0.25
        sampler.sample_now(memory=None)
    after = [n for n, read in enumerate(probe.memory[9 + 241:]) if read]
    assert after == [0, 38, 76]  # every 10 s: 38 ticks and the reading's own 0.5 s
    sampler.stop()


def test_a_costly_memory_reading_is_not_taken_inside_the_window() -> None:
    clock = Clock()
    probe = CountingProbe(clock, memory_s=0.5)
    sampler = Sampler(probe, machine(), NullGpuProbe(), interval_s=3600, clock=clock, window_s=3.0)
    sampler.start()
    clock.t = 20.0
    sampler.mark_window_start()  # 0.5 s is over the start's budget of 5% of 3 s: CPU times only
    for _ in range(40):  # 10 s of ticks: the duty would allow one, the window does not
        clock.t += 0.25
        sampler.sample_now(memory=None)
    sampler.mark_window_end()
    samples = sampler.stop()
    assert probe.memory == [True, False] + [False] * 40 + [True]  # the end mark reads, once the window is over
    assert probe.breakdown[-1] is False  # no breakdown at the end without one at the start: no growth to take
    summary = summarize(samples)
    assert summary["cpu_percent"] == pytest.approx(100.0 * 41 / 10)  # 41 readings' CPU over the 10 s
    assert summary["peak_memory_bytes"] == 10 * probe.calls


def test_a_reading_past_the_window_starts_budget_is_cut_off() -> None:
    clock = Clock()
    probe = CountingProbe(clock, memory_s=0.01)  # cheap before the window, when fewer workers ran
    sampler = Sampler(probe, machine(), NullGpuProbe(), interval_s=3600, clock=clock, window_s=1.0)
    sampler.start()
    probe.memory_s = 0.3  # over the start's 0.25 s budget by now
    sampler.mark_window_start()
    sampler.mark_window_end()
    samples = sampler.stop()
    assert probe.memory == [True, True, True] and probe.breakdown == [False, True, False]
    assert samples.tree[1].workers_private is None and samples.tree[1].pss_bytes is None  # cut off: no figure


def test_memory_is_read_early_when_the_machine_runs_towards_the_memory_limit() -> None:
    clock = Clock()
    probe = CountingProbe(clock, memory_s=0.5)
    gib = 2**30
    # the last reading left 1 GiB under the limit; then the machine's available memory falls 0.6 GiB
    sampler = Sampler(probe, machine([8 * gib, 8 * gib, int(7.4 * gib)]), NullGpuProbe(), interval_s=3600,
                      clock=clock, window_s=3.0, memory_limit_bytes=10 + gib)
    sampler.start()
    clock.t = 1.0
    sampler.mark_window_start()
    sampler.sample_now(memory=None)
    assert probe.memory == [True, False, True]  # read inside the window, whatever it costs: the guard needs it
    assert sampler.samples.tree[-1].pss_bytes is not None
    sampler.stop()


@pytest.mark.parametrize("window_s, at_start", [(0.0, False), (2.0, False), (6.0, True), (100.0, True)])
def test_the_window_start_reads_memory_while_the_window_affords_it(window_s: float, at_start: bool) -> None:
    clock = Clock()
    probe = CountingProbe(clock, memory_s=0.3)  # above the start's floor, below a long window's budget
    sampler = Sampler(probe, machine(), NullGpuProbe(), interval_s=3600, clock=clock, window_s=window_s)
    sampler.start()
    sampler.mark_window_start()
    sampler.mark_window_end()
    samples = sampler.stop()
    assert probe.memory == [True, at_start, True]
    assert probe.breakdown == [False, at_start, at_start]
    assert (samples.tree[1].workers_private is not None) == at_start


class FakeProcess:
    def __init__(self, pid: int, log: list[str], uss: int) -> None:
        self.pid, self.log, self.uss = pid, log, uss

    def cpu_times(self) -> Any:
        self.log.append(f"cpu {self.pid}")
        return SimpleNamespace(user=1.0, system=0.5, children_user=0.0, children_system=0.0)

    def threads(self) -> list[Any]:
        return [SimpleNamespace(id=self.pid, user_time=0.5, system_time=0.25)]

    def memory_full_info(self) -> Any:
        self.log.append(f"memory {self.pid}")
        return SimpleNamespace(uss=self.uss, pss=self.uss + 1)


def test_the_tree_probe_reads_every_cpu_time_before_any_memory() -> None:
    import psutil

    log: list[str] = []
    root, workers = FakeProcess(1, log, 100), [FakeProcess(2, log, 10), FakeProcess(3, log, 20)]
    root.children = lambda recursive: workers  # type: ignore[attr-defined]
    probe = ProcessTreeProbe.__new__(ProcessTreeProbe)
    probe.psutil, probe.root, probe.with_memory, probe.exclude, probe.files = psutil, root, True, None, False
    reading = probe.sample(5.0)
    assert log == ["cpu 1", "cpu 2", "cpu 3", "memory 1", "memory 2", "memory 3"]
    assert reading is not None and reading.cpu_s == pytest.approx(4.5) and reading.main_cpu_s == pytest.approx(1.5)
    assert (reading.main_uss_bytes, reading.workers_uss_bytes, reading.pss_bytes) == (100, 30, 133)
    log.clear()
    assert probe.sample(6.0, memory=False).workers_uss_bytes is None  # type: ignore[union-attr]
    assert log == ["cpu 1", "cpu 2", "cpu 3"]
    log.clear()
    late = probe.sample(6.5, deadline=time.monotonic() - 1)  # memory still going at its deadline: no figure
    assert late is not None and late.cpu_s == pytest.approx(4.5) and late.pss_bytes is None
    assert late.workers_uss_bytes is None and log[:3] == ["cpu 1", "cpu 2", "cpu 3"]
    together = probe.sample(7.0, threads=2)  # the end mark's: processes read at once, summed the same
    assert together is not None and (together.main_uss_bytes, together.workers_uss_bytes, together.pss_bytes) == \
        (100, 30, 133)
    probe.exclude = 3  # the sampler's own process, when it samples the process that started it
    log.clear()
    assert probe.sample(7.0, memory=False).processes == 2  # type: ignore[union-attr]
    assert log == ["cpu 1", "cpu 2"]


class IndexedNvml(FakeNvml):
    """NVML that also finds devices by index (a Paddle GPU is matched through CUDA_VISIBLE_DEVICES)."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self.uuids[index]

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return handle.encode()


def test_a_paddle_gpu_is_matched_to_nvml_through_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = IndexedNvml(["GPU-a", "GPU-b", "GPU-c"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert visible_gpu_uuid(0, nvml=nvml) == "GPU-c" and visible_gpu_uuid(1, nvml=nvml) == "GPU-a"
    assert visible_gpu_uuid(2, nvml=nvml) is None  # not visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")
    assert visible_gpu_uuid(0, nvml=nvml) == "GPU-b"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpu_uuid(1, nvml=nvml) == "GPU-b"
    assert visible_gpu_uuid(0, nvml=FakeNvml([], fail_init=True)) is None  # no NVML: no GPU figures, no crash


def test_private_page_growth_needs_both_marks_over_the_same_workers() -> None:
    def mark(t: float, inherited: int, processes: int = 3) -> TreeSample:
        return dataclasses.replace(tree(t, t, 500, 10), processes=processes,
                                   workers_private=PrivatePages(inherited=inherited, file=2 * inherited, new=0))

    samples = Samples(tree=[mark(1, 100), tree(2, 2.0, 500, 10), mark(3, 400)], window_start=1.0, window_end=3.0)
    out = summarize(samples)
    assert out["workers_inherited_growth_bytes"] == 300 and out["workers_file_growth_bytes"] == 600
    exiting = Samples(tree=[mark(1, 100), mark(3, 50, processes=2)], window_start=1.0, window_end=3.0)
    assert summarize(exiting)["workers_inherited_growth_bytes"] is None


def test_a_memory_reading_missing_a_process_is_no_reading() -> None:
    import psutil

    log: list[str] = []

    class Exiting(FakeProcess):
        def memory_full_info(self) -> Any:
            raise psutil.NoSuchProcess(self.pid)

    root = FakeProcess(1, log, 100)
    probe = ProcessTreeProbe.__new__(ProcessTreeProbe)
    probe.psutil, probe.root, probe.with_memory, probe.exclude, probe.files = psutil, root, True, None, False
    for workers in ([FakeProcess(2, log, 10), Exiting(3, log, 0)], [FakeProcess(2, log, 10), FakeProcess(3, log, 0)]):
        root.children = lambda recursive, w=workers: w  # type: ignore[attr-defined, misc]
        reading = probe.sample(5.0)
        assert reading is not None and reading.cpu_s > 0  # the CPU times still count
        assert (reading.main_uss_bytes, reading.workers_uss_bytes, reading.pss_bytes) == (None, None, None)


def test_workers_memory_at_the_window_end_is_null_when_no_complete_reading_was_taken() -> None:
    unread = [dataclasses.replace(tree(t, t + 1.0, 900), workers_uss_bytes=None) for t in (1.0, 2.0)]
    samples = Samples(tree=[tree(0.0, 1.0, 900, workers_uss=50 << 20), *unread], window_start=0.0, window_end=2.0)
    figures = summarize(samples)
    assert figures["workers_uss_start_bytes"] is None and figures["workers_uss_end_bytes"] is None


def test_the_competition_is_the_usable_cpus_busy_time_less_the_tree_and_dataprof() -> None:
    def busy(t: float, usable_busy: float, own: float | None) -> SystemSample:
        return SystemSample(t=t, busy_s=0.0, total_s=4 * t, iowait_s=0.0, available_bytes=1, usable_busy_s=usable_busy,
                            usable_total_s=2 * t, usable_cpus=2, own_cpu_s=own)

    # over 2 s: the 2 usable CPUs were busy 3.6 CPU-seconds; the trial took 1.0 core, dataprof 0.1
    samples = Samples(tree=[tree(1.0, 0.0, 900), tree(3.0, 2.0, 900)],
                      system=[busy(1.0, 0.0, 0.0), busy(3.0, 3.6, 0.2)], window_start=1.0, window_end=3.0)
    assert summarize(samples)["foreign_cpu_percent"] == pytest.approx(70.0)
    unread = Samples(tree=samples.tree, system=[busy(1.0, 0.0, 0.0), busy(3.0, 3.6, None)], window_start=1.0,
                     window_end=3.0)
    assert summarize(unread)["foreign_cpu_percent"] is None


def test_the_trial_keeps_its_workers_until_the_parent_has_read_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import threading

    from dataprof.measure.sweep import trial

    events: list[dict[str, Any]] = []
    read: list[bool] = []

    def parent(event: dict[str, Any]) -> None:  # the runner: reads the workers' memory, then removes the file
        events.append(event)

        def reading() -> None:
            read.append(True)
            os.unlink(event["release"])

        threading.Timer(0.05, reading).start()

    trial.hold_for_the_end_mark(parent)
    assert events[0]["ev"] == "window_end" and read == [True]  # it returned only once the parent had read
    monkeypatch.setattr(trial, "END_MARK_WAIT_S", 0.0)
    trial.hold_for_the_end_mark(events.append)  # a parent that never answers: the trial goes on, leaving no file
    assert not os.path.exists(events[1]["release"])
