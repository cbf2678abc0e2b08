"""tune's search and answer against a known truth: each run of a config at its true rate, moved by the machine
(each run on its own by 0.8-1.25x, as a busy machine moves it, or by 3%), seeded; the answer is right (no slower
than yours beyond 5%, and near the best) or says it cannot tell."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from dataprof.decide.tune import decide_tune, next_run
from dataprof.results.knobs import KnobValues
from dataprof.results.trial import Percentiles
from dataprof.results.tune import TunedLoader, TuneReport, TuneTrial
from dataprof.results.vocabulary import TrialStatus, TuneVerdict

Curve = Callable[[int], float]
CURVES: dict[str, tuple[Curve, int]] = {
    "flat": (lambda w: 10.0, 4),  # every config alike: yours, or one as fast and cheaper
    "saturating": (lambda w: min(30.0, 8.0 + 6.0 * w), 1),  # more workers pay up to 4, then nothing
    "peaked": (lambda w: 20.0 - 1.5 * abs(w - 4), 2),  # 4 the best, more cost the step
    "close": (lambda w: {0: 9.7, 1: 9.8, 2: 10.0, 4: 10.3, 8: 10.2, 16: 9.9}.get(w, 9.0), 2),
}
CEILING = 40.0


def tuned(curve: Curve, workers: int, moved: Callable[[random.Random], float], seed: int, runs: int) -> TuneReport:
    """The answer after the search made ``runs`` runs at most, each the truth moved by ``moved``."""
    settings = KnobValues({"num_workers": workers, "prefetch_factor": 2, "persistent_workers": True})
    loader = TunedLoader("train.py:41", "DataLoader", 8, settings, threads="torch")
    rng = random.Random(seed)
    report = TuneReport("0", ("train.py",), loader, (), 0.0)
    for left in range(runs, 0, -1):
        step = next_run(report, left)
        if step is None:
            break
        config, role = step[0], step[1]
        rate = CEILING if role == "headspace" else curve((settings | config).workers)
        trial = TuneTrial(config, TrialStatus.OK, role, iterations_per_s=rate * moved(rng), data_wait_fraction=0.3,
                          step_ms=Percentiles(5.0, 6.0))
        report = decide_tune(dataclasses.replace(report, trials=(*report.trials, trial)))
    return report


def truth(report: TuneReport, curve: Curve, index: int) -> float:
    assert report.loader is not None
    return curve((report.loader.settings | report.trials[index].config).workers)


def test_on_a_busy_machine_the_answer_is_never_slower_than_yours_it_says_it_cannot_tell() -> None:
    busy = lambda rng: rng.uniform(0.8, 1.25)  # noqa: E731
    verdicts = []
    for name, (curve, workers) in CURVES.items():
        for seed in range(8):
            report = tuned(curve, workers, busy, seed, 20)
            answer = report.answer
            assert answer is not None
            verdicts.append(answer.verdict)
            if answer.recommended is not None:
                assert truth(report, curve, answer.recommended) >= 0.95 * curve(workers), (name, seed, answer.reason)
    assert TuneVerdict.CANNOT_TELL in verdicts and TuneVerdict.CHANGE in verdicts


def test_on_a_quiet_machine_the_answer_is_near_the_best_and_a_clear_gain_is_told() -> None:
    quiet = lambda rng: rng.uniform(0.97, 1.03)  # noqa: E731
    for name, (curve, workers) in CURVES.items():
        for seed in range(4):
            report = tuned(curve, workers, quiet, seed, 20)
            answer = report.answer
            assert answer is not None and answer.recommended is not None, (name, seed, answer and answer.reason)
            best = max(truth(report, curve, i) for i, t in enumerate(report.trials) if t.role != "headspace")
            assert truth(report, curve, answer.recommended) >= 0.9 * best, (name, seed, answer.reason)
            if name == "saturating":
                assert answer.verdict == TuneVerdict.CHANGE and (answer.gain_over_current or 0) > 0.8
