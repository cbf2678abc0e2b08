"""The click ParamTypes of the command line's options: each applies one of ``results.text``'s parsers (which the
Python API uses too) while click parses, and shows in ``--help`` as the text it takes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import click

from dataprof.backends.target import parse_kwarg
from dataprof.results.registry import Knob
from dataprof.results.text import (
    parse_bytes,
    parse_current,
    parse_knob,
    parse_percent,
    parse_size,
    parse_workers,
)


class TextValue(click.ParamType):
    """An option whose text one of the parsers reads (shown in ``--help`` as the text it takes)."""

    name = "text"

    def __init__(self, parse: Any, flag: str | None = None) -> None:
        self.parse = parse
        self.flag = flag
        """The option's name in messages; parsers that know their option take none."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The typed value of the option's text (a typed value, as a default may be, is kept)."""
        if not isinstance(value, str):
            return value
        return self.parse(value) if self.flag is None else self.parse(value, self.flag)


def knob_type(knob: Knob) -> TextValue:
    """The ParamType of a knob's option: its values as its record says they are written."""
    return TextValue(lambda text: parse_knob(knob, text))


WORKERS = TextValue(parse_workers)
SIZE = TextValue(parse_size)
BYTES = {flag: TextValue(parse_bytes, flag) for flag in ("--ram", "--shm")}
CURRENT = TextValue(parse_current)
KEY_VALUE = TextValue(parse_kwarg)
"""The ParamTypes of the options; each turns its text into the typed value the request holds."""


def percent(flag: str) -> TextValue:
    """A ParamType for a percentage option (``10%``) given as ``flag``."""
    return TextValue(parse_percent, flag)


class OutputPath(click.Path):
    """A file the command writes (``--json``, ``--html``): refused while click parses, before anything is
    measured, where it could not be written (a file where a folder must be, a folder without write permission,
    a read-only file system), not after the measurements were made; folders it names that do not exist yet are
    made when it is written."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The path, once a file could be made in its nearest existing folder (one is made there and removed)."""
        path = Path(os.fsdecode(super().convert(value, param, ctx)))
        folder = path.absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            self.fail(f"{path}: {folder} is not a folder", param, ctx)
        try:
            with tempfile.NamedTemporaryFile(prefix=f".{path.name}.", dir=folder):
                pass
        except OSError as exc:
            self.fail(f"{path}: cannot write in {folder} ({exc.strerror or exc})", param, ctx)
        return path
