"""``dataprof tune``'s search (pure): the next run of the training to try.

The search measures the script as it is (``current``), then with its first batches replayed (``headspace``: data for
free, the training's ceiling), the loader-only sweep's pick when there is one, the script as it is again (so the
noise of its runs is known before anything is judged against it), then climbs ``num_workers`` around the config
leading so far while the runs show a doubling faster, and down while fewer are as fast (to none, when the runs show
the workers slowing the step), tries each of ``refine.refinements()`` once on top of the config leading then (where
none with workers leads, those that change what workers cost, on the fastest config with workers, whose workers are
then doubled while its runs are not shown slower), across nodes climbs the workers of the node whose ranks wait most
for data on that node alone, and runs again the configs that one run cannot settle: the leading one until it has two
runs interleaved with the script's own, and the contenders of a close call."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from dataprof.decide.search.common import first_of
from dataprof.decide.tune.answer import unsettled
from dataprof.decide.tune.cost import node_workers
from dataprof.decide.tune.memory import over_memory
from dataprof.decide.tune.noise import (
    MIN_RUNS,
    Key,
    Runs,
    band,
    faster,
    key,
    key_of,
    pooled_noise,
    rate,
    rates,
    unconfirmed_ahead,
)
from dataprof.decide.tune.refine import as_changed, cost_climb, refinement
from dataprof.decide.workers import CLIMB_TOP
from dataprof.results.knobs import KnobValues
from dataprof.results.tune import TuneReport, TuneTrial

CONFIRM_RUNS = 3
"""Runs each contender of a close call gets (the leading config, the fastest, the runner-up within the noise
of the fastest), while the budget lasts."""
SETTLE_RUNS = 6
"""Runs each of the fastest config and the script's own get at most while the runs cannot tell them apart."""
SECOND_LOOK = 2.0
"""A config run once whose run fell short of the fastest by more than the noise but by no more than this many
times it is run once more: one run can land that far off, and never looked at again it could hide the best
config."""


Step = tuple[KnobValues, str] | tuple[KnobValues, str, dict[str, KnobValues]]
"""A run to make: the knobs to set on the training's loader, the run's role and, across nodes, the knobs of each
node that has its own (by the node's index, on top of the first)."""


def next_run(report: TuneReport, runs_left: int | None = None) -> Step | None:
    """The next run of the training to try, or None when the search is done. ``runs_left``: how many more runs
    the budget holds, as the runs so far took (None: no end in sight); the runs the answer needs to be confirmed
    come first once no more fit beside them. The steps are asked in turn (:func:`first_of`, as the sweep's climb
    asks its own), each with the runs so far, the configs run and the runs left."""
    roles = [t.role for t in report.trials]
    if "current" not in roles:
        return KnobValues(), "current"
    if "headspace" not in roles:
        return KnobValues(), "headspace"
    if not report.by_role("current") or report.loader is None or report.answer is None:
        return None
    seen = {key_of(t) for t in report.trials if t.role != "headspace"}
    steps: tuple[Callable[[TuneReport, set[Key], int | None], Step | None], ...] = (
        _sweep_pick, _last_runs, _yours_again, _headspace_again, _candidate, node_climb, _confirmation)
    return first_of(steps, report, seen, runs_left)


