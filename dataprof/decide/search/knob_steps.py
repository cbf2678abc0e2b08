"""The adaptive search's knob steps at the climb's pick: each knob the space steps, one value at a time, then the
knobs the measurements call for (a deeper buffer for a heavy-tailed wait, ``in_order=False`` for stragglers, the
start methods copy-on-read growth or a slow start calls for)."""

from __future__ import annotations

from collections.abc import Sequence

from dataprof.decide.search import evidence
from dataprof.decide.search.common import ClimbStep, Proposal, climb_config
from dataprof.decide.thresholds import heavy_tail
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import evidence_knobs
from dataprof.results.stats import rate
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import Framework, TrialStatus


class KnobSteps(ClimbStep):
    """The knob steps of the adaptive strategy's climb (:class:`~dataprof.decide.search.adaptive.AdaptiveStrategy`):
    a step of the search, read from the climb's space, budget, pick and judgements."""

    def propose(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """One knob at a time at the climb's pick (:meth:`AdaptiveStrategy.climb_pick`): pin_memory (PyTorch) or
        use_shared_memory and use_buffer_reader (Paddle), then prefetch_factor, then the knobs the evidence calls
        for. On a flat top, the same buffer depth in fewer workers has fewer processes sharing the CPUs (and a
        cheaper trial) than the most workers within noise."""
        anchor = self.climb.climb_pick(done)
        if anchor is None:
            return None
        current = anchor
        # persistent_workers=False only adds a worker restart every epoch: it cannot load faster, so it is
        # not stepped (the climb uses it when it is the only value given).
        given = tuple((knob, values, "") for knob, values in self.space.stepped_knobs())
        for knob, values, because in (*given, *self.evidence(anchor, done)):
            tried = []
            for value in values:
                config = current.config.with_value(knob, value)
                if config == current.config:
                    continue
                trial = done.get(config)
                if trial is None:
                    if self.climb.budget.forbids(config, history) is not None:
                        continue
                    return Proposal(config, f"try {knob}={value} at the pick so far{because}", rival=current)
                tried.append(trial)
            winners = [t for t in tried if t.status == TrialStatus.OK and self.climb.gains(t, current)]
            if winners:
                current = max(winners, key=rate)
        return None

    def other_prefetch(self) -> tuple[int, ...]:
        """The space's ``prefetch_factor`` values besides the climb's, left to the evidence: worth a trial only
        when a wait for a batch has a heavy tail (:meth:`tailed`); none when the user gave them (then
        :meth:`SearchSpace.stepped_knobs` tries them anyway) or the DataLoader lacks the knob.

        By Little's law a loader with ``W`` busy workers has ``W`` batches in the making; ``prefetch_factor=2``
        lets ``2W`` be in flight, so each worker has the next one queued while it works. More depth only
        pays when a late batch holds the in-order queue up and the others, their slots full, sit idle
        behind it, which the main process sees as a heavy tail of its wait.
        """
        if {"prefetch_factor"} & {*self.space.forced, *self.space.skipped}:
            return ()
        default = climb_config(self.space, 1).prefetch_factor
        return tuple(v for v in self.space.prefetch_factors if v != default)

    def tailed(self, done: dict[LoaderConfig, TrialResult]) -> TrialResult | None:
        """The baseline if its wait for a batch has a heavy tail (stragglers among the batches), else the climb's
        pick if its has while its CPUs were not used up (batches in bursts, workers idle between:
        many workers scheduled on few CPUs). Bursts on CPUs used up are workers taking turns: a deeper buffer
        adds no CPU."""
        baseline, pick = done.get(self.climb.baseline), self.climb.climb_pick(done)
        if baseline is not None and heavy_tail(baseline):
            return baseline
        return pick if pick is not None and heavy_tail(pick) and not self.climb.saturated(pick) else None

    def evidence(self, anchor: TrialResult,
                 done: dict[LoaderConfig, TrialResult]) -> tuple[tuple[str, tuple[object, ...], str], ...]:
        """The knobs the measurements say can matter, unless the user set them or the DataLoader lacks them, each
        with the evidence in words: the other ``prefetch_factor`` values (:meth:`other_prefetch`);
        ``in_order=False`` when batches at ``num_workers=0`` have stragglers (a heavy-tailed load time: with
        workers, the batches behind a slow one could overtake it); the start methods
        :func:`start_methods_to_try` names."""
        space = self.space
        if anchor.config.num_workers == 0:
            return ()
        knobs: list[tuple[str, tuple[object, ...], str]] = []
        deeper, tailed = self.other_prefetch(), self.tailed(done)
        if deeper and tailed is not None:
            knobs.append(("prefetch_factor", deeper, evidence.tail_words(tailed)))
        if space.framework != Framework.TORCH or anchor.config.threads:  # threads have no start method to try
            return tuple(knobs)
        left = set(evidence_knobs(space.framework)) - set(space.skipped) - set(space.forced)
        baseline = done.get(self.climb.baseline)
        if "in_order" in left and baseline is not None and heavy_tail(baseline):
            knobs.append(("in_order", (False,), evidence.tail_words(baseline)))
        others = evidence.start_methods_to_try(anchor, space.start_method, space.available_start_methods)
        if "multiprocessing_context" in left and others:
            knobs.append(("multiprocessing_context", others, evidence.start_method_words(anchor, space.start_method)))
        return tuple(knobs)

    def untried(self, done: dict[LoaderConfig, TrialResult]) -> str:
        """Why the space's other ``prefetch_factor`` values were not tried, when they were not."""
        others = self.other_prefetch()
        baseline = done.get(self.climb.baseline)
        if not others or self.tailed(done) is not None or baseline is None \
                or baseline.status != TrialStatus.OK or not evidence.wait_figures(baseline):
            return ""
        default = climb_config(self.space, 1).prefetch_factor
        values = ",".join(map(str, others))
        anchor = self.climb.climb_pick(done)
        busy = f", so the {default} batches per worker that prefetch_factor={default} keeps in flight already " \
               "keep every worker busy"
        if anchor is None:
            why = busy
        else:
            figures = f" (wait {evidence.wait_figures(anchor)})" if evidence.wait_figures(anchor) else ""
            why = f" nor do they come in bursts at {anchor.config.label()}{figures}{busy}"
            if heavy_tail(anchor):  # bursts on CPUs used up (:meth:`tailed` counts those with CPUs to spare)
                why = (f", and they reach {anchor.config.label()} in bursts{figures} as its workers take turns on "
                       f"the {(anchor.cpu.cpu_percent or 0) / 100:.1f} CPUs it used up: a deeper buffer adds no CPU")
        return (f"; prefetch_factor {values} not tried: batches at num_workers=0 have no stragglers "
                f"({evidence.wait_figures(baseline)}){why} (--prefetch-factor "
                f"{','.join(map(str, self.space.prefetch_factors))} to measure {'them' if len(others) > 1 else 'it'} "
                "anyway)")
