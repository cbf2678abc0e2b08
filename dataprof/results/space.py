"""The values each knob may take in a sweep (:class:`SearchSpace`), built from the knob records
(``results.registry``): the configs a sweep measures are drawn from it. Pure data, standard library only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import REGISTRY, Knob
from dataprof.results.vocabulary import Framework, WorkerKind


@dataclass(frozen=True)
class SearchSpace:
    """The values each knob may take; expanded by :func:`grid_configs`."""

    workers: tuple[int, ...]
    prefetch_factors: tuple[int, ...] = (2,)
    pin_memory: tuple[bool, ...] = (False,)
    persistent_workers: tuple[bool, ...] = (True,)
    workers_reason: str = "given on the command line"
    """Why this worker range (shown in the report)."""
    use_shared_memory: tuple[bool, ...] = (True,)
    """Paddle only."""
    use_buffer_reader: tuple[bool, ...] = (True,)
    """Paddle only."""
    framework: str = "torch"
    skipped: tuple[str, ...] = ()
    """Knobs the installed DataLoader does not accept: held at its default, not passed."""
    in_order: tuple[bool, ...] = (True,)
    """PyTorch: ``in_order`` values (True: not passed, the default)."""
    reader_buffer_sizes: tuple[int, ...] = ()
    """Paddle: ``reader_buffer_size`` values; empty: not passed."""
    start_methods: tuple[str, ...] = ()
    """PyTorch: ``multiprocessing_context`` values; empty: Python's default start method only."""
    forced: tuple[str, ...] = ()
    """Knobs the user gave (``--prefetch-factor``, ``--in-order``, ``--start-method``): swept as given, never
    chosen by evidence."""
    start_method: str | None = None
    """The start method in effect when none is passed (Python's default here)."""
    available_start_methods: tuple[str, ...] = ()
    """The start methods this platform offers."""
    worker_kinds: tuple[str, ...] = ()
    """PyTorch: the worker kinds the user gave (``--worker-kind``), swept as given; empty: processes, and threads
    where the evidence calls for them."""
    thread_loader: str | None = None
    """What builds a thread config's loader here (:data:`THREAD_LOADERS`); None: neither is installed, or
    threads cannot load this target."""
    gil_release: float | None = None
    gil_release_high: float | None = None
    """How much of a sample's ``__getitem__`` releases the GIL (0–1), by the probe, and the most one round read."""
    free_threaded: bool = False
    """The interpreter runs without the GIL (``sys._is_gil_enabled()`` false): threads are always tried."""

    @property
    def only_threads(self) -> bool:
        """The user asked for thread workers alone: the climb climbs threads."""
        return self.worker_kinds == (WorkerKind.THREAD,)

    def config(self, workers: int, *, thread: bool = False, **values: Any) -> LoaderConfig:
        """A config of this framework with ``values`` by knob name (a knob not given at its record's ``held``):
        a knob of another framework, or that needs workers at ``workers == 0``, at the config's default; one
        the installed loader lacks (``skipped``), not passed; ``thread``: over threads
        (:meth:`LoaderConfig.as_threads`)."""
        if thread and workers > 0:
            return self.config(workers, **values).as_threads()
        given: dict[str, Any] = {}
        for knob in REGISTRY.arguments(self.framework, workers):
            value = values.get(knob.name, knob.held)
            given[knob.name] = None if knob.name in self.skipped else knob.passed(value, self)
        return LoaderConfig.of(workers, framework=self.framework, **given)

    def values_of(self, knob: Knob) -> tuple[Any, ...]:
        """The values the space sweeps of ``knob`` (its record's ``space_key`` field)."""
        return tuple(getattr(self, knob.space_key, ()))

    def to_dict(self) -> dict[str, Any]:
        """The space as the JSON ``settings`` hold it: each knob of its framework's values, by the knob's
        ``space_key`` (:data:`REGISTRY`), and what the sweep found of the machine and the target."""
        data: dict[str, Any] = {"workers": list(self.workers), "workers_reason": self.workers_reason}
        data.update({knob.space_key: list(self.values_of(knob)) for knob in REGISTRY
                     if self.framework in knob.frameworks})
        data["skipped_knobs"] = list(self.skipped)
        if self.framework != Framework.PADDLE:
            data.update(forced_knobs=list(self.forced), start_method=self.start_method,
                        available_start_methods=list(self.available_start_methods), thread_loader=self.thread_loader,
                        gil_release=self.gil_release, gil_release_high=self.gil_release_high,
                        free_threaded=self.free_threaded)
        return data

    @classmethod
    def from_dict(cls, settings: dict[str, Any]) -> SearchSpace:
        """Read :meth:`to_dict` back from a saved run's ``settings`` (absent knobs at their defaults)."""
        defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(cls)}
        return cls(
            workers=tuple(settings.get("workers") or (0,)),
            workers_reason=settings.get("workers_reason") or "given on the command line",
            framework=settings.get("framework", "torch"),
            skipped=tuple(settings.get("skipped_knobs") or ()),
            forced=tuple(settings.get("forced_knobs") or ()),
            start_method=settings.get("start_method"),
            available_start_methods=tuple(settings.get("available_start_methods") or ()),
            thread_loader=settings.get("thread_loader"),
            gil_release=settings.get("gil_release"),
            gil_release_high=settings.get("gil_release_high"),
            free_threaded=bool(settings.get("free_threaded")),
            **{knob.space_key: tuple(settings.get(knob.space_key) or defaults[knob.space_key]) for knob in REGISTRY
               if knob.space_key in defaults},
        )

    def stepped_knobs(self) -> tuple[tuple[str, tuple[object, ...]], ...]:
        """The knobs tried one at a time at the best worker count, and their values as a config holds them: each
        of this framework's knobs its record tries two values of (pinning, Paddle's shared memory and buffer
        reader, a plain knob's), in their records' ``step_rank``; the knobs tried on evidence (``prefetch_factor``,
        ``in_order``, the start method) only when the user gave them."""
        knobs = sorted((k for k in REGISTRY if k.keyword and self.framework in k.frameworks),
                       key=lambda k: k.step_rank)
        return tuple((knob.name, tuple(knob.passed(value, self) for value in self.values_of(knob)))
                     for knob in knobs
                     if (knob.name in self.forced if knob.evidence
                         else knob.stepped and (len(knob.tried) > 1 or len(self.values_of(knob)) > 1)))
