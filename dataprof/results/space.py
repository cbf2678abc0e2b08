"""The values each knob may take in a sweep (:class:`SearchSpace`), built from the knob records
(``results.registry``): the configs a sweep measures are drawn from it. Pure data, standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataprof.results.codec import HIDDEN, named, written_if
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import REGISTRY, Knob
from dataprof.results.vocabulary import Framework, WorkerKind


def _swept(key: str) -> dict[str, Any]:
    """Field metadata: a knob's values, in the JSON where the space's framework has the knob."""
    return written_if(lambda space: any(knob.space_key == key and space.framework in knob.frameworks
                                        for knob in REGISTRY))


_TORCH = written_if(lambda space: space.framework != Framework.PADDLE)
"""Field metadata: in the JSON of a PyTorch sweep only."""


@dataclass(frozen=True)
class SearchSpace:
    """The values each knob may take; expanded by :func:`grid_configs`. Its JSON (among a sweep's ``settings``) is
    its fields in order: each knob of its framework's values, by the knob's ``space_key`` (its fields stand in the
    registry's order), and what the sweep found of the machine and the target."""

    workers: tuple[int, ...] = (0,)
    workers_reason: str = "given on the command line"
    """Why this worker range (shown in the report)."""
    prefetch_factors: tuple[int, ...] = field(default=(2,), metadata=_swept("prefetch_factors"))
    persistent_workers: tuple[bool, ...] = field(default=(True,), metadata=_swept("persistent_workers"))
    use_shared_memory: tuple[bool, ...] = field(default=(True,), metadata=_swept("use_shared_memory"))
    """Paddle only."""
    use_buffer_reader: tuple[bool, ...] = field(default=(True,), metadata=_swept("use_buffer_reader"))
    """Paddle only."""
    pin_memory: tuple[bool, ...] = field(default=(False,), metadata=_swept("pin_memory"))
    in_order: tuple[bool, ...] = field(default=(True,), metadata=_swept("in_order"))
    """PyTorch: ``in_order`` values (True: not passed, the default)."""
    start_methods: tuple[str, ...] = field(default=(), metadata=_swept("start_methods"))
    """PyTorch: ``multiprocessing_context`` values; empty: Python's default start method only."""
    reader_buffer_sizes: tuple[int, ...] = field(default=(), metadata=_swept("reader_buffer_sizes"))
    """Paddle: ``reader_buffer_size`` values; empty: not passed."""
    worker_kinds: tuple[str, ...] = field(default=(), metadata=_swept("worker_kinds"))
    """PyTorch: the worker kinds the user gave (``--worker-kind``), swept as given; empty: processes, and threads
    where the evidence calls for them."""
    skipped: tuple[str, ...] = field(default=(), metadata=named("skipped_knobs"))
    """Knobs the installed DataLoader does not accept: held at its default, not passed."""
    forced: tuple[str, ...] = field(default=(), metadata=named("forced_knobs", **_TORCH))
    """Knobs the user gave (``--prefetch-factor``, ``--in-order``, ``--start-method``): swept as given, never
    chosen by evidence."""
    start_method: str | None = field(default=None, metadata=_TORCH)
    """The start method in effect when none is passed (Python's default here)."""
    available_start_methods: tuple[str, ...] = field(default=(), metadata=_TORCH)
    """The start methods this platform offers."""
    thread_loader: str | None = field(default=None, metadata=_TORCH)
    """What builds a thread config's loader here (:data:`THREAD_LOADERS`); None: neither is installed, or
    threads cannot load this target."""
    gil_release: float | None = field(default=None, metadata=_TORCH)
    gil_release_high: float | None = field(default=None, metadata=_TORCH)
    """How much of a sample's ``__getitem__`` releases the GIL (0–1), by the probe, and the most one round read."""
    free_threaded: bool = field(default=False, metadata=_TORCH)
    """The interpreter runs without the GIL (``sys._is_gil_enabled()`` false): threads are always tried."""
    framework: str = field(default="torch", metadata=HIDDEN)
    """Its loaders' framework (the settings' own ``framework``)."""

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