def _sweep_pick(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """The loader-only sweep's pick, once."""
    picked = report.loader_sweep.config if report.loader_sweep is not None else None
    return (picked, "sweep") if picked and key(picked) not in seen else None


def _last_runs(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """The runs the leading config needs to be recommended, once the budget holds no more than those."""
    return confirm_run(report) if runs_left is not None and runs_left <= _needed(report) else None


def _yours_again(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """The script as it is: a second time, then after every :data:`YOURS_EVERY` runs of others."""
    again = [t.role for t in report.trials].count("current") < 2 or _since_yours(report) >= YOURS_EVERY
    return (KnobValues(), "current") if again else None


def _headspace_again(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """The headspace a second time: the data cost's band (its ceiling run twice, interleaved)."""
    few = [t.role for t in report.trials].count("headspace") < HEADSPACE_RUNS
    return (KnobValues(), "headspace") if few else None


def _candidate(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """The worker climb around the leading config, then its refinements, then where no workers lead the climb
    along what workers cost (not around a config of its own for some nodes); none once the budget holds no second
    run (:func:`_unconfirmable`)."""
    assert report.answer is not None and report.answer.leading is not None
    if report.trials[report.answer.leading].node_knobs or _unconfirmable(report, runs_left):
        return None
    step = _climb(report, seen) or refinement(report, seen) or cost_climb(report, seen)
    return None if step is None else (step, "candidate")


def _unconfirmable(report: TuneReport, runs_left: int | None) -> bool:
    """Whether a config first run now could not run again within the budget beside the runs the leading config
    still needs (:func:`_needed`) and the second runs of those run once that beat the fastest
    (:func:`unconfirmed_ahead`): run once, it is never recommended, and one that beat the fastest keeps every
    config from being recommended until it runs again, so those runs go to the answer's confirmation instead."""
    assert report.answer is not None and report.answer.leading is not None
    if runs_left is None:
        return False
    ahead = unconfirmed_ahead(report.trials, key_of(report.trials[report.answer.leading]))
    return runs_left < _needed(report) + ahead + MIN_RUNS


HEADSPACE_RUNS = 2
"""Runs of the headspace: its ceiling's noise gives the data cost its band."""


def _needed(report: TuneReport) -> int:
    """Runs the leading config still needs before it can be recommended (each after a run of the script's
    own)."""
    assert report.answer is not None and report.answer.leading is not None
    lead = report.trials[report.answer.leading]
    if lead.role == "current":
        return 0
    runs = rates(report.trials).get(key_of(lead), [])
    return 2 * max(0, MIN_RUNS - len(runs))


YOURS_EVERY = 4
"""The script's own config runs again after this many runs of others: how fast the machine is at each moment comes
from those runs (the answer puts every run on their pace), and it drifts."""


def _since_yours(report: TuneReport) -> int:
    """Runs of other configs (failed ones too) since the script's own last run."""
    count = 0
    for trial in reversed(report.trials):
        if trial.role == "current":
            break
        count += trial.role != "headspace"
    return count


def confirm_run(report: TuneReport) -> Step | None:
    """The run the leading config still needs before it can be recommended (a run of the script's own first,
    so that the two interleave), whatever the budget; None when it has its runs, or cannot get them."""
    if report.answer is None or report.answer.leading is None:
        return None
    by_config = rates(report.trials)
    leading = by_config[key_of(report.trials[report.answer.leading])]
    mine = report.by_role("current")
    if not mine or len(leading) >= MIN_RUNS or key_of(leading[0][1]) == key_of(mine[0]):
        return None
    tries = [key_of(t) for t in report.trials if t.role != "headspace"]
    if tries.count(key_of(leading[0][1])) >= CONFIRM_RUNS:
        return None
    last_mine = max(i for i, t in enumerate(report.trials) if t.role == "current")
    return (KnobValues(), "current") if last_mine < leading[-1][0] else _again(leading[0][1])


def _confirmation(report: TuneReport, seen: set[Key], runs_left: int | None) -> Step | None:
    """More runs where one may change the answer: a second look at each config run once that fell short of the
    fastest beyond the noise but within :data:`SECOND_LOOK` times it; the leading config's second run; then a
    close call: the leading config, the fastest, and the fastest other one when it is within the noise of the
    fastest are the contenders, one more run of the contender with the fewest runs (then the one run longer ago),
    up to :data:`CONFIRM_RUNS` each. None when nothing is left to look at."""
    assert report.answer is not None and report.answer.leading is not None
    by_config = rates(report.trials)
    leading = by_config[key_of(report.trials[report.answer.leading])]
    ranked = sorted(by_config.values(), key=rate, reverse=True)
    fastest = ranked[0]
    tries = [key_of(t) for t in report.trials if t.role != "headspace"]  # failed runs count too
    noise = report.answer.noise

    def gap(runs: Runs) -> float:
        """How far short of the fastest, in noise bands."""
        return (rate(fastest) - rate(runs)) / rate(fastest) / band(noise, runs, fastest)

    look = next((runs for runs in ranked if len(runs) == 1 and tries.count(key_of(runs[0][1])) == 1
                 and 1 < gap(runs) <= SECOND_LOOK), None)
    if look is not None:
        return _again(look[0][1])
    confirm = confirm_run(report)
    if confirm is not None:
        return confirm
    contenders = [leading, fastest]
    runner_up = next((runs for runs in ranked if runs is not fastest), None)
    if runner_up is not None and gap(runner_up) <= 1:
        contenders.append(runner_up)
    most = CONFIRM_RUNS
    settle = unsettled(report)
    if settle:  # the fastest against what it is not shown as fast as: more runs of both
        contenders, most = settle, SETTLE_RUNS
    if len({id(runs) for runs in contenders}) < 2:
        return None
    again = min((runs for runs in contenders if tries.count(key_of(runs[0][1])) < most),
                key=lambda runs: (len(runs), runs[-1][0]), default=None)  # the fewer runs, then the older
    return None if again is None else _again(again[0][1])


def _again(trial: TuneTrial) -> Step:
    """The config of ``trial`` to run once more, in its role."""
    if trial.node_knobs:
        return trial.config, trial.role, dict(trial.node_knobs)
    return trial.config, "current" if not trial.config else trial.role


def slowed(report: TuneReport, runs: Sequence[tuple[int, TuneTrial]]) -> bool:
    """Whether the runs of a config show its workers slowing the step: their step p50 above the step with data
    for free by more than the noise."""
    assert report.answer is not None
    found = [report.answer.step_slowdown[i] for i, _ in runs if i in report.answer.step_slowdown]
    return bool(found) and statistics.median(found) > report.answer.noise


def _climb(report: TuneReport, seen: set[Key]) -> KnobValues | None:
    """Twice the leading config's workers (two, from none: one worker only overlaps the step, so from none it may
    seem to pay nothing where two would) until a doubling's runs do not show it faster (:func:`faster`, the
    answer's rule; a doubling not shown faster, no more than a band slower, that still waits for data gets four
    times the workers first: one run can land a band low), then half
    as many (as fast and cheaper?; one, from none), from one to none when its runs show the worker slowing the
    step; None when both are run.
    A refinement that leads is climbed around in turn (persistent workers, say, change what more workers cost)."""
    assert report.answer is not None and report.answer.leading is not None and report.loader is not None
    settings = report.loader.settings
    base = report.trials[report.answer.leading].config
    workers = (settings | base).workers
    by_config = rates(report.trials)
    more = as_changed(base | {"num_workers": max(2, 2 * workers)}, settings)
    if 2 * workers <= CLIMB_TOP and key(more) not in seen and over_memory(report, max(2, 2 * workers)) is None:
        return more
    paid = key(more) in by_config and faster(pooled_noise(report.trials), by_config[key(more)], by_config[key(base)])
    further = as_changed(base | {"num_workers": max(4, 4 * workers)}, settings)
    if not paid and _flat_and_waiting(report, by_config.get(key(more)), by_config[key(base)]) and \
            max(4, 4 * workers) <= CLIMB_TOP and key(further) not in seen and \
            over_memory(report, max(4, 4 * workers)) is None:
        return further  # one run can land a band low: a doubling that still waits for data gets one more
    fewer = as_changed(base | {"num_workers": workers // 2 if workers else 1}, settings)
    if not paid and (workers != 1 or slowed(report, by_config[key(base)])) and key(fewer) not in seen:
        return fewer  # from none, one: it overlaps the step without taking the CPUs two take
    return None


FLAT_WAIT = 0.2
"""A doubling within the noise whose runs still wait this much of each iteration for data (and whose workers do
not slow the step), or this much of the training's time at its epochs' starts, is doubled once more before the
climb stops: loading is still what the training waits for."""


def _flat_and_waiting(report: TuneReport, more: Runs | None, base: Runs) -> bool:
    """Whether the doubling's runs (``more``) are no more than one noise band below ``base``'s and still wait
    :data:`FLAT_WAIT`: in their steady state, where their workers do not slow the step, or at their epochs'
    starts, where more workers load the first batches side by side whatever they cost the step (short epochs:
    Lightning's, a validation every few hundred steps)."""
    assert report.answer is not None
    if not more or rate(more) < rate(base) * (1 - report.answer.noise):
        return False
    steady = [t.data_wait_fraction for _, t in more if t.data_wait_fraction is not None]
    starts = [t.warmup_wait_fraction for _, t in more if t.warmup_wait_fraction is not None]
    return (bool(steady) and statistics.median(steady) >= FLAT_WAIT and not slowed(report, more)) or \
        (bool(starts) and statistics.median(starts) >= FLAT_WAIT)


NODE_WAIT = 0.1
"""A node whose ranks wait this share of each iteration for data (the most of any node's) in the leading config's
runs gets workers of its own tried: its loaders pace the whole job."""


def node_climb(report: TuneReport, seen: set[Key], runs_left: int | None = None) -> Step | None:
    """Across nodes, once the climb for every node is done: half the workers (none, from one), then twice (two,
    from none) on the node whose ranks wait most for data in the leading config's runs, every other node kept as
    that config has it (a node with fewer CPUs, slower storage or more load may want workers of its own, and a run
    says whether the job gains); around a per-node config that leads, again. None on one node, when no node waits
    :data:`NODE_WAIT`, or when both are run."""
    if report.nnodes < 2 or report.answer is None or report.answer.leading is None or report.loader is None or \
            _unconfirmable(report, runs_left):
        return None
    lead = report.trials[report.answer.leading]
    waits: dict[str, list[float]] = {}
    for _, trial in rates(report.trials).get(key_of(lead), []):
        for rank in trial.ranks:  # each rank's node is there across nodes, its data wait where it had batches
            if rank.node is not None and rank.data_wait_fraction is not None:
                waits.setdefault(str(rank.node), []).append(rank.data_wait_fraction)
    if len(waits) < 2:
        return None
    node, wait = max(((node, statistics.median(found)) for node, found in waits.items()), key=lambda item: item[1])
    if wait < NODE_WAIT:
        return None
    common = report.loader.settings | lead.config
    workers = node_workers(common, lead.node_knobs.get(node, KnobValues()))
    for count in (workers // 2 if workers else None, max(2, 2 * workers)):
        if count is None or count > CLIMB_TOP or (count > workers and over_memory(report, count) is not None):
            continue
        own = (lead.node_knobs.get(node, KnobValues()) | {"num_workers": count}).apart_from(common)
        config, nodes = _for_every_node(lead.config, {**lead.node_knobs, node: own}, report)
        if key(config, nodes) not in seen:
            return (config, "candidate", nodes) if nodes else (config, "candidate")
    return None


def _for_every_node(config: KnobValues, nodes: dict[str, KnobValues],
                    report: TuneReport) -> tuple[KnobValues, dict[str, KnobValues]]:
    """``config`` and each node's own knobs as one run sets them: a knob every node sets alike is the config's."""
    assert report.loader is not None
    alike = {k: v for k, v in nodes.get("0", KnobValues()).items()
             if len(nodes) == report.nnodes and all(own.get(k) == v for own in nodes.values())}
    config = as_changed(config | alike, report.loader.settings)
    common = report.loader.settings | config
    nodes = {n: own.apart_from(common) for n, own in nodes.items()}
    return config, {n: own for n, own in nodes.items() if own}
