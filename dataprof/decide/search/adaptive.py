"""The adaptive strategy: climb num_workers while it pays, refine around the peak, step the other knobs at the climb's
pick (and the knobs the measurements call for), then the rules of thumb."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dataprof.decide.budgets import available_cpus
from dataprof.decide.recommend import MAX_TRADE, recommend
from dataprof.decide.search import evidence
from dataprof.decide.search.common import Budget, Proposal, Searching, climb_config, first_of
from dataprof.decide.search.knob_steps import KnobSteps
from dataprof.decide.search.threads import ThreadSteps, gain
from dataprof.results.knobs import LoaderConfig, baseline
from dataprof.results.space import SearchSpace
from dataprof.results.stats import noise_between, rate
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import Framework, TrialStatus


class AdaptiveStrategy(Searching):
    """Climb workers, refine around the peak, step the other knobs at the climb's pick, then the rules of thumb.

    Stateless: every call re-reads the history from the start, so the same
    trials always give the same next step and the same reasons.
    """

    name = "adaptive"
    max_refinements = 2
    min_step = 0.15
    """Refinement stops when the next count is within this share of the best one."""
    linear = 0.9
    """A doubling of workers that gives at least this share of a doubled rate scales near-linearly."""
    remeasure_noise = MAX_TRADE
    """A step within a noise wider than this is measured again before the climb stops: a noise wider than what
    the recommendation may trade for a cheaper config can hide a gain it would take."""

    def __init__(self, space: SearchSpace, budget: Budget | None = None, rules: bool = True,
                 autotune: int | None = None, current: LoaderConfig | None = None) -> None:
        super().__init__(space, budget, rules, autotune, current)
        self.ladder = sorted({w for w in space.workers if w > 0})
        self.baseline = baseline(space.framework)
        self.knob_steps = KnobSteps(self)
        self.thread_steps = ThreadSteps(self)

    def total(self) -> int | None:
        """Unknown in advance (None): the climb stops when more workers stop paying."""
        return None

    def climb_config(self, workers: int) -> LoaderConfig:
        """The space's default knobs at ``workers``; for Paddle, ``use_shared_memory=False`` (when the space has
        it) where /dev/shm cannot hold the batches in flight, so a small /dev/shm does not end the climb."""
        config = climb_config(self.space, workers)
        if config.use_shared_memory and False in self.space.use_shared_memory and self.budget.shm_forbids(config):
            return dataclasses.replace(config, use_shared_memory=False)
        return config

    def propose(self, history: Sequence[TrialResult]) -> Proposal:
        """Climb num_workers while it pays, refine around the best, then step the other knobs there."""
        done = {t.config: t for t in history}
        if self.baseline not in done:
            framework = "Paddle" if self.space.framework == Framework.PADDLE else "PyTorch"
            return Proposal(self.baseline, f"baseline: num_workers=0, {framework}'s default")
        mine = self._current_step(done)
        if mine is not None:
            return mine
        proposal = first_of((self._climb, self._dip, self._refine, self.knob_steps.propose,
                             self.thread_steps.propose), done, history)
        if proposal is not None:
            return proposal
        best = max((t for t in history if t.status == TrialStatus.OK), key=rate, default=None)
        return self._rule_of_thumb_step(history, best) or Proposal(None, self._stop_reason(done, history, best))

    def _measured(self, done: dict[LoaderConfig, TrialResult]) -> list[TrialResult]:
        """Trials at the climbing knobs, by worker count."""
        return sorted((t for c, t in done.items() if c.num_workers > 0 and c == self.climb_config(c.num_workers)),
                      key=lambda t: t.config.num_workers)

    def _rungs(self, done: dict[LoaderConfig, TrialResult]) -> list[int]:
        """The ladder as climbed: after a step that scaled almost linearly, the next rung is skipped.

        A latency-bound loader doubles its rate with each doubling of workers;
        jumping ×4 there halves the climb, and refinement comes back for the
        skipped counts if the peak lies among them.
        """
        rungs: list[int] = []
        previous = done.get(self.baseline)
        index = 0
        while index < len(self.ladder):
            workers = self.ladder[index]
            rungs.append(workers)
            trial = done.get(self.climb_config(workers))
            step = 1
            if trial is not None and trial.status == TrialStatus.OK and previous is not None and rate(previous) > 0 \
                    and not self.saturated(trial):  # past a saturated CPU budget, one rung at a time
                ratio = workers / max(1, previous.config.num_workers)
                if ratio >= 2 and rate(trial) / rate(previous) >= self.linear * ratio:
                    step = 2
            if trial is not None and trial.status == TrialStatus.OK:
                previous = trial
            index += step if index + step < len(self.ladder) else 1
        return rungs

    def _walk(self, done: dict[LoaderConfig, TrialResult],
              history: Sequence[TrialResult]) -> tuple[Proposal | None, str]:
        """Walk the climbed rungs: the next one to measure, or None and why climbing stopped."""
        baseline = done.get(self.baseline)
        best = baseline if baseline is not None and baseline.status == TrialStatus.OK else None
        last_step = ""
        for workers in self._rungs(done):
            config = self.climb_config(workers)
            trial = done.get(config)
            if trial is None:
                blocked = self.budget.forbids(config, history)
                if blocked is not None:
                    return None, f"stopped climbing: {blocked}"
                skipped = [r for r in self.ladder if best is not None and best.config.num_workers < r < workers]
                skip = f", near-linear: skip w{','.join(map(str, skipped))}" if skipped else ""
                piped = climb_config(self.space, workers) != config
                pipe = f"; use_shared_memory=False: {self.budget.shm_forbids(climb_config(self.space, workers))}" \
                    if piped else ""
                why = (f"climb: {last_step}{skip}" if last_step else "climb") + pipe
                # whether it gains beyond the noise decides the climb, either way: the trial may stop once it knows
                return Proposal(config, why, rival=best, either_way=True), "climbing"
            if trial.status != TrialStatus.OK:
                return None, f"stopped climbing: {config.label()} {trial.status}"
            if best is not None and not self.gains(trial, best):
                again = self._remeasure(trial, best)
                if workers > 1 and again is not None:
                    return again, "re-measuring"
                if workers > 1:
                    noise = noise_between(trial, best)
                    cpu = (f"; {best.config.label()} already used {(best.cpu.cpu_percent or 0) / 100:.1f} of "
                           f"{self.budget.usable_cpus} usable CPUs" if self.saturated(best) else "")
                    return None, f"stopped climbing: {gain(trial, best)}, not beyond the ±{noise:.0%} noise{cpu}"
                continue  # one worker loads no faster than the main process: parallelism starts at two
            if best is not None:
                last_step = f"{gain(trial, best)} > noise"
            best = trial
        return None, (f"stopped climbing: top of the worker range (w{self.ladder[-1]})" if self.ladder
                      else "no workers")

    def _climb(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """Next rung of the worker ladder, or None once climbing has stopped."""
        return self._walk(done, history)[0]

    def _remeasure(self, trial: TrialResult, best: TrialResult) -> Proposal | None:
        """When the noise decides the climb (a step within a wide noise, up or down), measure the noisier of the
        two readings again, once: the pooled figures settle it. Not at the top rung: no climb is left to decide
        there, and the refinement's bisection below it measures what the pick needs.

        Not a step from a best with workers whose CPUs were used up: more workers only share the same CPUs
        there (a gain from that stays small), and the climb's one rung past saturation has measured it.
        """
        noise = noise_between(trial, best)
        if noise < self.remeasure_noise or abs(rate(trial) / max(rate(best), 1e-9) - 1) > noise:
            return None  # a quiet measurement, or a step beyond the noise either way: measured, not guessed
        if trial.repeats > 1 or best.repeats > 1 or trial.config.num_workers == self.ladder[-1]:
            return None
        if best.config.num_workers > 0 and self.saturated(best):
            return None
        again = max((trial, best), key=lambda t: t.samples_per_s_spread or 0.0)
        return Proposal(again.config, f"re-measure {again.config.label()}: {gain(trial, best)} is within the "
                                      f"±{noise:.0%} noise, which decides whether to climb on", repeat=True)

    def _dip(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """A dip in the curve (:func:`first_dip`), not yet measured twice, is measured again, once: throughput
        against workers has one peak, so a dip is a reading taken while the machine drifted, and it would
        steer the refinement and the pick."""
        dip = evidence.first_dip(self._measured(done), self.remeasure_noise)
        return None if dip is None else Proposal(dip[0].config, f"re-measure {dip[0].config.label()}: {dip[1]}",
                                                 repeat=True)

    def _scaling(self, low: TrialResult, high: TrialResult) -> bool:
        """Throughput still rose near-linearly from ``low`` to ``high`` workers (latency-bound, the CPUs not
        saturated): the curve has not bent yet, so no count between them can beat ``high`` and refining there
        cannot pay."""
        if low.config.num_workers == 0 or rate(low) <= 0 or self.saturated(high):
            return False
        ratio = high.config.num_workers / low.config.num_workers
        return rate(high) / rate(low) >= self.linear * ratio

    def gains(self, trial: TrialResult, best: TrialResult) -> bool:
        """``trial`` is faster than ``best`` beyond the noise between them."""
        return rate(trial) > rate(best) * (1 + noise_between(trial, best))

    def saturated(self, trial: TrialResult) -> bool:
        """The trial used most of the CPUs it had: the usable ones, less what other processes took."""
        cpu = trial.cpu.cpu_percent
        return cpu is not None and \
            cpu / 100.0 >= self.budget.saturated_cpu * available_cpus(trial, self.budget.usable_cpus)

    def _refine(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """Bisect (geometrically, as the ladder is) between the best count and a clearly worse or failed neighbour,
        or a neighbour that loads no better across a bracket one end of which is still on the linear rise
        (loading at least :attr:`linear` of the fastest per-worker rate): the curve bent between the two, so its
        peak lies between.

        Where the curve cannot rise between two measured counts, no trial is spent there: below the best
        when the step into it still scaled near-linearly, or when the best sits on a flat top (its CPUs
        saturated, or the count above it within noise of it: a count below cannot load faster); above a
        best whose CPUs were saturated (the climb's one rung more already measured what more workers
        sharing the same CPUs do); and below a top the climb rose into (no count above it) after one
        probe there came out clearly worse: the counts between lie on the rise, none faster than the top.

        The more promising side goes first: the better neighbour's, or a failed
        one's above a still-rising curve. When the budget stopped the climb, the
        most workers it allows is tried.
        """
        measured = self._measured(done)
        ok = [t for t in measured if t.status == TrialStatus.OK]
        refined = sum(1 for t in measured if t.config.num_workers not in self.ladder and t.config != self.current)
        if not ok or refined >= self.max_refinements:
            return None
        best = max(ok, key=rate)
        w = best.config.num_workers
        knee = self._knee(ok, best)
        if knee is not None and knee[1]:
            return None
        baseline = done.get(self.baseline)
        below = next((t for t in reversed(ok) if t.config.num_workers < w),
                     baseline if baseline is not None and baseline.status == TrialStatus.OK else None)
        above = next((t for t in measured if t.config.num_workers > w), None)
        sides: list[tuple[float, int, str]] = []
        rise = self.linear * evidence.per_worker_rise(ok)
        on_the_rise = rate(best) >= rise * w
        if above is not None and knee is None and not self.saturated(best) \
                and (above.status != TrialStatus.OK or self.gains(best, above) or on_the_rise):
            rising = below is not None and self.gains(best, below)
            promise = rate(above) if above.status == TrialStatus.OK else (rate(best) if rising else 0.0)
            sides.append((promise, evidence.midpoint(w, above.config.num_workers),
                          f"refine between w{w} and w{above.config.num_workers}"))
        flat = self.saturated(best) or (above is not None and above.status == TrialStatus.OK
                                         and not self.gains(best, above))
        probed = above is None and below is not None and below.config.num_workers not in {0, *self._rungs(done)}
        rose_to_below = below is not None and 0 < rise * below.config.num_workers <= rate(below)
        if below is not None and (self.gains(best, below) or rose_to_below) and not self._scaling(below, best) \
                and not flat and not probed:
            sides.append((rate(below), evidence.midpoint(below.config.num_workers, w),
                          f"refine between w{below.config.num_workers} and w{w}"))
        if above is None:
            sides += self._most_allowed(done, history, w)
        for _, workers, why in sorted(sides, key=lambda side: -side[0]):
            config = self.climb_config(workers)
            if workers in (w, 0) or config in done or self.budget.forbids(config, history) is not None:
                continue
            if abs(workers - w) < self.min_step * w:
                continue  # a bracket this narrow holds no gain worth a trial
            return Proposal(config, why, rival=best)
        return None

    def _most_allowed(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult],
                      w: int) -> list[tuple[float, int, str]]:
        """When the budget forbids the next rung above ``w``: the most workers below it the budget allows."""
        rung = next((r for r in self.ladder if r > w and self.climb_config(r) not in done), None)
        if rung is None or not self.budget.forbids(self.climb_config(rung), history):
            return []
        fitting = next((n for n in range(rung - 1, w, -1)
                        if self.budget.forbids(self.climb_config(n), history) is None), None)
        return [] if fitting is None else [(float("inf"), fitting, f"the most workers the budget allows below w{rung}")]

    def _knee(self, ok: Sequence[TrialResult], best: TrialResult) -> tuple[float, str] | None:
        """Past the knee of the curve (:func:`knee_gain`): the most a count below ``best`` can gain, and why
        refining below cannot pay when that is within the noise (else an empty reason); None before it."""
        w = best.config.num_workers
        below = max((t for t in ok if 0 < t.config.num_workers < w), key=lambda t: t.config.num_workers, default=None)
        above = min((t for t in ok if t.config.num_workers > w), key=lambda t: t.config.num_workers, default=None)
        if below is None or above is None:
            return None
        gain = evidence.knee_gain(ok, below, best, above, self.linear)
        if gain is None:
            return None
        noise = max(noise_between(best, below), noise_between(best, above))
        why = "" if gain >= noise else (
            f"; w{w} is past the knee (under {100 * self.linear:.0f}% of the fastest per-worker rate), so no count "
            f"above it loads faster, and the curve from w{below.config.num_workers} can peak at most "
            f"{fmt_change(gain, 1)} above it, within the ±{100 * noise:.0f}% noise: refining cannot pay")
        return gain, why

    def climb_pick(self, done: dict[LoaderConfig, TrialResult]) -> TrialResult | None:
        """The climbing config :func:`recommend` would take (the cheapest shown at most 5% slower than the
        fastest)."""
        chosen = recommend([t for t in self._measured(done) if t.status == TrialStatus.OK])
        return None if chosen is None else done[chosen.config]

    def _stop_reason(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult],
                     best: TrialResult | None) -> str:
        climb = self._walk(done, history)[1]
        ok = [t for t in self._measured(done) if t.status == TrialStatus.OK]
        knee = self._knee(ok, max(ok, key=rate)) if ok else None
        peaked = knee[1] if knee is not None else ""
        tail = f"; best {best.config.label()}, no untried neighbour left to beat it" if best else ""
        untried = self.thread_steps.anchor(done) is not None and not self.space.worker_kinds \
            and not any(c.threads for c in done) and evidence.gil_held(self.space)
        return climb + peaked + tail + self.knob_steps.untried(done) + (evidence.no_thread_words(self.space)
                                                                   if untried else "")
