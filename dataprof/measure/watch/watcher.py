"""The parent of ``dataprof run``: start the user's script watched, sample its process tree from outside,
collect its loaders' batch timings, and turn them into a RunReport (undecided).

The script's own stdin, stdout and stderr are the terminal's; its timings
arrive on a pipe of their own (``measure.watch.watched``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from dataprof.errors import Terminated
from dataprof.measure.environment import socket_hang_cause
from dataprof.measure.forked import PR_SET_CHILD_SUBREAPER, prctl
from dataprof.measure.gpu import NullGpuProbe
from dataprof.measure.probes import ProcessTreeProbe
from dataprof.measure.protocol import LineReader, child_env
from dataprof.measure.sampler import Sampler
from dataprof.measure.summary import summarize
from dataprof.measure.system import SystemProbe
from dataprof.measure.watch.collector import Collector, Outcome, SamplerMarks, Stop
from dataprof.measure.watch.ranks import RankFailures
from dataprof.measure.watch.resources import gpu_timeline, resources_of, storage_of
from dataprof.measure.watch.settings import WatchLimits, WatchSettings, check_target
from dataprof.measure.watch.sites import HOME_ENV
from dataprof.measure.watch.stopping import Stopper
from dataprof.results.codec import encode
from dataprof.results.run import RunReport
from dataprof.results.vocabulary import StopCause

EXIT_GRACE_S = 10.0
"""After Ctrl-C, how long the script has to end before it is killed."""
OWN_RANKS_GRACE_S = 2.0
"""How long a script whose own process stopped at its loader (``tune``) has to end by itself before it is ended."""
LEFTOVER_GRACE_S = 5.0
"""How long processes the script left behind (DataLoader workers) have to end once it exited."""


def watch(settings: WatchSettings, clock: Callable[[], float] = time.monotonic) -> RunReport:
    """Run the script watched until it ends (or the watch ends it); what was measured (``clock``: seconds, for
    its wall time)."""
    check_target(settings)
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # workers the script leaves behind become ours, to end
    before = _children()
    peers = RankFailures.of(beat=True)  # first: the round it joins is the script's too (its environment)
    read_fd, write_fd = os.pipe()
    started = clock()
    limits = json.dumps(encode(WatchLimits.of(settings)))
    proc = subprocess.Popen([sys.executable, "-m", "dataprof.measure.watch.watched", str(write_fd), limits,
                             "module" if settings.module else "script", settings.target, *settings.args],
                            pass_fds=(write_fd,), cwd=settings.cwd, env=_env(settings),
                            stdin=None if settings.interactive else subprocess.DEVNULL)
    os.close(write_fd)
    sampler = Sampler(ProcessTreeProbe(proc.pid, files=True), SystemProbe(), NullGpuProbe()).start()
    collector = Collector(SamplerMarks(sampler))
    interrupted: str | None = None
    stopper = Stopper(proc)
    stopped: Stop | None = None
    reader = LineReader(read_fd)
    while True:
        try:
            if not _read(reader, collector) or collector.outcome.code is not None \
                    or (proc.poll() is not None and not select.select([read_fd], [], [], 1.0)[0]):
                break  # its last word, or it died (a worker it left may hold the pipe open)
            if stopped is None and (stopped := _overdue(settings, clock() - started, collector.outcome,
                                                        peers)) is not None:
                stopper.start()
            stopper.poll()
        except KeyboardInterrupt as stop:  # the script got the same Ctrl-C: give it time to end as it would
            interrupted = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
            if isinstance(stop, Terminated):  # SIGTERM came to dataprof alone: the script gets it too
                proc.terminate()
            _end(proc)
    os.close(read_fd)
    code, stopped = _exit_code(proc, settings, stopper, stopped)
    if peers is not None:
        peers.ended(failed=bool(code) and interrupted is None and stopped is None)
    killed = _end_leftovers(before, collector.outcome.workers)
    prctl(PR_SET_CHILD_SUBREAPER, 0)
    sampler.stop()
    sampler.gpu_probe.close()
    report = collector.report((("-m",) if settings.module else ()) + (settings.target, *settings.args),
                              resources_of({**summarize(sampler.samples), **storage_of(sampler),
                                            "gpu_timeline": gpu_timeline(sampler.samples.gpu)}),
                              clock() - started, code if code >= 0 else 128 - code,  # killed by signal N: 128 + N
                              interrupted, stopped, killed)
    if settings.changes is None:
        return report
    return dataclasses.replace(report, changes=dataclasses.replace(
        settings.changes, overridden=collector.outcome.overridden))


def _env(settings: WatchSettings) -> dict[str, str]:
    """The script's environment: this one's, dataprof importable, ``settings.env`` set, and where the user ran
    from when the script runs elsewhere (its loaders' sites are named from there)."""
    home = {HOME_ENV: os.getcwd()} if os.path.realpath(settings.cwd) != os.path.realpath(os.getcwd()) else {}
    return {**child_env(), **settings.env, **home}


def _overdue(settings: WatchSettings, elapsed_s: float, outcome: Outcome,
             peers: RankFailures | None) -> Stop | None:
    """Why the script must be ended now: past its limit (with what hangs every loader with workers here, when it
    holds: a TMPDIR too long for their sockets), long after its window ended, or (tune's runs) another rank of its
    job failed; None while none holds."""
    if settings.limit_s is not None and elapsed_s > settings.limit_s:
        cause = socket_hang_cause(settings.env.get("TMPDIR"))
        if outcome.window_open is None and settings.startup_s is not None and not cause:
            return StopCause.STARTUP, (f"did not reach its training's first batch within its limit of "
                                       f"{settings.limit_s:.0f} s (a start-up allowance of {settings.startup_s:.0f} "
                                       "s; --startup-timeout sets the first run's)")
        return StopCause.LIMIT, f"did not end within its limit of {settings.limit_s:.0f} s" + (
            f" ({cause})" if cause else "")
    if settings.stop_own_ranks and outcome.own_ranks_at is not None and outcome.ended is None \
            and time.monotonic() - outcome.own_ranks_at > OWN_RANKS_GRACE_S:
        return StopCause.OWN_RANKS, "started ranks of its own"  # its own process iterates the loader; it waits
    window_end = outcome.window_end
    if settings.after_window_s is not None and window_end is not None \
            and time.monotonic() - window_end > settings.after_window_s:
        return StopCause.AFTER_WINDOW, f"did not end {settings.after_window_s:.0f} s after its window"
    failed = peers.reason() if peers is not None and settings.end_with_job else None
    return None if failed is None else (StopCause.PEER_FAILED, f"rank {failed} of the job failed")


def _exit_code(proc: subprocess.Popen[bytes], settings: WatchSettings, stopper: Stopper,
               stopped: Stop | None) -> tuple[int, Stop | None]:
    """The script's return code once it has ended, and why the watch stopped it (``stopped``, or that its process
    outlived its last word: a thread that never ends), its words ending with how; None when it ended before any
    signal (the signals waited for a file it was writing)."""
    if not stopper.started:
        if settings.after_window_s is None:
            return proc.wait(), stopped
        try:
            return proc.wait(timeout=settings.after_window_s), stopped
        except subprocess.TimeoutExpired:
            stopper.start()
            stopped = StopCause.NO_EXIT, f"did not exit {settings.after_window_s:.0f} s after its last batch"
    code = stopper.wait()
    if not stopper.signals:  # it ended by itself while the signals waited for what it was writing
        return code, None
    assert stopped is not None  # the signals start only once the watch has its reason
    return code, (stopped[0], f"{stopped[1]}: {stopper.said()}")


def _read(reader: LineReader, collector: Collector) -> bool:
    """Handle the events one read brings; False at the end of the pipe."""
    if not select.select([reader.fd], [], [], 0.5)[0]:
        return True
    messages = reader.read()
    if messages is None:
        return False
    for event in messages:
        collector.handle(event)
    return True


def _children() -> set[int]:
    """This process's children now."""
    import psutil

    return {p.pid for p in psutil.Process().children()}


def _end_leftovers(before: set[int], workers: set[int] = frozenset(),  # type: ignore[assignment]
                   grace_s: float = LEFTOVER_GRACE_S) -> tuple[str, ...]:
    """Processes the script left behind (its workers, orphaned to us; not children we had ``before``): given
    ``grace_s`` to end, then killed; those killed that were not its DataLoader ``workers``, named."""
    import psutil

    left = [p for p in psutil.Process().children() if p.pid not in before]
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    named = []
    for proc in alive:
        try:
            name = f"pid {proc.pid} ({' '.join(proc.cmdline()[:3]) or proc.name()})"
            proc.kill()
        except psutil.Error:
            continue
        if proc.pid not in workers:
            named.append(name)
    psutil.wait_procs(alive, timeout=grace_s)
    return tuple(named)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """After Ctrl-C: wait for the script to end, then kill it."""
    try:
        proc.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
