"""One codec for every record a document or a message holds: a dataclass is written as its fields by name, in their
order, and read back by keyword construction, each value by its field's type. Stdlib only.

Where a record's JSON is not its fields one by one, its fields say so in their metadata (:data:`FLAT`,
:data:`HIDDEN`, :data:`AS_TEXT`, :func:`named`, :func:`objects`, :func:`written_if`, and :func:`view` for a
field whose JSON is a view of the record, as a document's contract has a few), a class lists the properties written
after its fields in ``JSON_DERIVED`` (read back: ignored), and ``JSON_KEYS``, where a class has it, is its JSON's
keys in their order (its fields' and its derived properties', as the contract orders them). A class with a JSON
form of its own (``to_dict`` / ``from_dict``: a loader config by its framework's names, a document's header) is
written and read with it.

Reading is lenient, as a document of an older dataprof needs: keys it does not know are left out, a key it lacks (or
holds null for a field that is not optional) takes the field's default, or None where the field may be None; any
other field the data lacks is a KeyError (one it holds null, a ValueError), and a number's field holding anything
but a number (``"fast"`` for a rate) a :class:`Mismatch`. :func:`decode` with ``strict=True`` (messages between
dataprof's own processes, and what comes over the network) refuses an unknown or missing key too, and a number, text
or flag of another kind.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

_FLAT, _HIDDEN, _NAME, _TEXT, _OBJECTS, _IF = "flat", "hidden", "name", "text", "objects", "if"
_WRITE, _READ = "write", "read"

FLAT = {_FLAT: True}
"""Field metadata: a nested record whose fields the JSON holds in its parent's place, by their own names."""
HIDDEN = {_HIDDEN: True}
"""Field metadata: a field the JSON does not hold (read back: its default, unless the data has it by its name)."""
AS_TEXT = {_TEXT: True}
"""Field metadata: a mapping whose values the JSON holds as their ``repr`` (read back as that text:
:class:`Shown`)."""


def named(key: str, **more: Any) -> dict[str, Any]:
    """Field metadata: a field the JSON holds under ``key`` (with ``more`` metadata)."""
    return {_NAME: key, **more}


def written_if(holds: Callable[[Any], bool]) -> dict[str, Any]:
    """Field metadata: a field the JSON holds only where ``holds(record)`` (a Paddle setting in a Paddle sweep)."""
    return {_IF: holds}


def view(write: Callable[[Any], Any] | None = None, read: Callable[[Mapping[str, Any]], Any] | None = None,
         **more: Any) -> dict[str, Any]:
    """Field metadata: a field whose JSON is ``write(record)`` (a view the contract holds: a config by its
    framework's names beside its figures; with :data:`FLAT`, a mapping of the keys it writes) and which is read
    back as ``read(data)``, from its record's whole JSON (with a fallback for a document written before the field
    was saved). Either left out: the field's own way."""
    return {**({_WRITE: write} if write else {}), **({_READ: read} if read else {}), **more}


def objects(*keys: str) -> dict[str, Any]:
    """Field metadata: a tuple of tuples the JSON holds as objects with these ``keys``."""
    return {_OBJECTS: keys}


class Shown(str):
    """A value read back as the text it was written as (its ``repr``): its ``repr`` is that text again."""

    def __repr__(self) -> str:
        return str(self)


class Mismatch(ValueError):
    """Strict reading: the data's keys are not the record's (a key unknown or missing)."""


