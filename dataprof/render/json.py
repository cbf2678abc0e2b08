"""The ``--json`` document (docs/json.md)."""

from __future__ import annotations

import json
import math
from typing import Any

from dataprof.inspection import Inspection
from dataprof.model import Report


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render(report: Report | Inspection) -> str:
    """The sweep document or the ``dataprof inspect`` document."""
    return json.dumps(_finite(report.to_dict()), indent=2) + "\n"
