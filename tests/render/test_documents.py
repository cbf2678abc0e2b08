"""One renderer interface: every renderer turns every kind of document into text, and each recorded document
in tests/data (and two of a kind compared) goes through every renderer."""

from __future__ import annotations

import html
import typing
from pathlib import Path

import pytest

from dataprof.decide.compare import compare_documents
from dataprof.render.documents import PAGES, PRINTERS, RENDERERS, Rendered
from dataprof.results.inspect import Inspection
from dataprof.results.load import load_document
from dataprof.results.plan import Plan
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.tune import TuneReport
from tests.conftest import DATA

RECORDED = sorted(DATA.glob("*/*.json"))
PAIRS = [("sweep/io_bound", "sweep/cpu_bound"), ("run/train_w0", "run/train_w2")]


def test_every_renderer_maps_every_kind_of_document() -> None:
    kinds = set(typing.get_args(Rendered))
    assert set(PRINTERS) == kinds and set(PAGES) == kinds


def documents() -> list[typing.Any]:
    """Every recorded document, then each pair compared; a sweep's page needs plotly's charts (slow)."""
    params = []
    for path in RECORDED:
        for name in RENDERERS:
            marks = [pytest.mark.slow] if name == "html" and path.parent.name == "sweep" else []
            params.append(pytest.param(name, path, id=f"{name}-{path.parent.name}/{path.stem}", marks=marks))
    for old, new in PAIRS:
        for name in RENDERERS:
            params.append(pytest.param(name, (DATA / f"{old}.json", DATA / f"{new}.json"), id=f"{name}-{old}--{new}"))
    return params


def load(source: Path | tuple[Path, Path]) -> Rendered:
    if isinstance(source, tuple):
        old, new = (load_document(path) for path in source)
        assert isinstance(old, (Report, RunReport)) and isinstance(new, (Report, RunReport))
        return compare_documents(old, new, 0.1)
    return load_document(source)


def headline(document: Rendered) -> str:
    """What the report of ``document`` must name: its target, its script, or its new rate."""
    if isinstance(document, (Report, Inspection, Plan)):
        return document.target
    if isinstance(document, (RunReport, TuneReport)):
        return " ".join(document.command)
    return f"{document.new_rate:,.1f}"


@pytest.mark.parametrize(("renderer", "source"), documents())
def test_every_renderer_renders_every_recorded_document(renderer: str, source: Path | tuple[Path, Path]) -> None:
    document = load(source)
    text = RENDERERS[renderer]().render(document)
    escape = html.escape if renderer == "html" else str
    assert escape(headline(document)) in text
    findings = [document.verdict] if isinstance(document, RunReport) and document.verdict else \
        list(getattr(document, "findings", getattr(document, "checks", ())))
    for finding in findings:
        assert f"[{finding.id}" in text or escape(finding.evidence)[:40] in text.replace("\n", " ")
    if renderer == "html":
        assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")


def test_each_chart_curve_holds_configs_that_differ_only_in_their_worker_count() -> None:
    import dataclasses

    from dataprof.render.html import _series
    from dataprof.results.knobs import LoaderConfig
    from dataprof.results.trial import TrialResult
    from dataprof.results.vocabulary import WorkerKind
    from tests.conftest import decided

    def ok(config: LoaderConfig) -> TrialResult:
        return TrialResult.of(config, "ok", samples_per_s=100.0 * (config.num_workers + 1))

    configs = [LoaderConfig(4, False, 2, False), LoaderConfig(4, False, 2, False, worker_kind=WorkerKind.THREAD),
               LoaderConfig(2, False, 2, False), LoaderConfig(4, False, 2, False, in_order=False),
               LoaderConfig(4, False, 2, True), LoaderConfig(0)]
    report = dataclasses.replace(decided("memory_bound"), trials=tuple(ok(c) for c in configs))
    curves = {name: [t.config.label() for t in trials] for name, trials in _series(report).items()}
    assert curves == {"processes pf2 respawn": ["w2 pf2 respawn", "w4 pf2 respawn"], "threads pf2": ["t4 pf2"],
                      "processes pf2 respawn unordered": ["w4 pf2 respawn unordered"],
                      "processes pf2 persist": ["w4 pf2 persist"], "num_workers=0": ["w0"]}


def test_a_dataloader_target_s_own_loader_is_read_back_and_worded() -> None:
    from dataprof.render.view import loader_text
    from dataprof.results.codec import decode, encode
    from dataprof.results.environment import UserLoader
    from dataprof.results.knobs import LoaderConfig

    written = {"class": "train.TaggedLoader", "batch_size": 8, "batch_sampler": None, "sampler": "EvenSampler",
               "shuffle": False, "drop_last": True, "collate_fn": "item_collate", "worker_init_fn": None,
               "extra_arguments": ["tag"], "current": LoaderConfig(2, False, 2, True).to_dict(),
               "rebuilt_from": "its constructor call", "origin": "train.py:41"}
    loader = decode(UserLoader, written)
    assert encode(loader) == written and loader.current == LoaderConfig(2, False, 2, True)
    assert loader_text(loader) == ("your TaggedLoader from train.py:41 (batch_size 8, sampler EvenSampler, "
                                   "collate_fn item_collate, drop_last, its own tag): rebuilt from its constructor "
                                   "call for each trial, only the swept knobs changed")
