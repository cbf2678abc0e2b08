"""Threads beside worker processes: when the search tries them, how it climbs them, what it recommends, and the
report's notes. Synthetic trials: no loader runs here."""

from __future__ import annotations

from dataprof.decide.recommend import recommend
from dataprof.decide.search import AdaptiveStrategy, Budget
from dataprof.decide.threads import thread_notes, worker_kinds
from dataprof.results.codec import decode
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.sweep import Report
from dataprof.results.threads import ThreadCheck
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import ThreadVerdict
from tests.decide.test_search import run, space, trial


def cpu_bound_gil_free(config: LoaderConfig) -> TrialResult:
    """2 CPUs of C decoding that releases the GIL: processes and threads both flatten at 2 CPUs; threads weigh
    one process (100 MB) where each worker process adds 150 MB."""
    w = config.num_workers
    used = min(max(w, 1), 2)
    memory = 100_000_000 + (0 if config.threads else 150_000_000 * w)
    return trial(config, 330.0 * used * (0.98 if w > 2 else 1.0), cpu=96.0 * used, memory=memory)


def threaded(gil_release: float | None = None, **kwargs: object) -> SearchSpace:
    return space(2, thread_loader="torchdata.nodes", gil_release=gil_release, **kwargs)


def test_threads_are_tried_beside_the_pick_when_a_sample_releases_the_gil() -> None:
    strategy = AdaptiveStrategy(threaded(gil_release=0.9), Budget(usable_cpus=2))
    history, _ = run(strategy, cpu_bound_gil_free)
    threads = [t.config for t in history if t.config.threads]
    assert threads and threads[0] == LoaderConfig(2, prefetch_factor=2).as_threads()  # the pick's count first
    why = {t.config: strategy.propose(history[:n]).why for n, t in enumerate(history)}
    assert "a sample releases the GIL 90% of its time" in why[threads[0]]
    assert [c.num_workers for c in threads] == [2, 4]  # one doubling, which gained nothing: the climb stops
    chosen = recommend(history)
    assert chosen is not None and chosen.config == threads[0]  # within noise and lighter: threads
    assert "threads instead of worker processes" in chosen.reason and "peak PSS" in chosen.reason


def test_threads_within_noise_but_heavier_are_not_the_lighter_choice() -> None:
    process = trial(LoaderConfig(2, prefetch_factor=2, persistent_workers=True), 1000.0, memory=200_000_000)
    heavy = trial(LoaderConfig(2, prefetch_factor=2).as_threads(), 1010.0, memory=330_000_000)
    light = heavy.replaced(peak_memory_bytes=120_000_000)
    assert recommend([process, heavy]).config == process.config  # type: ignore[union-attr]
    assert recommend([process, light]).config == light.config  # type: ignore[union-attr]


def test_no_thread_is_tried_without_evidence_and_the_stop_says_why() -> None:
    history, why = run(AdaptiveStrategy(threaded(gil_release=0.05), Budget(usable_cpus=2)), cpu_bound_gil_free)
    assert not any(t.config.threads for t in history)
    assert "threads not tried: a sample releases the GIL 5% of its time, under the 20% threads need" in why


def test_the_thread_twin_is_tried_unless_the_gil_measure_clearly_says_no() -> None:
    for told, says in ((0.3, "a sample releases the GIL 30% of its time"),  # between the lines: noisy, tried
                       (None, "the GIL share was not measured")):
        strategy = AdaptiveStrategy(threaded(gil_release=told), Budget(usable_cpus=2))
        history, _ = run(strategy, cpu_bound_gil_free)
        first = next(n for n, t in enumerate(history) if t.config.threads)
        why = strategy.propose(history[:first]).why
        assert f"threads can load this dataset and nothing rules them out ({says}" in why
    # a round can have released 64% (its pair waited for CPUs): the lowest figure does not say the sample holds
    # the GIL, and is not told as its share
    spread = AdaptiveStrategy(threaded(gil_release=0.05, gil_release_high=0.64), Budget(usable_cpus=2))
    history, _ = run(spread, cpu_bound_gil_free)
    first = next(n for n, t in enumerate(history) if t.config.threads)
    assert "nothing rules them out (a sample's GIL share was not told (5–64%: other processes kept the measure's " \
        "threads waiting for a CPU))" in spread.propose(history[:first]).why


def test_copy_on_read_growth_calls_for_threads_even_when_samples_hold_the_gil() -> None:
    def growing(config: LoaderConfig) -> TrialResult:
        result = cpu_bound_gil_free(config)
        grown = 0 if config.threads or config.num_workers == 0 else 40_000_000 * config.num_workers
        return result.replaced(workers_inherited_growth_bytes=grown)

    strategy = AdaptiveStrategy(threaded(gil_release=0.05), Budget(usable_cpus=2))
    history, _ = run(strategy, growing)
    first = next(n for n, t in enumerate(history) if t.config.threads)
    assert "copy-on-read" in strategy.propose(history[:first]).why


