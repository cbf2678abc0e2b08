"""Read any saved document back: a sweep's result, a watched run, an inspection or a plan, known by its ``kind``.

Never evaluates the file. Whatever is wrong with it is a one-line :class:`~dataprof.errors.UsageError` naming
the file: not JSON, not dataprof's, a kind the command does not read, a schema this dataprof does not read, or
malformed.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

from dataprof.errors import UsageError
from dataprof.results.document import SCHEMA_VERSION
from dataprof.results.inspect import Inspection
from dataprof.results.plan import Plan
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport
from dataprof.results.vocabulary import Kind

Document = Report | RunReport | Inspection | Plan | TuneReport
"""A document dataprof saves and reads back."""

TYPES: dict[Kind, type[Report] | type[RunReport] | type[Inspection] | type[Plan] | type[TuneReport]] = {
    Kind.SWEEP: Report, Kind.RUN: RunReport, Kind.INSPECT: Inspection, Kind.PLAN: Plan, Kind.TUNE: TuneReport}
"""The document of each kind (each reads itself from its JSON: ``from_dict``)."""

NOUNS = {Kind.SWEEP: "result", Kind.RUN: "run document", Kind.INSPECT: "inspect document", Kind.PLAN: "plan",
         Kind.TUNE: "tune document"}
"""What a malformed document of each kind is called."""


def kind_of(document: Document) -> Kind:
    """The kind of a document in hand."""
    return next(kind for kind, cls in TYPES.items() if isinstance(document, cls))


def load_document(path: Path, kinds: Collection[Kind] = tuple(Kind)) -> Document:
    """The document saved at ``path``, if it is of one of ``kinds``; UsageError otherwise."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read a JSON result ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tool"), dict) \
            or data["tool"].get("name") != "dataprof":
        raise UsageError(f"{path}: not a dataprof result (no tool.name = dataprof)")
    kind = _kind(path, data.get("kind") or Kind.SWEEP.value)
    if kind not in kinds:
        wanted = "sweep" if Kind.SWEEP in kinds else " or ".join(f"`dataprof {k}`" for k in kinds)
        raise UsageError(f"{path}: a `dataprof {kind}` result, not a {wanted} result")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {data.get('schema_version')!r} is not supported "
                         f"(this dataprof reads {SCHEMA_VERSION})")
    try:
        return TYPES[kind].from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: malformed dataprof {NOUNS[kind]} ({type(exc).__name__}: {exc})") from exc


_D = TypeVar("_D", Report, RunReport, Inspection, Plan)


def load_as(path: Path, document_type: type[_D]) -> _D:
    """The document saved at ``path``, if it is a ``document_type`` (``Report``: a sweep's); UsageError
    otherwise."""
    kind = next(kind for kind, cls in TYPES.items() if cls is document_type)
    document = load_document(path, (kind,))
    assert isinstance(document, document_type)
    return document


def _kind(path: Path, value: Any) -> Kind:
    try:
        return Kind(value)
    except ValueError:
        raise UsageError(f"{path}: a dataprof document of kind {value!r}, which this dataprof does not read") from None
