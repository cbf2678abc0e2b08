"""What every result document shares: its schema version and its JSON text."""

from __future__ import annotations

import json
import math
from typing import Any

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


class Shown(str):
    """A value read back as the text it was written as (its ``repr``): its ``repr`` is that text again."""

    def __repr__(self) -> str:
        return str(self)


def kept(whole: dict[str, Any], keys: tuple[str, ...] | None) -> dict[str, Any]:
    """A document's block as written back: ``whole``, or only the ``keys`` the document it was read from held, in
    their order (an older document gains no key by being read and written again)."""
    return whole if keys is None else {key: whole[key] for key in keys if key in whole}
