"""The host process: a cold process that forks the probe and every trial.

Started by the runner as ``python -m dataprof.measure.sweep.host CMD_FD EVT_FD``
(or forked, for objects handed over by the Python API). Commands arrive on
CMD_FD and events leave on EVT_FD, as ``measure.protocol`` frames them.

A trial must be as cold as a training process: no partly iterated dataset, no
heap or allocator warmed by checks, no batch collated before its DataLoader.
So the host itself never runs the user's code to check it: ``load`` forks a
probe that builds the dataset, collates its first batch, reports and exits.
Then each trial, forked from the still-cold host, builds the dataset itself
(``build`` per trial, the default: exactly what a training script does), or,
after a ``share`` command (for a dataset costly to build), the host builds it
once, never iterates it, and forks each trial from there.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
from collections.abc import Mapping
from typing import Any

from dataprof.backends.construction import record_constructions
from dataprof.measure.forked import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    exit_as_a_script,
    kill_group,
    killed_by,
    prctl,
    reap_orphans,
    remove_left_behind,
)
from dataprof.measure.protocol import AutotuneRequest, Channel, LineReader, LoadRequest, Message
from dataprof.measure.sweep.building import Built, build, build_in_trial, error_from, run_probe
from dataprof.measure.sweep.commands import (
    COMMANDS,
    Command,
    EpochCheck,
    Forked,
    Load,
    RunTrial,
    Share,
    Stop,
    ThreadCheckRequest,
)
from dataprof.measure.sweep.events import (
    Found,
    Shared,
    TrialExit,
    TrialStarted,
    WindowEnd,
    Workers,
    heard,
    said,
)
from dataprof.measure.sweep.failures import report_escape

_running_trial: int | None = None
"""Process group of the trial in flight, killed if the host is told to stop."""
_trial_files: list[str] = []
"""The temporary files of the trial in flight (its open-log directory, its end mark): the parent removes them
once the trial ends; the host does when it is told to stop first (the parent killed, it gets SIGTERM)."""


def _stop(signum: int, frame: Any) -> None:
    if _running_trial is not None:
        kill_group(_running_trial)
    for path in _trial_files:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
    os._exit(128 + signum)


def single_threaded(framework: str) -> None:
    """Keep a host that holds the dataset single-threaded; each trial forked from it restores the default.

    A thread pool (OpenMP) started here would be unusable in a forked trial,
    which hangs at its first parallel op.
    """
    from dataprof.backends import get_backend

    get_backend(framework).set_threads(1)


def run_trial_process(shared: Built | None, load: LoadRequest, request: Forked, events: Channel,
                      info: Message, objects: Mapping[str, Any]) -> None:
    """Fork the trial, relay its events, reap it and its whole process group.

    ``shared``: the dataset and collate function the host built once, or None:
    the trial then builds them itself from ``load`` (and emits ``built`` with
    the seconds it took) as a training process would. ``info``: what the probe
    found; with a shared dataset its ``intra_op_threads`` are restored in the
    trial (the host runs single-threaded). A ``trial`` request measures one
    config; an ``autotune`` request runs Paddle's own dataloader autotune; an
    ``epoch_check`` request runs a config's DataLoader over eight epochs of a tiny stream; a ``thread_check``
    request compares a thread loader's batches with the same indices fetched one by one.
    """
    import dataprof.measure.sweep.autotune
    import dataprof.measure.sweep.trial  # noqa: F401  (dataprof's own code is imported once, here, not by each trial)

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.close(events.fd)
        _trial_child(shared, load, request, Channel(write_fd), info, objects)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child already did it, or already exited
    global _running_trial
    _running_trial = pid
    opens_dir = _opens_dir(request)
    _trial_files[:] = [opens_dir] if opens_dir else []
    os.close(write_fd)
    events.send(said(TrialStarted(pid)))
    workers = _relay(LineReader(read_fd), pid, events)
    os.close(read_fd)
    kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _running_trial = None
    _trial_files.clear()
    reaped = reap_orphans()
    remove_left_behind(info["framework"], {pid, *workers})
    signame = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else None
    events.send(said(TrialExit(os.waitstatus_to_exitcode(status), signame, tuple(killed_by(reaped, workers)))))


def _opens_dir(request: Forked) -> str | None:
    """Where a trial's processes log the files they open (a side run logs none)."""
    return request.settings.opens_dir if isinstance(request, RunTrial) else None