def test_a_free_threaded_python_always_tries_threads() -> None:
    strategy = AdaptiveStrategy(threaded(gil_release=0.0, free_threaded=True), Budget(usable_cpus=2))
    history, _ = run(strategy, cpu_bound_gil_free)
    first = next(n for n, t in enumerate(history) if t.config.threads)
    assert "free-threaded" in strategy.propose(history[:first]).why


def test_threads_are_not_tried_where_the_user_or_the_machine_rules_them_out() -> None:
    for ruled_out in (threaded(0.9, worker_kinds=("process",)), space(2, gil_release=0.9)):  # no thread loader
        history, _ = run(AdaptiveStrategy(ruled_out, Budget(usable_cpus=2)), cpu_bound_gil_free)
        assert not any(t.config.threads for t in history)


def test_forced_threads_alone_climb_threads() -> None:
    history, why = run(AdaptiveStrategy(threaded(worker_kinds=("thread",)), Budget(usable_cpus=2), rules=False),
                       cpu_bound_gil_free)
    assert all(t.config.threads for t in history if t.config.num_workers)
    assert {t.config.num_workers for t in history} >= {0, 2, 4}
    assert "t2 → t4" in why


def test_threads_climb_while_each_doubling_gains() -> None:
    def latency(config: LoaderConfig) -> TrialResult:  # sleeps: threads scale as processes do, up to 32
        w = max(1, config.num_workers)
        return trial(config, 100.0 * min(w, 32), cpu=5.0)

    history, _ = run(AdaptiveStrategy(threaded(gil_release=1.0, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)),
                     latency)
    assert [t.config.num_workers for t in history if t.config.threads] == [8]  # the ladder's top: no doubling


def settings(**values: object) -> SweepSettings:
    """A PyTorch sweep's settings, as a document holds them, with ``values``."""
    return decode(SweepSettings, {"framework": "torch", **values, "target": "x:Y"})


def report(trials: tuple[TrialResult, ...], **values: object) -> Report:
    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2.13", device="cpu")
    return Report(target="x:Y", tool_version="0", environment=env,
                  settings=settings(**values), trials=trials,
                  dataset=DatasetInfo(kind="map", type_name="Y", length=100, init_s=0.0,
                                      thread_loader="torchdata.nodes"))


def test_worker_kinds_name_the_fastest_of_each_kind() -> None:
    process = cpu_bound_gil_free(LoaderConfig(2, prefetch_factor=2, persistent_workers=True))
    thread = cpu_bound_gil_free(LoaderConfig(2, prefetch_factor=2).as_threads())
    kinds = worker_kinds(report((cpu_bound_gil_free(LoaderConfig(0)), process, thread)))
    assert kinds is not None and kinds.thread == thread.config and kinds.process == process.config
    assert kinds.thread_peak_memory_bytes < kinds.process_peak_memory_bytes  # type: ignore[operator]
    assert worker_kinds(report((process,))) is None


def test_notes_say_why_threads_were_not_measured() -> None:
    stream = DatasetInfo(kind="iterable", type_name="S", length=None, init_s=0.0, thread_loader="torchdata.nodes")
    assert "IterableDataset" in thread_notes(settings(framework="torch"), stream, None)[0]
    absent = DatasetInfo(kind="map", type_name="D", length=9, init_s=0.0)
    assert "pip install torchdata" in thread_notes(settings(worker_kinds=("thread",)), absent, None)[0]
    assert thread_notes(settings(), absent, None) == ()  # nothing asked, nothing installed: quiet
    random = ThreadCheck(ThreadVerdict.UNCHECKED, 4, "the same indices fetched twice gave other samples")
    assert "not checked" in thread_notes(settings(), absent, random)[0]
    unsafe = ThreadCheck(ThreadVerdict.DIFFERS, 4, "batch 1 differs")
    assert unsafe.failure() is not None and "thread-safe" in unsafe.failure()  # type: ignore[operator]


def test_on_a_recorded_sweep_the_search_asks_for_threads_on_its_evidence_and_they_win() -> None:
    from tests.conftest import decided

    won = decided("threads_win")  # a sleep per sample: the probe measured the GIL released 98% of the time
    space = won.settings.space
    assert space.thread_loader == "torchdata.nodes" and (space.gil_release or 0) > 0.9
    processes = [t for t in won.trials if not t.config.threads]
    proposal = AdaptiveStrategy(space, Budget(usable_cpus=2), rules=False).propose(processes)
    assert proposal.config is not None and proposal.config.threads
    assert "releases the GIL" in proposal.why
    assert won.best is not None and won.best.config.threads
    assert won.worker_kinds is not None and won.worker_kinds.winner == "thread"


def test_on_a_recorded_sweep_of_pure_python_processes_win() -> None:
    from tests.conftest import decided

    lost = decided("threads_lose")
    assert lost.best is not None and not lost.best.config.threads and lost.best.config.num_workers == 2
    assert lost.worker_kinds is not None and lost.worker_kinds.winner == "process"
    assert lost.worker_kinds.thread_samples_per_s < lost.worker_kinds.process_samples_per_s / 2
