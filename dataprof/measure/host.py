"""The host process: a cold process that forks the probe and every trial.

Started by the runner as ``python -m dataprof.measure.host CMD_FD EVT_FD``.
Commands arrive as JSON lines on CMD_FD; events leave as JSON lines on EVT_FD,
so whatever the user's code prints cannot corrupt the protocol.

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

import ctypes
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

from dataprof.errors import DataprofError


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent still kills the trial's process group


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_running_trial: int | None = None
"""Process group of the trial in flight, killed if the host is told to stop."""


def _stop(signum: int, frame: Any) -> None:
    if _running_trial is not None:
        _kill_group(_running_trial)
    os._exit(128 + signum)


class Channel:
    """JSON lines over a pipe file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, event: dict[str, Any]) -> None:
        data = (json.dumps(event, default=str) + "\n").encode()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


def _read_lines(fd: int, buffer: bytearray) -> list[bytes] | None:
    """Complete lines available on ``fd`` (None at EOF)."""
    chunk = os.read(fd, 65536)
    if not chunk:
        return None
    buffer.extend(chunk)
    *lines, rest = bytes(buffer).split(b"\n")
    buffer[:] = rest
    return lines


def build(request: dict[str, Any]) -> tuple[Any, Any, float]:
    """Import and construct the target's dataset and collate function; the seconds construction took."""
    from dataprof.measure.runner import IN_MEMORY
    from dataprof.target import build_dataset, load_collate, load_object, parse_kwarg

    start = time.perf_counter()
    cwd = request["cwd"]
    if request["target"] in IN_MEMORY:  # a forked host: the caller's object, as it was at the fork
        dataset = IN_MEMORY[request["target"]]
    else:
        kwargs = dict(parse_kwarg(item) for item in request["args"])
        dataset = build_dataset(load_object(request["target"], cwd), kwargs, request["target"])
    build_s = time.perf_counter() - start
    collate_name = request.get("collate_fn")
    collate = IN_MEMORY[collate_name] if collate_name in IN_MEMORY else load_collate(collate_name, cwd)
    return dataset, collate, build_s


def probe(request: dict[str, Any], dataset: Any, collate: Any, build_s: float) -> dict[str, Any]:
    """Check that the dataset batches and describe it (in a forked probe, never in the host itself)."""
    import multiprocessing

    from dataprof.backends import detect_framework, get_backend
    from dataprof.backends.common import check_batchable, dataset_length
    from dataprof.measure.runner import IN_MEMORY

    backend = get_backend(detect_framework(dataset, request["framework"]))
    # the caller of the Python API may have started a thread pool, which is dead after fork
    threads = 1 if request["target"] in IN_MEMORY else backend.get_threads()
    kind = backend.dataset_kind(dataset)
    batch = check_batchable(dataset, kind, collate or backend.default_collate(), int(request["batch_size"]))
    return {
        "kind": kind,
        "type_name": type(dataset).__name__,
        "length": dataset_length(dataset),
        "has_getitems": hasattr(type(dataset), "__getitems__"),
        "init_s": build_s,
        **batch,
        "start_method": multiprocessing.get_start_method(),
        "sharing_strategy": backend.sharing_strategy(),
        "framework": backend.name,
        "framework_version": backend.version(),
        "loader_arguments": list(backend.loader_arguments()),
        "intra_op_threads": threads,
    }


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, DataprofError) else f"{type(exc).__name__}: {exc}"


def _error_event(exc: BaseException) -> dict[str, Any]:
    return {"ev": "host_error", "message": _describe(exc), "traceback": traceback.format_exc()}