def _trial_child(shared: Built | None, load: LoadRequest, request: Forked, channel: Channel, info: Message,
                 objects: Mapping[str, Any]) -> None:
    """The forked trial: its own process group, then the request's work. Never returns."""
    from dataprof.backends import get_backend
    from dataprof.measure.cache.open_log import OpenLog
    from dataprof.measure.sweep.autotune import run_autotune
    from dataprof.measure.sweep.epoch_check import run_epoch_check
    from dataprof.measure.sweep.thread_check import run_thread_check
    from dataprof.measure.sweep.trial import run_trial

    code = 0
    opens: OpenLog | None = None
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        backend = get_backend(info["framework"])
        if isinstance(request, EpochCheck):
            run_epoch_check(backend, request.config, channel.send)
            os._exit(0)
        if shared is not None:
            backend.set_threads(info["intra_op_threads"])
        opens_dir = _opens_dir(request)
        if opens_dir:
            opens = OpenLog(opens_dir)
            opens.install()
        built = shared or build_in_trial(load, channel, objects)
        if isinstance(request, ThreadCheckRequest):
            run_thread_check(backend, built.dataset, built.collate, request.config, request.batch_size, channel.send)
        elif isinstance(request, AutotuneRequest):
            run_autotune(built.dataset, built.collate, request, channel.send)
        else:
            run_trial(backend, built.dataset, built.collate, request.config, request.settings, channel.send,
                      template=built.template)
    except BaseException as exc:  # raised outside run_trial's own handling, e.g. by a signal handler
        code = 1
        report_escape(channel, exc)
    finally:
        if opens is not None:
            with contextlib.suppress(OSError):
                opens.flush()  # the trial's own last opens (a worker's last ones go with it)
        if shared is None:
            exit_as_a_script(code)
        os._exit(code)


def _relay(reader: LineReader, pid: int, events: Channel) -> set[int]:
    """Pass the trial's events on until it exits, then whatever it wrote before exiting; the pids of the worker
    processes it told of (``workers``, kept here)."""
    workers: set[int] = set()

    def relay(messages: list[Message]) -> None:
        for message in messages:
            event = heard(message)
            if isinstance(event, Workers):
                workers.update(event.pids)
                continue
            if isinstance(event, WindowEnd) and event.release:
                _trial_files.append(event.release)
            events.send(message)

    while True:
        if select.select([reader.fd], [], [], 0.2)[0]:
            messages = reader.read()
            relay(messages or [])
            if messages is not None:
                continue
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
    while select.select([reader.fd], [], [], 0)[0]:
        messages = reader.read()
        if messages is None:
            break
        relay(messages)
    return workers


class _Server:
    """The host's state between commands: what to build, the shared dataset if any, what the probe found."""

    def __init__(self, events: Channel, objects: Mapping[str, Any]) -> None:
        self.events = events
        self.objects = objects
        self.load: LoadRequest | None = None
        self.shared: Built | None = None
        self.info: Message = {}

    def handle(self, request: Command) -> int | None:
        """Answer one command; an exit code when the host must stop."""
        if isinstance(request, Stop):
            return 0
        if isinstance(request, Load):
            return self._load(request.request)
        assert self.load is not None, "the first command is load"
        if isinstance(request, Share):
            try:
                self.shared = build(self.load, self.objects)
            except BaseException as exc:
                self.events.send(error_from(exc))
                return 3
            single_threaded(self.info["framework"])
            self.events.send(said(Shared(self.shared.build_s)))
        else:
            run_trial_process(self.shared, self.load, request, self.events, self.info, self.objects)
        return None

    def _load(self, load: LoadRequest) -> int | None:
        self.load = load
        if load.target in self.objects:
            self.shared = build(load, self.objects)  # the caller's object: there is nothing to build again
        if load.expected_framework is not None:
            try:
                _warm_imports(load.expected_framework)
            except Exception:
                pass  # the probe imports it again and reports what fails
        event = run_probe(load, self.shared, self.events, self.objects)
        found = heard(event)
        if not isinstance(found, Found):
            self.events.send(event)
            return 3
        self.info = found.fields
        if load.expected_framework is None:
            _warm_imports(self.info["framework"])
        if self.shared is not None:
            single_threaded(self.info["framework"])
        self.events.send(event)
        return None


def serve(cmd_fd: int, evt_fd: int, objects: Mapping[str, Any]) -> int:
    """Answer commands until ``exit`` or until the parent goes away.

    A host that built no dataset ran none of the user's code, so it has no exit handler of theirs to run: it
    ends at once, without the interpreter's teardown (most of a second once torch is imported).
    """
    server = _Server(Channel(evt_fd), objects)
    code = _answer(server, LineReader(cmd_fd))
    if server.shared is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _answer(server: _Server, reader: LineReader) -> int:
    """Handle the commands as they come; the exit code, once one says to stop."""
    while (requests := reader.read()) is not None:
        for request in requests:
            code = server.handle(COMMANDS.heard(request))
            if code is not None:
                return code
    return 0  # parent closed the pipe: nothing left to do


def _warm_imports(framework: str) -> None:
    """Import the framework's DataLoader before forking, as a training script has by its first batch.

    Only modules are imported: no thread pool starts, and no user code runs in the host. Done before the probe
    when the framework is expected (the probe and the trials inherit it: one import, not two), else after it.
    """
    from dataprof.backends import get_backend

    get_backend(framework).loader_arguments()


def main(argv: list[str], objects: Mapping[str, Any] | None = None) -> int:
    """Serve on the command and event pipes ``argv`` names (then, with ``--cpus``, the CPUs to run on, pinned
    before anything else runs: every thread and process the host starts inherits them); ``objects``: a forked
    host's handed-over objects."""
    if len(argv) > 2:
        os.sched_setaffinity(0, [int(cpu) for cpu in argv[2].split(",")])
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    record_constructions()  # a DataLoader target is rebuilt from the call that made it
    return serve(int(argv[0]), int(argv[1]), objects or {})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
