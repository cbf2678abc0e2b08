"""``dataprof tune`` across nodes (pure): a node whose ranks wait for data gets workers of its own tried, and the
answer may set them on that node alone."""

from __future__ import annotations

import dataclasses
from typing import Any

from dataprof.decide.tune import decide_tune, next_run
from dataprof.render.tune import answer_lines
from dataprof.results.tune import TunedLoader, TuneRank, TuneReport, TuneTrial
from dataprof.results.vocabulary import TrialStatus

LOADER = TunedLoader("train.py:41", "DataLoader", 8, {"num_workers": 2, "prefetch_factor": 2})
NODE_RATES = ({0: 40.0, 1: 55.0, 2: 80.0, 4: 85.0}, {0: 40.0, 1: 60.0, 2: 50.0, 4: 35.0})
"""Each node's own pace by its workers: node 1 has fewer CPUs, and more workers than one crowd its step."""


def job_run(config: dict[str, Any], role: str, node_knobs: dict[str, dict[str, Any]] | None = None) -> TuneTrial:
    """A run of a two-node job in lockstep: it goes at its slower node's pace, whose rank waits for data while the
    other waits in the all-reduce."""
    node_knobs = node_knobs or {}
    if role == "headspace":
        return TuneTrial({}, TrialStatus.OK, role, iterations_per_s=100.0, data_wait_fraction=0.0)
    paces = [NODE_RATES[node][int({**LOADER.settings, **config, **node_knobs.get(str(node), {})}["num_workers"])]
             for node in (0, 1)]
    slow = paces.index(min(paces))
    ranks = tuple(TuneRank(node, min(paces), 0.4 if node == slow else 0.02, None, node, f"gpu-{'ab'[node]}")
                  for node in (0, 1))
    return TuneTrial(config, TrialStatus.OK, role, iterations_per_s=min(paces), data_wait_fraction=0.4,
                     ranks=ranks, node_knobs=node_knobs)


def tuned(trials: tuple[TuneTrial, ...], nnodes: int = 2) -> TuneReport:
    return decide_tune(TuneReport("0", ("train.py",), LOADER, trials, 10.0, nnodes=nnodes))


def search(nnodes: int) -> TuneReport:
    trials: tuple[TuneTrial, ...] = ()
    while (step := next_run(tuned(trials, nnodes))) is not None and len(trials) < 40:
        trials = (*trials, job_run(*step))
    return tuned(trials, nnodes)


def test_the_node_whose_ranks_wait_for_data_gets_workers_of_its_own_when_the_job_gains() -> None:
    done = search(2)
    assert done.answer is not None and done.answer.recommended is not None
    chosen = done.trials[done.answer.recommended]
    assert (chosen.config, chosen.node_knobs) == ({"num_workers": 1}, {"0": {"num_workers": 2}})
    assert chosen.iterations_per_s == 60.0  # the best uniform config, w1, makes 55: node 0 paces it
    assert sum(1 for t in done.trials if t.config == chosen.config and t.node_knobs == chosen.node_knobs) >= 2
    assert not any(t.node_knobs for t in done.trials[:4])  # the climb for every node comes first
    lines = answer_lines(done)
    assert "num_workers=2 → 1 on node 1 (gpu-b)" in lines[0]
    assert "on node 0 (gpu-a): num_workers=1 → 2" in lines
    assert TuneReport.from_dict(done.to_dict()).trials == done.trials


def test_on_one_node_or_when_no_node_waits_for_data_no_node_gets_its_own() -> None:
    assert not any(t.node_knobs for t in search(1).trials)
    quiet = tuple(TuneTrial(t.config, t.status, t.role, iterations_per_s=t.iterations_per_s,
                            ranks=tuple(dataclasses.replace(r, data_wait_fraction=0.05) for r in t.ranks))
                  for t in (job_run({}, "current"), job_run({}, "headspace"), job_run({}, "current"),
                            job_run({"num_workers": 4}, "candidate"), job_run({"num_workers": 1}, "candidate"),
                            job_run({"num_workers": 1, "prefetch_factor": 4}, "candidate")))
    step = next_run(tuned(quiet))
    assert step is None or len(step) == 2


def test_a_config_of_its_own_for_a_node_must_be_faster_than_the_best_for_every_node_not_cheaper() -> None:
    def ran(config: dict[str, Any], rate: float, role: str = "candidate",
            node_knobs: dict[str, dict[str, Any]] | None = None) -> TuneTrial:
        return TuneTrial(config, TrialStatus.OK, role, iterations_per_s=rate, data_wait_fraction=0.3,
                         node_knobs=node_knobs or {})

    fewer = {"1": {"num_workers": 0}}  # node 1's workers halved: cheaper, and no faster
    trials = (ran({}, 50.0, "current"), TuneTrial({}, TrialStatus.OK, "headspace", iterations_per_s=100.0),
              ran({}, 50.0, "current"), ran({"num_workers": 1}, 55.0), ran({"num_workers": 1}, 55.0),
              ran({"num_workers": 1}, 55.5, node_knobs=fewer), ran({"num_workers": 1}, 55.0, node_knobs=fewer))
    done = tuned(trials)
    assert done.answer is not None and done.answer.recommended is not None
    assert done.trials[done.answer.recommended].node_knobs == {}
    faster = tuned((*trials[:5], ran({"num_workers": 1}, 70.0, node_knobs=fewer),
                    ran({"num_workers": 1}, 71.0, node_knobs=fewer)))
    assert faster.answer is not None and faster.answer.recommended is not None
    assert faster.trials[faster.answer.recommended].node_knobs == fewer
    assert "faster beyond the noise than the fastest config for every node" in faster.answer.reason