def run_probe(request: dict[str, Any], shared: tuple[Any, Any, float] | None, events: Channel) -> dict[str, Any]:
    """Fork the probe (it builds the dataset unless ``shared`` holds it) and return its last event.

    ``built`` (the dataset is built; its first batch comes next) is passed on to ``events`` at once.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            channel = Channel(write_fd)
            try:
                dataset, collate, build_s = shared or build(request)
                channel.send({"ev": "built", "build_s": build_s})
                event = {"ev": "host_ready", **probe(request, dataset, collate, build_s)}
            except BaseException as exc:
                event, code = _error_event(exc), 3
            channel.send(event)
            if shared is None:
                exit_as_a_script(code)
        finally:
            os._exit(code)
    os.close(write_fd)
    buffer = bytearray()
    last: dict[str, Any] | None = None
    while (chunk := _read_lines(read_fd, buffer)) is not None:
        for event in (json.loads(line) for line in chunk if line.strip()):
            if event["ev"] == "built":
                events.send(event)
            else:
                last = event
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    _reap_orphans()
    if last is not None:
        return last
    return {"ev": "host_error", "traceback": "",
            "message": f"the process building the dataset died ({_status_text(status)})"}


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


EXIT_HANDLERS_S = 5.0
"""Longest a child's exit handlers may take before it is ended anyway."""


def exit_as_a_script(code: int) -> None:
    """End a child that built its own dataset as a script ends: run threading's and atexit's exit handlers.

    Libraries free what they own there (MosaicML Streaming unlinks its shared
    memory, others remove locks and temporary files); skipped, they would leave
    it to the next trial. Never returns; handlers still running after
    :data:`EXIT_HANDLERS_S` are cut off. A child forked with the host's dataset
    does not run them: they would free what the host still holds.
    """
    import atexit
    import threading

    watchdog = threading.Timer(EXIT_HANDLERS_S, os._exit, (code,))
    watchdog.daemon = True
    watchdog.start()
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:
        pass  # a failing handler must not change how the child ends
    os._exit(code)


def single_threaded(framework: str) -> None:
    """Keep a host that holds the dataset single-threaded; each trial forked from it restores the default.

    A thread pool (OpenMP) started here would be unusable in a forked trial,
    which hangs at its first parallel op.
    """
    from dataprof.backends import get_backend

    get_backend(framework).set_threads(1)


def _report_escape(channel: Channel, exc: BaseException) -> None:
    """Tell the parent what ended the trial when it escaped run_trial (e.g. torch's SIGCHLD handler)."""
    from dataprof.measure.child import classify_loader_error

    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        status, message = classify_loader_error(exc) if isinstance(exc, Exception) else \
            ("failed", type(exc).__name__)
        channel.send({"ev": "error", "status": status, "message": message,
                      "traceback": "".join(traceback.format_exception(exc))})
    except BaseException:
        pass  # the parent still sees the exit code


