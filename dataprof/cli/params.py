"""The command line's option text into typed values: one parser per kind of value, and the click ParamTypes
that apply them while click parses (the Python API takes the same text forms through the same parsers).

A value that cannot be read is a one-line UsageError naming the option; whether a value is allowed (a count
below its minimum, a knob of the other framework) is ``decide.settings.plan``'s to say, for both.
"""

from __future__ import annotations

from typing import Any

import click

from dataprof.backends.target import parse_kwarg
from dataprof.errors import UsageError
from dataprof.results.knobs import REGISTRY, Knob, LoaderConfig
from dataprof.results.request import MemoryLimit, current_config
from dataprof.results.vocabulary import WorkerKind


def parse_percent(text: str, name: str) -> float:
    """``10%`` or ``10`` (percent) → 0.10; UsageError otherwise."""
    raw = text.strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not a percentage (e.g. 10%)") from None
    if not 0 <= value < 100:
        raise UsageError(f"{name}: {text!r} must be between 0% and 100%")
    return value / 100.0


def parse_int_list(text: str, name: str) -> tuple[int, ...]:
    """Parse ``"0,2,4"`` (duplicates dropped); raise UsageError naming the option on bad input."""
    values: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        try:
            values.append(int(item))
        except ValueError:
            raise UsageError(
                f"{name}: {item!r} is not an integer (expected a comma-separated list like 2,4)"
            ) from None
    return tuple(dict.fromkeys(values))


_ON = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def parse_onoff_list(text: str, name: str) -> tuple[bool, ...]:
    """Parse ``"on,off"`` into booleans; raise UsageError on anything else."""
    values: list[bool] = []
    for item in (part.strip().lower() for part in text.split(",")):
        if item not in _ON:
            raise UsageError(f"{name}: {item!r} is not on or off (expected e.g. on,off)")
        values.append(_ON[item])
    return tuple(dict.fromkeys(values))


def parse_words(text: str) -> tuple[str, ...]:
    """``fork,spawn`` → ``("fork", "spawn")``: lower case, duplicates and empty items dropped."""
    return tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str, name: str = "--memory-limit") -> MemoryLimit:
    """Parse ``3GB``, ``512MiB``, ``1e9`` (bytes) or ``80%`` (of the available RAM)."""
    raw = text.strip().upper().replace(" ", "")
    try:
        if raw.endswith("%"):
            percent = float(raw[:-1])
            if not 0 < percent <= 100:
                raise ValueError
            return MemoryLimit(share=percent / 100)
        number = raw.rstrip("KMGTIB")
        value = float(number) * _UNITS[raw[len(number):]]
    except (ValueError, KeyError):
        raise UsageError(
            f"{name}: {text!r} is not a size (use bytes, 3GB, 512MiB or a percentage like 80%)"
        ) from None
    if value <= 0:
        raise UsageError(f"{name}: {text!r} must be positive")
    return MemoryLimit(bytes=int(value))


def parse_bytes(text: str, name: str) -> int:
    """A size in bytes (``32GB``, ``512MiB``, ``1e9``): a share of this machine's RAM means nothing for another."""
    limit = parse_size(text, name)
    if limit.bytes is None:
        raise UsageError(f"{name}: {text!r} is not a size in bytes (use 32GB, 512MiB or 1e9)")
    return limit.bytes


def parse_knobs(text: str, flag: str = "--current") -> dict[str, Any]:
    """``num_workers=8,prefetch_factor=2,persistent_workers=true``: loader knobs by their DataLoader names, each
    with one value, read as its knob record says (``ints``, ``on,off``, ``words``)."""
    values: dict[str, Any] = {}
    kinds = {"num_workers": "ints", **{knob.name: knob.values for knob in REGISTRY}}
    known = sorted(kinds)
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in known or not raw.strip():
            raise UsageError(f"{flag} {text!r}: expected KNOB=VALUE pairs, KNOB one of {', '.join(known)}")
        if kinds[key] == "words":
            values[key] = parse_words(raw)[0]
            if key == "worker_kind" and values[key] not in set(WorkerKind):
                raise UsageError(f"{flag} worker_kind={raw.strip()}: expected process or thread")
            continue
        values[key] = (parse_int_list if kinds[key] == "ints" else parse_onoff_list)(raw, f"{flag} {key}")[0]
    return values


def parse_current(text: str) -> LoaderConfig:
    """``--current "num_workers=8,prefetch_factor=2,persistent_workers=true"``: the user's settings, as the
    DataLoader takes them (a knob left out at the DataLoader's default)."""
    return current_config(parse_knobs(text))


class TextValue(click.ParamType):
    """An option whose text one of the parsers above reads (shown in ``--help`` as the text it takes)."""

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


def workers(text: str) -> tuple[int, ...] | None:
    """``--workers``: ``auto`` (None) or a list of counts."""
    return None if text.strip().lower() == "auto" else parse_int_list(text, "--workers")


KNOB_VALUES = {"ints": parse_int_list, "on,off": parse_onoff_list}
"""How each kind of knob's option text is read (``words``: :func:`parse_words`, which needs no option name)."""


def knob_type(knob: Knob) -> TextValue:
    """The ParamType of a knob's option: its values as its record says they are written."""
    parse = KNOB_VALUES.get(knob.values)
    return TextValue(parse_words) if parse is None else TextValue(parse, knob.flag)


WORKERS = TextValue(workers)
SIZE = TextValue(parse_size)
BYTES = {flag: TextValue(parse_bytes, flag) for flag in ("--ram", "--shm")}
CURRENT = TextValue(parse_current)
KNOB_VALUES_TEXT = TextValue(parse_knobs, "--override")
KEY_VALUE = TextValue(parse_kwarg)
"""The ParamTypes of the options; each turns its text into the typed value the request holds."""


def percent(flag: str) -> TextValue:
    """A ParamType for a percentage option (``10%``) given as ``flag``."""
    return TextValue(parse_percent, flag)
