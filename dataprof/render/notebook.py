"""Documents that display themselves in Jupyter: a sweep's Report and an Inspection with an HTML ``_repr_html_``
(the summary, no script), as the Python API returns them."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from dataprof.results.inspect import Inspection
from dataprof.results.sweep import Report

_Shown = TypeVar("_Shown", Report, Inspection)


class NotebookReport(Report):
    """A :class:`~dataprof.results.sweep.Report` that displays itself in Jupyter (the HTML summary, no script)."""

    def _repr_html_(self) -> str:
        from dataprof.render.html import summary_fragment

        return summary_fragment(self)


class NotebookInspection(Inspection):
    """An :class:`~dataprof.results.inspect.Inspection` that displays itself in Jupyter."""

    def _repr_html_(self) -> str:
        from dataprof.render.html import inspection_fragment

        return inspection_fragment(self)


def shown(result: _Shown, kind: type[_Shown]) -> _Shown:
    """``result`` as the notebook-displayed ``kind`` (the same fields)."""
    return kind(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})
