"""Option text into typed values: one parser per kind of value, shared by the command line (its click ParamTypes,
``cli.params``) and the Python API, which takes the same text forms. Standard library only.

A value that cannot be read is a one-line UsageError naming the option; whether a value is allowed (a count
below its minimum, a knob of the other framework) is ``decide.settings.plan``'s to say, for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataprof.errors import UsageError
from dataprof.results.knobs import KnobValues, LoaderConfig
from dataprof.results.plan import NodeGroup
from dataprof.results.registry import REGISTRY, Knob, knob_names
from dataprof.results.request import MemoryLimit, current_config


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


def parse_words(text: str, name: str = "") -> tuple[str, ...]:
    """``fork,spawn`` → ``("fork", "spawn")``: lower case, duplicates and empty items dropped (``name``, the
    option's, is for the signature the other list parsers share)."""
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


def parse_workers(text: str) -> tuple[int, ...] | None:
    """``--workers``: ``auto`` (None) or a list of counts."""
    return None if text.strip().lower() == "auto" else parse_int_list(text, "--workers")


KIND_PARSERS: dict[str, Callable[[str, str], tuple[Any, ...]]] = {
    "ints": parse_int_list, "on,off": parse_onoff_list, "words": parse_words}
"""How a knob's text is read, by its record's value kind (:attr:`~dataprof.results.registry.Knob.values`)."""


def parse_knob(knob: Knob, text: str, flag: str | None = None) -> tuple[Any, ...]:
    """The values ``text`` gives ``knob`` (``on,off``, ``2,4``, ``fork,spawn``), as its record says they are
    written; a word outside the record's choices is a UsageError naming ``flag`` (the knob's option if None)."""
    name = flag or knob.flag
    values = KIND_PARSERS[knob.values](text, name)
    wrong = [value for value in values if knob.choices and value not in knob.choices]
    if wrong:
        raise UsageError(f"{name}: {wrong[0]!r} is not one of {', '.join(knob.choices)}")
    return values


def parse_knobs(text: str, flag: str = "--current") -> KnobValues:
    """``num_workers=8,prefetch_factor=2,persistent_workers=true``: loader knobs by their DataLoader names, each
    with one value, read as its knob record says (``ints``, ``on,off``, ``words``)."""
    knobs = {knob.name: knob for knob in REGISTRY}
    known = sorted(knob_names())
    values: dict[str, Any] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in known or not raw.strip():
            raise UsageError(f"{flag} {text!r}: expected KNOB=VALUE pairs, KNOB one of {', '.join(known)}")
        name = f"{flag} {key}"
        parsed = parse_int_list(raw, name) if key == "num_workers" else parse_knob(knobs[key], raw, name)
        values[key] = parsed[0]
    return KnobValues(values)


def parse_current(text: str) -> LoaderConfig:
    """``--current "num_workers=8,prefetch_factor=2,persistent_workers=true"``: the user's settings, as the
    DataLoader takes them (a knob left out at the DataLoader's default)."""
    return current_config(parse_knobs(text))


NODE_KEYS = {"cpus": "cpus", "ranks": "ranks_per_node", "ram": "ram_bytes", "shm": "shm_bytes"}
"""``--node``'s keys, and the :class:`~dataprof.results.plan.NodeGroup` fields they set."""


def parse_node_group(text: str) -> NodeGroup:
    """``--node NODES:KEY=VALUE,…``: the nodes (``0,2-3``) and what they have (``cpus=32,ranks=8,ram=256GB,
    shm=64GB``)."""
    flag = f"--node {text}"
    nodes_text, colon, described = text.partition(":")
    if not colon or not described.strip():
        raise UsageError(f"{flag}: expected NODES:KEY=VALUE,… (0,2-3:cpus=32,ranks=8)")
    nodes: list[int] = []
    for part in nodes_text.split(","):
        first, dash, last = part.strip().partition("-")
        if not (first.isdigit() and (not dash or last.isdigit())):
            raise UsageError(f"{flag}: {part.strip()!r} is not a node or a range of nodes (0, 2-3)")
        nodes.extend(range(int(first), int(last if dash else first) + 1))
    values: dict[str, Any] = {}
    for item in described.split(","):
        key, equals, value = (word.strip() for word in item.partition("="))
        if not equals or key not in NODE_KEYS:
            raise UsageError(f"{flag}: {item.strip()!r}: give {', '.join(f'{k}=' for k in NODE_KEYS)}")
        try:
            values[NODE_KEYS[key]] = float(value) if key == "cpus" else int(value) if key == "ranks" else \
                parse_bytes(value, f"--node {key}")
        except ValueError:
            raise UsageError(f"{flag}: {key}={value!r} is not a number") from None
    return NodeGroup(tuple(sorted(set(nodes))), **values)
