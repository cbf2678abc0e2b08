"""Work done in a process forked for it, its result handed back as JSON: where the user's code may crash or hang,
a crash costs only that work's result, and a hang is ended with everything it started. Also how dataprof's
processes end with their parent (:func:`prctl`), and how dataprof's own objects stay out of the collector of a
process whose DataLoader workers fork (:func:`freeze_own_objects`)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from dataprof.backends import threads_after_fork
from dataprof.backends.target import describe_exception


def prctl(option: int, value: int) -> None:
    """Linux ``prctl(option, value)``; nothing elsewhere (the parent still kills process groups)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the parent still kills the trial's process group


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def freeze_own_objects() -> None:
    """Take the objects in this process so far (dataprof's own, imported before the user's code runs here) out of
    the cyclic garbage collector's books, and leave its counters as a fresh interpreter's.

    Each DataLoader worker forked later inherits the collector's state. Where dataprof's objects sat in the
    generations, the script's workers ran full collections over the whole (torch-sized) heap that its workers run
    alone did not: 48 of 0.33 s each over 12 epochs of PyTorch's ImageNet example, whose workers start every epoch,
    and the watched training ran at 0.69 of its pace (``benchmarks/run_overhead.py --pipeline jpeg``)."""
    gc.collect()
    gc.freeze()
    gc.collect()  # on empty generations: no objects pending promotion, none counted as long-lived


class ForkFailed(Exception):
    """The forked work raised, died or ran out of time: the message says which, in one line."""


def run_forked(work: Callable[[], Any], timeout_s: float | None = None,
               clock: Callable[[], float] = time.monotonic) -> Any:
    """``work()`` in a process forked now (its own process group, one CPU math thread as in a DataLoader worker:
    :func:`~dataprof.backends.threads_after_fork`), its JSON-able result returned here. Raises
    :class:`ForkFailed` when it raised (its description), died (by which signal), or ran past ``timeout_s``
    (killed, with every process it started)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                threads_after_fork()
                word: dict[str, Any] = {"result": work()}
            except Exception as exc:
                word = {"error": describe_exception(exc)}
            os.write(write_fd, json.dumps(word).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or has exited
    try:
        chunks = _read_until(read_fd, None if timeout_s is None else clock() + timeout_s, clock)
    finally:
        os.close(read_fd)
        status = _end(pid)
    if chunks is None:
        raise ForkFailed(f"it did not finish in {timeout_s:g} s (ended)")
    if not chunks:
        raise ForkFailed(f"it died ({_died(status)})")
    got = json.loads(b"".join(chunks))
    if "error" in got:
        raise ForkFailed(got["error"])
    return got["result"]


def _read_until(fd: int, deadline: float | None, clock: Callable[[], float]) -> list[bytes] | None:
    """What the child wrote until it closed its end; None when ``deadline`` came first."""
    chunks: list[bytes] = []
    while True:
        wait = None if deadline is None else deadline - clock()
        if wait is not None and wait <= 0:
            return None
        if not select.select([fd], [], [], wait)[0]:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return chunks
        chunks.append(chunk)


def _end(pid: int) -> int:
    """Kill the child's process group (whatever is left of it) and reap the child; its wait status."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _, status = os.waitpid(pid, 0)
    return status


def _died(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap_orphans() -> dict[int, int]:
    """As child subreaper, orphaned workers land here: collect them; their wait statuses, by pid."""
    reaped: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped[pid] = status


def killed_by(statuses: dict[int, int], pids: set[int]) -> list[str]:
    """The signals that ended the processes ``pids`` among the wait ``statuses``, but SIGKILL (dataprof's own
    end of a trial's process group)."""
    return [signal.Signals(os.WTERMSIG(status)).name for pid, status in sorted(statuses.items())
            if pid in pids and os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL]


def remove_left_behind(framework: str, pids: set[int]) -> None:
    """Remove what a trial's processes ``pids``, all ended now, left in shared memory (the backend knows its
    files)."""
    from dataprof.backends import get_backend

    for path in get_backend(framework).left_behind(pids):
        with contextlib.suppress(OSError):
            os.unlink(path)


def status_text(status: int) -> str:
    """How a child process ended, from its wait status: ``killed by SIGKILL`` or ``exit code 1``."""
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
