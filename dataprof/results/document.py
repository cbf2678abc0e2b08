"""What every result document shares: its schema version and its JSON text."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, TypeVar

from dataprof.results.codec import HIDDEN, decode, encode, fields_json, from_fields, view

SCHEMA_VERSION = 1


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(document: dict[str, Any]) -> str:
    """A result document (a sweep's or an inspect run's) as indented JSON text, one trailing newline."""
    return json.dumps(_finite(document), indent=2) + "\n"


_Doc = TypeVar("_Doc", bound="Document")


class Document:
    """A result document: its data (a dataclass with a ``tool_version``, which its JSON holds in its ``tool``
    block), its JSON document (:meth:`to_dict`, the contract) and that document as text."""

    tool_version: str
    KIND: ClassVar[str | None] = None
    """The document's ``kind`` (:class:`~dataprof.results.vocabulary.Kind`); None: a sweep's, whose document has
    no ``kind`` key (it was the first kind)."""
    HEADER: ClassVar[tuple[str, ...]] = ("tool", "kind")
    """The header's keys after ``schema_version``, in the order its kind's first document wrote them."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (the contract): ``schema_version``, the header, then its fields by the codec."""
        head = {"tool": tool(self.tool_version), "kind": self.KIND}
        return {"schema_version": SCHEMA_VERSION, **{key: head[key] for key in self.HEADER}, **fields_json(self)}

    def to_json(self) -> str:
        """The document as text (NaN and infinities written as null)."""
        return to_json(self.to_dict())

    @classmethod
    def from_dict(cls: type[_Doc], data: dict[str, Any]) -> _Doc:
        """Read :meth:`to_dict` back: the fields by the codec (views by their own readers), the version from the
        ``tool`` block."""
        return from_fields(cls, {**data, "tool_version": version_of(data)})


def tool(version: str) -> dict[str, str]:
    """A document's ``tool`` block."""
    return {"name": "dataprof", "version": version}


def version_of(data: dict[str, Any]) -> str:
    """The version of dataprof that wrote a document (``?``: not said)."""
    return str(data.get("tool", {}).get("version", "?"))


def kept(whole: dict[str, Any], keys: tuple[str, ...] | None) -> dict[str, Any]:
    """A document's block as written back: ``whole``, or only the ``keys`` the document it was read from held, in
    their order (an older document gains no key by being read and written again)."""
    return whole if keys is None else {key: whole[key] for key in keys if key in whole}


def settings_view(cls: type) -> dict[str, Any]:
    """Field metadata for a document's ``settings``: written as the document read held them (an older document
    gains no key by being read and written again), read back with the document's ``target``."""
    return view(lambda doc: kept(encode(doc.settings), doc.settings_keys),
                lambda data: decode(cls, {**(data.get("settings") or {}), "target": data["target"]}))


SETTINGS_KEYS = {**HIDDEN, **view(read=lambda data: tuple(data.get("settings") or {}))}
"""Field metadata for a document's ``settings_keys``: the keys of the ``settings`` it was read from."""