def run_trial_process(shared: tuple[Any, Any, float] | None, load_request: dict[str, Any],
                      request: dict[str, Any], events: Channel, info: dict[str, Any]) -> None:
    """Fork the trial, relay its events, reap it and its whole process group.

    ``shared``: the dataset and collate function the host built once, or None:
    the trial then builds them itself from ``load_request`` (and emits ``built``
    with the seconds it took) as a training process would. ``info``: what the
    probe found; with a shared dataset its ``intra_op_threads`` are restored in
    the trial (the host runs single-threaded). A ``trial`` request measures one
    config; an ``autotune`` request runs Paddle's own dataloader autotune; an
    ``epoch_check`` request runs a config's DataLoader over four epochs of a tiny stream.
    """
    from dataprof.config import LoaderConfig
    from dataprof.measure.autotune import run_autotune
    from dataprof.measure.child import run_epoch_check, run_trial

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial
        code = 0
        trial_channel: Channel | None = None
        try:
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            os.close(read_fd)
            os.close(events.fd)
            trial_channel = Channel(write_fd)
            from dataprof.backends import get_backend

            backend = get_backend(info["framework"])
            if request["cmd"] == "epoch_check":
                run_epoch_check(backend, LoaderConfig.from_dict(request["config"]), trial_channel.send)
                os._exit(0)
            if shared is not None:
                backend.set_threads(info["intra_op_threads"])
                dataset, collate, _ = shared
            else:
                dataset, collate = _build_in_trial(load_request, trial_channel)
            if request["cmd"] == "autotune":
                run_autotune(dataset, collate, request, trial_channel.send)
            else:
                run_trial(backend, dataset, collate, LoaderConfig.from_dict(request["config"]),
                          request["settings"], trial_channel.send)
        except BaseException as exc:  # raised outside run_trial's own handling, e.g. by a signal handler
            code = 1
            if trial_channel is not None:
                _report_escape(trial_channel, exc)
        finally:
            if shared is None:
                exit_as_a_script(code)
            os._exit(code)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child already did it, or already exited
    global _running_trial
    _running_trial = pid
    os.close(write_fd)
    events.send({"ev": "trial_started", "pid": pid})
    buffer = bytearray()
    while True:
        ready, _, _ = select.select([read_fd], [], [], 0.2)
        if ready:
            lines = _read_lines(read_fd, buffer)
            for line in lines or []:
                if line.strip():
                    events.send(json.loads(line))
            if lines is not None:
                continue
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
    while select.select([read_fd], [], [], 0)[0]:
        lines = _read_lines(read_fd, buffer)
        if lines is None:
            break
        for line in lines:
            if line.strip():
                events.send(json.loads(line))
    os.close(read_fd)
    _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _running_trial = None
    _reap_orphans()
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    events.send({"ev": "trial_exit", "returncode": os.waitstatus_to_exitcode(status),
                 "signal": None if sig is None else signal.Signals(sig).name})


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_orphans() -> None:
    """As child subreaper, orphaned workers land here: collect them."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _build_in_trial(load_request: dict[str, Any], channel: Channel) -> tuple[Any, Any]:
    """Build the dataset in the trial itself; an error that the probe did not meet ends the trial as failed."""
    try:
        dataset, collate, build_s = build(load_request)
    except BaseException as exc:
        channel.send({"ev": "error", "status": "failed", "message": f"building the dataset: {_describe(exc)}",
                      "traceback": traceback.format_exc()})
        os._exit(1)
    channel.send({"ev": "built", "build_s": build_s})
    return dataset, collate


def serve(cmd_fd: int, evt_fd: int) -> int:
    """Answer commands until ``exit`` or until the parent goes away."""
    from dataprof.measure.runner import IN_MEMORY

    events = Channel(evt_fd)
    buffer = bytearray()
    load_request: dict[str, Any] = {}
    shared: tuple[Any, Any, float] | None = None
    info: dict[str, Any] = {}
    while True:
        lines = _read_lines(cmd_fd, buffer)
        if lines is None:
            return 0  # parent closed the pipe: nothing left to do
        for line in lines:
            request = json.loads(line)
            if request["cmd"] == "exit":
                return 0
            if request["cmd"] == "load":
                load_request = request
                if request["target"] in IN_MEMORY:
                    shared = build(request)  # the caller's object: there is nothing to build again
                event = run_probe(request, shared, events)
                if event["ev"] == "host_error":
                    events.send(event)
                    return 3
                info = event
                _warm_imports(info["framework"])
                if shared is not None:
                    single_threaded(info["framework"])
                events.send(event)
            elif request["cmd"] == "share":
                try:
                    shared = build(load_request)
                except BaseException as exc:
                    events.send(_error_event(exc))
                    return 3
                single_threaded(info["framework"])
                events.send({"ev": "shared", "build_s": shared[2]})
            elif request["cmd"] in ("trial", "autotune", "epoch_check"):
                run_trial_process(shared, load_request, request, events, info)


def _warm_imports(framework: str) -> None:
    """Import the framework's DataLoader before forking, as a training script has by its first batch.

    Only modules are imported: no thread pool starts, and no user code runs in the host.
    """
    from dataprof.backends import get_backend

    get_backend(framework).loader_arguments()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    return serve(int(argv[0]), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
