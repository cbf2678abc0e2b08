"""What a process's death by a signal usually means (pure): a trial's error says which process died by which
signal (a fact, as measured); the reader is told what that signal usually means and what to change."""

from __future__ import annotations

import re

MEANINGS = {
    "SIGBUS": "a bus error in a worker usually means /dev/shm is too small for the batches in flight "
              "(in Docker: --shm-size); fewer workers or a lower prefetch_factor need less",
    "SIGKILL": "SIGKILL usually comes from the kernel's OOM killer: fewer workers, or less memory per worker",
    "SIGSEGV": "a segmentation fault in native code (a C extension, OpenCV/OpenMP after fork)",
}
"""What each signal a loader's process dies by usually means, by its name."""

_DIED = re.compile(r"died by (SIG[A-Z0-9]+)\b")


def explained(error: str | None) -> str | None:
    """``error`` with what its signal usually means after it, where it says a process died by one of
    :data:`MEANINGS`' signals; as it is otherwise."""
    found = _DIED.search(error or "")
    meaning = MEANINGS.get(found.group(1)) if found else None
    return error if meaning is None or error is None or meaning in error else f"{error}: {meaning}"
