"""Pick the config to recommend: the cheapest one within noise of the fastest.

Pure function of the trials (and of the model fitted from them), so ``dataprof diagnose run.json`` reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dataprof.decide.cost import Cost, cheaper, sweep_cost
from dataprof.decide.model import LIMITS
from dataprof.results.stats import noise_between, speedup
from dataprof.results.sweep import Recommendation
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import TrialStatus

MAX_TRADE = 0.05
"""A cheaper config is recommended over the fastest only if it is at most this much slower, however noisy."""


def tolerance(a: TrialResult, b: TrialResult) -> float:
    """How much slower than the fastest a cheaper config may be: the noise, capped at :data:`MAX_TRADE`."""
    return min(noise_between(a, b), MAX_TRADE)


def _cost(trial: TrialResult) -> Cost:
    """The trial's config's :class:`~dataprof.decide.cost.Cost`: fewer worker processes, fewer threads, less
    prefetch, fewer knobs changed from the loader's own defaults (first those whose records say they cost:
    Paddle's shared memory and buffer reader, the order, the start method), less memory, no pinning. A thread
    config starts no process: within noise, threads are the lighter loader (one heap, no copies of the main
    process's pages, nothing through /dev/shm)."""
    return sweep_cost(trial.config, trial.memory.peak_memory_bytes)


def _lighter(chosen: TrialResult, other: TrialResult) -> str:
    """`` (PSS 0.4GB against 1.9GB)`` when both were read."""
    mine, theirs = chosen.memory.peak_memory_bytes, other.memory.peak_memory_bytes
    if not mine or not theirs:
        return ""
    return f" (peak PSS {mine / 1e9:.2f} GB against {theirs / 1e9:.2f} GB)"


ORDER_CAVEAT = ("; in_order=False: batches come as they are ready, not in the sampler's order (the same "
                "batches every epoch, in another order)")
"""What a recommendation with ``in_order=False`` changes besides speed."""


Model = Callable[[TrialResult], tuple[float, str]]
"""A trial's rate by the model of the pipeline, and what holds it back (``decide.model.predict``)."""


def recommend(trials: Sequence[TrialResult], model: Model | None = None) -> Recommendation | None:
    """The cheapest completed config within noise (at most :data:`MAX_TRADE`) of the fastest; None if none ran.

    With ``model``, noise the 5% cap leaves unsettled is settled by it: a cheaper config within the noise of the
    fastest, however far, that the model says is no slower (both at the CPUs' limit, say) is recommended. The
    model sees a config's worker count only: between two configs of one count (pinning, prefetch) it cannot
    tell, and settles nothing."""
    ok = [t for t in trials if t.status == TrialStatus.OK and t.samples_per_s]
    if not ok:
        return None
    fastest = max(ok, key=lambda t: t.samples_per_s or 0.0)
    top = fastest.samples_per_s or 0.0
    within = [t for t in ok if (top - (t.samples_per_s or 0.0)) / top <= tolerance(t, fastest)]
    settled = []
    if model is not None and not fastest.config.threads:  # the model is of the worker processes
        floor = (1 - MAX_TRADE) * model(fastest)[0]
        settled = [t for t in ok if t not in within and not t.config.threads
                   and t.config.num_workers != fastest.config.num_workers
                   and (top - (t.samples_per_s or 0.0)) / top <= noise_between(t, fastest) and model(t)[0] >= floor]
    chosen = min(within + settled, key=_cost)
    heavier = [t for t in within + settled if chosen.config.threads and not t.config.threads
               and 0 < (t.memory.peak_memory_bytes or 0) < (chosen.memory.peak_memory_bytes or 0)]
    if heavier:  # threads are the lighter loader only when they weigh less: these processes weighed less
        chosen = min(heavier, key=_cost)
    baseline = next((t for t in ok if t.config.is_baseline), None)
    return Recommendation(
        config=chosen.config,
        samples_per_s=chosen.samples_per_s or 0.0,
        speedup_vs_baseline=speedup(chosen, baseline),
        fastest=fastest.config,
        fastest_samples_per_s=top,
        reason=_reason(chosen, fastest, ok) + (_settled(chosen, fastest, model) if chosen in settled else "")
        + (ORDER_CAVEAT if chosen.config.in_order is False else ""),
    )


def _settled(chosen: TrialResult, fastest: TrialResult, model: Model | None) -> str:
    """Why the model settles what the noise could not."""
    assert model is not None
    (mine, limit), (theirs, _) = model(chosen), model(fastest)
    return (f"; more than the {100 * MAX_TRADE:.0f}% a cheaper config may cost, but the model of the pipeline "
            f"puts it at {mine:,.0f} samples/s against {theirs:,.0f} ({limit}: {LIMITS[limit]}), so the gap is "
            "noise")


def _reason(chosen: TrialResult, fastest: TrialResult, ok: Sequence[TrialResult]) -> str:
    if chosen is fastest:
        others = [t for t in ok if t is not fastest]
        if not others:
            return "the only configuration that completed"
        runner_up = max(others, key=lambda t: t.samples_per_s or 0.0)
        gap = 1 - (runner_up.samples_per_s or 0.0) / (fastest.samples_per_s or 1.0)
        noise = noise_between(runner_up, fastest)
        if gap <= tolerance(runner_up, fastest):
            return (f"fastest, and the cheapest within noise (next: {runner_up.config.label()} "
                    f"−{100 * gap:.1f}%, noise ±{100 * noise:.1f}%)")
        if gap <= noise:
            return (f"fastest measured; the next best ({runner_up.config.label()}) is {100 * gap:.1f}% slower: "
                    f"within the ±{100 * noise:.1f}% noise, but more than the {100 * MAX_TRADE:.0f}% a cheaper "
                    "config may cost")
        return (f"fastest measured; the next best ({runner_up.config.label()}) is "
                f"{100 * gap:.1f}% slower, beyond the ±{100 * noise:.1f}% noise")
    gap = 1 - (chosen.samples_per_s or 0.0) / (fastest.samples_per_s or 1.0)
    words = cheaper(_cost(chosen), _cost(fastest))
    lighter = _lighter(chosen, fastest) if chosen.config.threads and not fastest.config.threads else ""
    return (f"within noise of the fastest ({fastest.config.label()}: −{100 * gap:.1f}%, noise "
            f"±{100 * noise_between(chosen, fastest):.1f}%) and {words}{lighter}")
