"""What every result document shares: its schema version and its JSON text."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from dataprof.results.codec import from_fields

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
    """A result document: its data (a dataclass with a ``tool_version``), its JSON document (:meth:`to_dict`, the
    contract) and that document as text."""

    tool_version: str
    to_dict: Callable[[], dict[str, Any]]
    """The JSON document: each kind's own keys (the contract), ``schema_version`` first."""

    def to_json(self) -> str:
        """The document as text (NaN and infinities written as null)."""
        return to_json(self.to_dict())

    @classmethod
    def from_dict(cls: type[_Doc], data: dict[str, Any]) -> _Doc:
        """Read :meth:`to_dict` back: the fields by their keys (the codec's), the version from the ``tool`` block;
        a kind whose document holds views of its own (a sweep's ``best``, a plan's ``recommended``) reads them
        itself."""
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
