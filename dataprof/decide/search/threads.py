"""Threads beside worker processes in the adaptive search: where the evidence (or the user) calls for them, as
many threads as the pick so far has workers, then twice as many while it pays."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dataprof.decide.recommend import recommend
from dataprof.decide.search import evidence
from dataprof.decide.search.common import ClimbStep, Proposal
from dataprof.results.knobs import LoaderConfig
from dataprof.results.stats import rate
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import Framework, TrialStatus, WorkerKind


def gain(new: TrialResult, old: TrialResult) -> str:
    """``w2 → w4: +98%`` (``t2 → t4`` for threads; full labels when more than the worker count differs)."""
    same_knobs = dataclasses.replace(old.config, num_workers=new.config.num_workers) == new.config
    before = old.config.short_label if same_knobs else old.config.label()
    after = new.config.short_label if same_knobs else new.config.label()
    return f"{before} → {after}: {fmt_change(rate(new) / rate(old) - 1)}"


class ThreadSteps(ClimbStep):
    """The thread steps of the adaptive strategy's climb (:class:`~dataprof.decide.search.adaptive.AdaptiveStrategy`):
    a step of the search, read from the climb's space, budget, ladder and judgements."""

    def propose(self, done: dict[LoaderConfig, TrialResult], history: Sequence[TrialResult]) -> Proposal | None:
        """Threads beside the worker processes, where the user asked for both or the evidence calls for them
        (:func:`evidence.thread_evidence`): first as many threads as the pick so far has workers, with its
        buffer, pinning and order, then twice as many while each doubling gains beyond the noise, up to the
        ladder's top."""
        anchor = self.anchor(done)
        if anchor is None:
            return None
        because = self.reason(anchor)
        if not because:
            return None
        best: TrialResult | None = None
        previous = anchor
        count, top = anchor.config.num_workers, max(self.climb.ladder, default=0)
        while count <= top:
            config = dataclasses.replace(anchor.config.as_threads(), num_workers=count)
            trial = done.get(config)
            if trial is None:
                if best is None:
                    return Proposal(config, f"threads at the pick so far ({anchor.config.label()}){because}",
                                    rival=anchor)
                return Proposal(config, f"climb threads: {gain(best, previous)}", rival=best, either_way=True)
            if trial.status != TrialStatus.OK or (best is not None and not self.climb.gains(trial, best)):
                return None
            previous, best, count = best or anchor, trial, 2 * count
        return None

    def anchor(self, done: dict[LoaderConfig, TrialResult]) -> TrialResult | None:
        """The process config threads are tried beside: the pick after the knob steps (the fastest process config the
        recommendation would take); None where threads are not to be tried."""
        space = self.space
        if space.framework != Framework.TORCH or space.thread_loader is None or space.only_threads \
                or space.worker_kinds == (WorkerKind.PROCESS,):
            return None
        chosen = recommend([t for c, t in done.items() if c.num_workers > 0 and not c.threads
                            and t.status == TrialStatus.OK])
        return None if chosen is None else done[chosen.config]

    def reason(self, anchor: TrialResult) -> str:
        """Why threads are tried beside ``anchor``: the user asked (``--worker-kind``), or the evidence."""
        if WorkerKind.THREAD in self.space.worker_kinds:
            return " (--worker-kind process,thread)"
        above = next((w for w in self.climb.ladder if w > anchor.config.num_workers), None)
        shm = None if above is None else self.climb.budget.shm_forbids(self.climb.climb_config(above))
        return evidence.thread_evidence(anchor, self.space, self.climb.saturated(anchor), shm)
