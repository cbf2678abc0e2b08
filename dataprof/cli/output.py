"""How the command line writes: files atomically, errors as one line with their exit code, the console."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from dataprof.errors import DataprofError, UsageError, terminated_as_interrupted
from dataprof.results.findings import GateResult


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so readers never see half a document; a file that cannot be written
    (the disk full, the folder gone) is a UsageError naming it."""
    try:
        _write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # as open() would create it, not mkstemp's owner-only mode
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def reading(*paths: Path) -> Iterator[None]:
    """The block works on saved documents, input like any other: what it raises that is no DataprofError (a
    document's figures that no run of dataprof writes, a zero where a time goes, a null where a rate goes) is a
    UsageError naming the files (the exception and its traceback with --debug), not a traceback."""
    try:
        yield
    except DataprofError:
        raise
    except Exception as exc:
        named = " or ".join(str(path) for path in paths)
        raise UsageError(f"{named}: a malformed dataprof document ({type(exc).__name__}: {exc})") from exc


def fail(exc: DataprofError, debug: bool) -> None:
    """One line on stderr (the traceback too with --debug), then exit with the error's code."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
        if exc.detail:
            click.echo(exc.detail, err=True)
    click.echo(f"error: {exc}", err=True)
    sys.exit(int(exc.exit_code))


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn DataprofError into one line on stderr and its exit code; SIGTERM into Ctrl-C (:class:`Terminated`)
    while the command runs."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug"))
        with terminated_as_interrupted():
            try:
                return fn(*args, **kwargs)
            except DataprofError as exc:
                fail(exc, debug)

    return wrapper


def console() -> Any:
    """The console the report is printed on (stdout)."""
    from rich.console import Console

    return Console()


def write_page(path: Path | None, document: Any) -> None:
    """Write the self-contained HTML page of ``document`` (``--html``), if one was asked for."""
    if path is not None:
        from dataprof.render.documents import HtmlRenderer

        write_atomic(path, HtmlRenderer().render(document))
        click.echo(f"wrote {path}", err=True)


def failed_gates(gates: Sequence[GateResult]) -> bool:
    """Say each gate that failed, in one line; whether any did."""
    failed = [gate for gate in gates if not gate.passed]
    for gate in failed:
        click.echo(f"gate failed: {gate.gate}: {gate.message}", err=True)
    return bool(failed)
