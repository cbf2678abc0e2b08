"""The probe: what it measures of the target before the first trial, and what it leaves out."""

from __future__ import annotations

import pytest

from dataprof.measure.protocol import LoadRequest
from dataprof.measure.sweep import building
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from tests.conftest import FIXTURES


@pytest.mark.parametrize(("kinds", "measured"), [((), True), (("process", "thread"), True), (("thread",), True),
                                                 (("process",), False)])
def test_the_gil_is_measured_only_when_threads_may_be_swept(monkeypatch: pytest.MonkeyPatch,
                                                             kinds: tuple[str, ...], measured: bool) -> None:
    pytest.importorskip("torchdata.nodes")
    samples: list[object] = []
    monkeypatch.setattr(building, "sample_gil", lambda dataset: samples.append(dataset) or {"release": 0.5})
    settings = SweepSettings(target=f"{FIXTURES / 'datasets.py'}:Tiny",
                             space=SearchSpace(workers=(0, 2), worker_kinds=kinds), batch_size=8)
    request = LoadRequest.of(settings)
    assert request.gil is measured
    found = building.probe(request, building.build(request, {}), False)
    assert found["gil"] == ({"release": 0.5} if measured else None) and len(samples) == int(measured)
