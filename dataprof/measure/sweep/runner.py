"""Parent side of a trial: start the host, run one config, sample, guard, collect.

The runner owns every process it starts: a trial that hangs, crashes or
grows past the memory limit is killed with its whole process group, and the
sweep goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from dataprof.backends.frameworks import likely_framework
from dataprof.measure.cache.files import OWN_PREFIX
from dataprof.measure.cache.footprint import DataFiles, dataset_paths, files_read
from dataprof.measure.cache.open_log import OpenLog
from dataprof.measure.cache.page_cache import evict
from dataprof.measure.environment import cpu_budget, pinned_cpus, socket_hang_cause
from dataprof.measure.gpu import NullGpuProbe, NvmlProbe
from dataprof.measure.probes import ProcessTreeProbe
from dataprof.measure.protocol import Message, TrialSettings
from dataprof.measure.sampler import Sampler
from dataprof.measure.summary import summarize
from dataprof.measure.sweep.commands import RunTrial
from dataprof.measure.sweep.events import (
    WORDS,
    DatasetBuilt,
    FirstBatch,
    LogPaused,
    Progress,
    Ready,
    TrialStarted,
    WindowEnd,
    WindowStart,
    Word,
    ends,
)
from dataprof.measure.sweep.link import Host, HostDied
from dataprof.measure.sweep.outcome import outcome_of, trial_result
from dataprof.measure.sweep.sharing import DatasetSharing, RunnerFacts
from dataprof.measure.sweep.side_runs import SideRuns
from dataprof.measure.system import SystemProbe
from dataprof.measure.timing import Rival
from dataprof.results.cache import Eviction
from dataprof.results.environment import DatasetBuilds, DatasetInfo, ProbeReply
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import Event, Observer, TrialStatus

SHARE_BUILD_S = 2.0
"""A dataset that takes longer than this to build is built once and shared; a quicker one, in every trial."""


class TrialRunner:
    """Runs configs one at a time in fresh processes forked by the host.

    Each trial builds the dataset itself, as cold as a training process, unless
    building it takes over :data:`SHARE_BUILD_S`: the host then builds it once
    and forks every trial from there (it never iterates it). A shared-dataset
    trial that does not complete is run again building its own; if that one
    completes, the shared instance was the cause, and every later trial builds
    its own (:attr:`facts` says so).
    """

    def __init__(self, settings: SweepSettings, observer: Observer | None = None,
                 sample_interval_s: float = 0.25, objects: Mapping[str, Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        """Seconds, for the trials' durations and the timeouts that end them (a test's fake clock)."""
        self.objects: Mapping[str, Any] = objects or {}
        """Objects handed over by the Python API, by name: the host is forked holding them."""
        self.observer = observer or (lambda event, data: None)
        self.sample_interval_s = sample_interval_s
        self.host: Host | None = None
        self.host_info = ProbeReply()
        """What the probe found: the framework, the DataLoader's arguments, the start method, …"""
        self.sharing = DatasetSharing()
        self._gpu: tuple[str | None, str | None] = (None, None)
        """The GPU the trials used, and why its utilisation was not measured (None, None without one)."""
        self.current_pid: int | None = None
        self.side_runs = SideRuns(self)
        """Runs its host forks like a trial that measure nothing (Paddle's autotune, the epoch and thread checks)."""
        self.cpus = pinned_cpus(settings.cpus, settings.rank % max(1, settings.ranks_per_node))
        """The CPUs the host and its trials are pinned to (``--cpus``); None: this process's."""
        self.expected_framework = None if settings.target in self.objects else likely_framework(settings.framework)
        self.data_files = DataFiles()
        """The data files the trials read so far: with their directories' files, what a cold trial evicts first."""
        self.evictions: list[Eviction] = []
        """What each cold trial's eviction did, in order."""

    @property
    def facts(self) -> RunnerFacts:
        """What the trials so far showed, for the report."""
        return RunnerFacts(*self._gpu, self.sharing.builds, self.sharing.per_trial)

    def start(self) -> DatasetInfo:
        """Start the host and check the dataset in a probe; TargetError if that fails."""
        info = self._probed_host()
        sharing = self.sharing
        try:
            sharing.per_trial = self.settings.target not in self.objects
            if not sharing.per_trial:
                sharing.builds = DatasetBuilds(given=True)
            elif sharing.shared_build_s is not None and not sharing.forced_per_trial:
                self._share(sharing.shared_build_s)
        except BaseException:
            self.close()
            raise
        self.host_info = ProbeReply.of(info)
        known = DatasetInfo.__dataclass_fields__
        return DatasetInfo(**{k: v for k, v in info.items() if k in known and k != "loader"},
                           loader=self.host_info.loader)

    def _probed_host(self) -> Message:
        """A started host and what its probe found.

        A host that expected another framework than the probe found (``auto`` guessed torch for a Paddle
        dataset) imported one the trials must not inherit: a fresh host expecting the one found replaces it.
        """
        self.host = Host(self.settings, self.objects, self.expected_framework, self.cpus)
        try:
            info = self.host.load()
        except BaseException:
            self.close()
            raise
        if self.expected_framework in (None, info["framework"]):
            return info
        self.close()
        self.expected_framework = info["framework"]
        return self._probed_host()

    def kill_current(self) -> None:
        """Kill the running trial's whole process group (Ctrl-C, timeouts, limits)."""
        if self.current_pid is not None:
            try:
                os.killpg(self.current_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """Kill the trial in flight, stop the host."""
        self.kill_current()
        if self.host is not None:
            self.host.close()
            self.host = None

    def live_host(self) -> Host:
        """The host, started again if it died with a trial."""
        if self.host is None or self.host.proc.poll() is not None:
            if self.host is not None:
                self.host.close()
            self.start()
        assert self.host is not None
        return self.host

    def _share(self, build_s: float) -> None:
        assert self.host is not None
        self.host.share()
        self.sharing.per_trial = False
        self.sharing.shared_build_s = build_s
        self.sharing.builds = dataclasses.replace(self.sharing.builds, shared_after_s=build_s)

    def measure(self, config: LoaderConfig, rival: Rival | None = None, cold: bool = False) -> TrialResult:
        """Measure ``config`` in a fresh trial (rerun building its own dataset when a shared one failed);
        ``rival``: what the decision it serves weighs it against (its window may end once that is settled);
        ``cold``: the data files read so far are evicted from the page cache first, and the window ends with
        the dataset's first pass."""
        if cold:
            return self._run(config, rival, cold=True)
        sharing = self.sharing
        shared = not sharing.per_trial
        result = self._run(config, rival)
        failed = result.status in (TrialStatus.FAILED, TrialStatus.TIMEOUT, TrialStatus.CRASHED)
        if shared and failed and self._may_build_instead():
            sharing.fallback_tried = sharing.forced_per_trial = True
            self._restart()
            again = self._run(config, rival)
            if again.status == TrialStatus.OK:
                sharing.builds = dataclasses.replace(sharing.builds,
                                                     fallback=(config.label(), result.status, result.error))
                return again
            sharing.forced_per_trial = False
            self._restart()
            return again
        if sharing.per_trial and result.build_s is not None and not sharing.forced_per_trial:
            if result.build_s > SHARE_BUILD_S:
                self._share(result.build_s)
            elif sharing.builds.build_s is None:
                sharing.builds = dataclasses.replace(sharing.builds, build_s=result.build_s)
        return result

    def _may_build_instead(self) -> bool:
        return not self.sharing.fallback_tried and self.settings.target not in self.objects

    def _restart(self) -> None:
        if self.host is not None:
            self.host.close()
            self.host = None
        self.start()

    def _run(self, config: LoaderConfig, rival: Rival | None = None, cold: bool = False) -> TrialResult:
        host = self.live_host()
        opens_dir = tempfile.mkdtemp(prefix=OWN_PREFIX + "opens-")
        self.data_files.own.add(os.path.join(opens_dir, ""))
        try:
            evicted = evict(dataset_paths(self.data_files)) if cold else None
            started = self.clock()
            settings = TrialSettings.of(self.settings, rival, first_pass=cold, opens_dir=opens_dir)
            host.send(RunTrial(config, settings))
            try:
                outcome = self._follow(config, opens_dir)
            except HostDied as exc:
                outcome = {"status": TrialStatus.CRASHED, "error": f"the trial's host process died: {exc}".strip()}
            except BaseException:
                self.kill_current()  # Ctrl-C mid-trial: it ends now (left, the host waited on it until closed)
                raise
            finally:
                self.current_pid = None
        finally:
            shutil.rmtree(opens_dir, ignore_errors=True)
        outcome["duration_s"] = self.clock() - started
        if evicted is not None:
            self.evictions.append(evicted)
            outcome.update(cache="cold", evicted_files=evicted.files, evicted_bytes=evicted.bytes,
                           resident_after_eviction=None if evicted.resident_after is None or not evicted.bytes
                           else evicted.resident_after / evicted.bytes)
        return trial_result(config, outcome)

    def _files_read(self, sampler: Sampler | None, opens_dir: str, rate: float | None,
                    logged_until: float | None) -> Message:
        """The data files the trial read (:func:`files_read`; its log paused at ``logged_until``), kept in
        :attr:`data_files`."""
        if sampler is None:
            return {}
        window = sampler.samples.window_start, sampler.samples.window_end
        return files_read(self.data_files, sampler.tree_probe.held, OpenLog.read(opens_dir), window, rate,
                          logged_until)

    def _memory_guard(self, killed_for: dict[TrialStatus, str]) -> Callable[[Any], None]:
        """The sampler's check of each reading: past the memory limit, the trial is killed (status ``oom``)."""
        limit = self.settings.memory_limit_bytes

        def guard(sample: Any) -> None:
            if limit is not None and sample.pss_bytes is not None and sample.pss_bytes > limit \
                    and not killed_for:
                killed_for[TrialStatus.OOM] = (
                    f"the trial's {sample.processes} processes reached {fmt_bytes(sample.pss_bytes)} PSS, "
                    f"over the {fmt_bytes(limit)} memory limit: killed before the OOM killer acts")
                self.kill_current()

        return guard

    def _open_gpu(self, ready: Ready, sampler: Sampler | None) -> Any:
        """The NVML probe of the device the trial's ``ready`` event names (a null probe without one)."""
        probe: Any = NvmlProbe.open(ready.uuid, ready.pci_bus_id)
        self._gpu = (ready.name, getattr(probe, "reason", None) or None)
        if sampler is not None:
            sampler.gpu_probe = probe
        return probe

    def _follow(self, config: LoaderConfig, opens_dir: str) -> Message:
        """Follow one trial's events to its exit: sample it, guard it, mark its window, gather the data files it
        read (``opens_dir``: where its processes log the files they open); its outcome."""
        assert self.host is not None
        host = self.host
        killed_for: dict[TrialStatus, str] = {}
        guard_memory = self._memory_guard(killed_for)
        sampler: Sampler | None = None
        gpu_probe: Any = NullGpuProbe()
        word: Word | None = None
        built_s: float | None = None
        logged_until: float | None = None
        last_progress = self.clock()
        try:
            while True:
                event = host.next_event(0.25)
                now = self.clock()
                if event is None:
                    if now - last_progress > self.settings.trial_timeout_s and not killed_for:
                        cause = socket_hang_cause() if config.num_workers and not config.threads else None
                        killed_for[TrialStatus.TIMEOUT] = (
                            f"no batch for {self.settings.trial_timeout_s:g} s: the loader hung; "
                            "killed the trial and its workers" + (f" ({cause})" if cause else ""))
                        self.kill_current()
                    continue
                if isinstance(event, TrialStarted):
                    self.current_pid = event.pid
                    sampler = self._start_sampler(event.pid, gpu_probe, guard_memory)
                elif isinstance(event, Ready):
                    if event.uuid or event.pci_bus_id:
                        gpu_probe = self._open_gpu(event, sampler)
                    last_progress = now
                elif isinstance(event, LogPaused):
                    logged_until = event.at
                elif isinstance(event, DatasetBuilt):
                    built_s = event.build_s
                    last_progress = now
                elif isinstance(event, (FirstBatch, Progress)):
                    last_progress = now
                    self.observer(Event.FIRST_BATCH if isinstance(event, FirstBatch) else Event.PROGRESS,
                                  {"config": config})
                elif isinstance(event, WindowStart) and sampler is not None:
                    sampler.mark_window_start()
                    self.observer(Event.WINDOW_START, {"config": config})
                elif isinstance(event, WindowEnd):
                    self._window_end(event, sampler)
                elif (end := ends(event)) is not None:
                    resources = summarize(sampler.samples) if sampler is not None else {}
                    outcome = {**outcome_of(word, end, killed_for, resources), "build_s": built_s}
                    read = self._files_read(sampler, opens_dir, outcome.get("samples_per_s"), logged_until)
                    return {**outcome, **read}
                elif word is None and isinstance(event, WORDS):
                    word = event  # the first word is the trial's; later ones come from its clean-up
        finally:
            if sampler is not None:
                sampler.stop()
            gpu_probe.close()

    def _window_end(self, event: WindowEnd, sampler: Sampler | None) -> None:
        """The window closed: mark it, then let the trial's workers go (it keeps them until they are read)."""
        try:
            if sampler is not None:
                sampler.mark_window_end()
        finally:
            if event.release is not None:
                self.data_files.own.add(event.release)
                with contextlib.suppress(OSError):
                    os.unlink(event.release)

    def _start_sampler(self, pid: int, gpu_probe: Any, on_sample: Callable[[Any], None]) -> Sampler | None:
        try:
            tree = ProcessTreeProbe(pid, files=True, files_every_s=math.inf)  # listed once the window has closed
        except Exception:
            return None  # the trial already exited
        own = (os.getpid(), self.host.proc.pid) if self.host is not None else (os.getpid(),)
        settings = self.settings
        return Sampler(tree, SystemProbe(own, self.cpus), gpu_probe, self.sample_interval_s, on_sample=on_sample,
                       window_s=settings.trial_seconds, memory_limit_bytes=settings.memory_limit_bytes,
                       end_threads=len(self.cpus) if self.cpus else cpu_budget().usable).start()