def encode(value: Any) -> Any:
    """``value`` as JSON values: records by their fields, tuples as lists, mapping keys as text, words as their
    value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_dict", None)
        return own() if own is not None else fields_json(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    return value


def fields_json(record: Any) -> dict[str, Any]:
    """``record``'s fields (and derived properties) as JSON, by its metadata (a class's own ``to_dict`` writes the
    rest of its JSON with it)."""
    data: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        meta, value = field.metadata, getattr(record, field.name)
        if meta.get(_HIDDEN) or not meta.get(_IF, _always)(record):
            continue
        if _WRITE in meta and meta.get(_FLAT):
            data.update(meta[_WRITE](record))
        elif _WRITE in meta:
            data[meta.get(_NAME, field.name)] = meta[_WRITE](record)
        elif meta.get(_FLAT):
            data.update(encode(value))
        elif meta.get(_TEXT):
            data[meta.get(_NAME, field.name)] = {k: repr(v) for k, v in value.items()}
        elif meta.get(_OBJECTS) and value is not None:
            keys = meta[_OBJECTS]
            data[meta.get(_NAME, field.name)] = [dict(zip(keys, map(encode, row), strict=True)) for row in value]
        else:
            data[meta.get(_NAME, field.name)] = encode(value)
    data.update({name: encode(getattr(record, name)) for name in getattr(record, "JSON_DERIVED", ())})
    order = getattr(record, "JSON_KEYS", None)
    if order is None:
        return data
    if set(data) - set(order):
        raise ValueError(f"{type(record).__name__}: keys {sorted(set(data) - set(order))} are not in its JSON_KEYS")
    return {key: data[key] for key in order if key in data}


def decode(cls: type[T], data: Mapping[str, Any], *, strict: bool = False) -> T:
    """The record of class ``cls`` that :func:`encode` wrote as ``data``."""
    own = getattr(cls, "from_dict", None)
    return own(data) if own is not None else from_fields(cls, data, strict=strict)  # type: ignore[no-any-return]


def from_fields(cls: type[T], data: Mapping[str, Any], *, strict: bool = False) -> T:
    """The record of class ``cls`` built from ``data`` by its fields (a class's own ``from_dict`` builds the rest
    of its record with it)."""
    if strict:
        _check(cls, data)
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = field.metadata
        if _READ in meta:
            values[field.name] = meta[_READ](data)
            continue
        if meta.get(_FLAT):
            values[field.name] = decode(hints[field.name], data, strict=False)
            continue
        key = meta.get(_NAME, field.name)
        optional = _optional(hints[field.name])
        if key not in data or (data[key] is None and not optional):
            if not _has_default(field):
                if not optional:
                    raise KeyError(key) if key not in data else ValueError(f"{key!r} is null, where a value is needed")
                values[field.name] = None  # an optional figure a document lacks: not known
            continue
        raw = data[key]
        if meta.get(_TEXT):
            values[field.name] = {k: Shown(v) for k, v in (raw or {}).items()}
        elif meta.get(_OBJECTS) and raw is not None:
            values[field.name] = tuple(tuple(row[k] for k in meta[_OBJECTS]) for row in raw)
        else:
            try:
                values[field.name] = value_of(hints[field.name], raw)
            except ValueError as exc:
                if isinstance(raw, (dict, list)):
                    raise
                raise ValueError(f"{cls.__name__}: unknown {key} {raw!r}") from exc
            if strict:
                if not _fits(hints[field.name], raw):
                    raise Mismatch(f"{cls.__name__}: {key} {raw!r} is not a {hints[field.name]}")
            elif not _a_number(hints[field.name], values[field.name]):
                raise Mismatch(f"{cls.__name__}: {key} {raw!r} where a number goes")
    return cls(**values)


def optional(cls: type[T], data: Mapping[str, Any] | None) -> T | None:
    """:func:`decode`, None kept."""
    return None if data is None else decode(cls, data)


def records(cls: type[T], items: Any) -> tuple[T, ...]:
    """Each of ``items`` (a JSON list, or None) decoded."""
    return tuple(decode(cls, item) for item in items or ())


def value_of(kind: Any, raw: Any) -> Any:
    """``raw`` (a JSON value) as a value of the type ``kind``."""
    if raw is None or kind is Any or (isinstance(kind, type) and isinstance(raw, kind)):
        return raw
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return value_of(next(a for a in args if a is not type(None)), raw)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(value_of(args[0], v) for v in raw)
        return tuple(value_of(a, v) for a, v in zip(args, raw, strict=True))
    if origin in (dict, Mapping):
        key, item = args or (str, Any)
        return {value_of(key, k): value_of(item, v) for k, v in raw.items()}
    if isinstance(kind, type):
        if dataclasses.is_dataclass(kind) or hasattr(kind, "from_dict"):
            return decode(kind, raw)
        if issubclass(kind, enum.Enum):
            return kind(raw)
        if kind is int and isinstance(raw, str):
            return int(raw)
        reader = getattr(kind, "read", None)
        if kind not in (int, float, str, bool) and callable(reader):
            return reader(raw)
    return raw


def _a_number(kind: Any, value: Any) -> bool:
    """Lenient reading: whether a number's field holds a number (an int or a float alike), or None where it may."""
    kinds = [a for a in typing.get_args(kind) if a is not type(None)] \
        if typing.get_origin(kind) in (typing.Union, types.UnionType) else [kind]
    if value is None or not kinds or any(k not in (int, float) for k in kinds):
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fits(kind: Any, value: Any) -> bool:
    """Strict reading: whether a number, a text or a flag is of its field's kind (an int where a float goes; never
    a bool where a number goes). Records, containers and words have been read by their kind already."""
    if value is None:
        return _optional(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in typing.get_args(kind) if a is not type(None))
    if kind in (int, float):
        return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    return isinstance(value, kind) if kind in (str, bool) else True


def _always(record: Any) -> bool:
    return True


def _check(cls: type, data: Mapping[str, Any]) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    unknown = sorted(set(data) - {f.name for f in fields})
    missing = sorted(f.name for f in fields if f.name not in data and not _has_default(f))
    if unknown or missing:
        raise Mismatch(f"{cls.__name__}: unknown keys {unknown}, missing keys {missing}")


def _has_default(field: dataclasses.Field[Any]) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


def _optional(kind: Any) -> bool:
    return kind is Any or type(None) in typing.get_args(kind)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]
