"""Pick the config to recommend: the cheapest one its trials show within :data:`MAX_TRADE` of the fastest.

Pure function of the trials (and of the model fitted from them), so ``dataprof diagnose run.json`` reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dataprof.decide.cost import Cost, cheaper, sweep_cost
from dataprof.decide.model import LIMITS
from dataprof.results.stats import MIN_NOISE, noise_between, noise_of_ratio, rate, ratio_range, shown_within, speedup
from dataprof.results.sweep import Recommendation
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import TrialStatus

MAX_TRADE = 0.05
"""A cheaper config is recommended over the fastest only if its trials show it at most this much slower, however
noisy: its whole range (``results.stats.shown_within``, ``tune``'s rule too), not its reading alone."""


def _worst(trial: TrialResult, fastest: TrialResult) -> float:
    """The most ``trial`` may be slower than ``fastest`` at the noise between them: the low end of their ratio's
    range (``results.stats.ratio_range``), less than zero."""
    return ratio_range(rate(trial) / rate(fastest), noise_of_ratio(trial, fastest))[0]


def _shown(trial: TrialResult, fastest: TrialResult) -> bool:
    """Whether ``trial``'s measurements show it within :data:`MAX_TRADE` of ``fastest`` (itself is)."""
    return trial is fastest or shown_within(rate(trial) / rate(fastest), noise_of_ratio(trial, fastest), MAX_TRADE)


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
    """The cheapest completed config its trials show within :data:`MAX_TRADE` of the fastest (:func:`_shown`);
    None if none ran.

    With ``model``, what the noise leaves unsettled is settled by it: a cheaper config within the noise of the
    fastest, however far, that the model says is no slower (both at the CPUs' limit, say) is recommended. The
    model sees a config's worker count only: between two configs of one count (pinning, prefetch) it cannot
    tell, and settles nothing."""
    ok = [t for t in trials if t.status == TrialStatus.OK and t.samples_per_s]
    if not ok:
        return None
    fastest = max(ok, key=lambda t: t.samples_per_s or 0.0)
    top = fastest.samples_per_s or 0.0
    within = [t for t in ok if _shown(t, fastest)]
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
        reason=_reason(chosen, fastest, ok, chosen in settled)
        + (_settled(chosen, fastest, model) if chosen in settled else "")
        + (ORDER_CAVEAT if chosen.config.in_order is False else ""),
    )


def _settled(chosen: TrialResult, fastest: TrialResult, model: Model | None) -> str:
    """Why the model settles what the noise could not."""
    assert model is not None
    (mine, limit), (theirs, _) = model(chosen), model(fastest)
    return (f"; not shown within the {100 * MAX_TRADE:.0f}% a cheaper config may cost, but the model of the "
            f"pipeline puts it at {mine:,.0f} samples/s against {theirs:,.0f} ({limit}: {LIMITS[limit]}), so the "
            "gap is noise")


def _reason(chosen: TrialResult, fastest: TrialResult, ok: Sequence[TrialResult], settled: bool) -> str:
    """Why ``chosen`` (``settled``: by the model, not shown within :data:`MAX_TRADE`), against the fastest and
    the next best."""
    if chosen is fastest:
        others = [t for t in ok if t is not fastest]
        if not others:
            return "the only configuration that completed"
        runner_up = max(others, key=lambda t: t.samples_per_s or 0.0)
        gap = 1 - (runner_up.samples_per_s or 0.0) / (fastest.samples_per_s or 1.0)
        noise = noise_between(runner_up, fastest)
        if _shown(runner_up, fastest):
            return (f"fastest, and the cheapest of those within {100 * MAX_TRADE:.0f}% of it (next: "
                    f"{runner_up.config.label()} {_range(runner_up, fastest)})")
        if gap <= noise and not _cost(runner_up) < _cost(fastest):
            return (f"fastest measured, and cheaper than the next best ({runner_up.config.label()}, "
                    f"{100 * gap:.1f}% slower, within the ±{100 * noise:.1f}% noise)")
        if gap <= noise:
            return (f"fastest measured; the next best ({runner_up.config.label()}) is {100 * gap:.1f}% slower: "
                    f"within the ±{100 * noise:.1f}% noise, but not shown within the {100 * MAX_TRADE:.0f}% a "
                    f"cheaper config may cost (it may be {100 * -_worst(runner_up, fastest):.1f}% slower"
                    + ("; longer trials, --trial-seconds, or a quieter machine would settle it" if noise > MIN_NOISE
                       else "") + ")")
        return (f"fastest measured; the next best ({runner_up.config.label()}) is "
                f"{100 * gap:.1f}% slower, beyond the ±{100 * noise:.1f}% noise")
    words = cheaper(_cost(chosen), _cost(fastest))
    lighter = _lighter(chosen, fastest) if chosen.config.threads and not fastest.config.threads else ""
    if settled:
        gap = 1 - (chosen.samples_per_s or 0.0) / (fastest.samples_per_s or 1.0)
        return (f"within noise of the fastest ({fastest.config.label()}: −{100 * gap:.1f}%, noise "
                f"±{100 * noise_between(chosen, fastest):.1f}%) and {words}{lighter}")
    return (f"within {100 * MAX_TRADE:.0f}% of the fastest ({fastest.config.label()}: "
            f"{_range(chosen, fastest)}) and {words}{lighter}")


def _range(trial: TrialResult, fastest: TrialResult) -> str:
    """``−0.5%, at worst −3.0% at the ±3.0% noise``: how much slower ``trial`` measured than ``fastest``, and the
    most its range allows."""
    gap = 1 - rate(trial) / rate(fastest)
    return (f"−{100 * gap:.1f}%, at worst −{100 * -_worst(trial, fastest):.1f}% at the "
            f"±{100 * noise_between(trial, fastest):.1f}% noise")
