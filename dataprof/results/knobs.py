"""The knobs of a loader: one configuration a trial measures (:class:`LoaderConfig`), the values each knob may
take in a sweep (:class:`SearchSpace`), and the frameworks' and knobs' constants. Pure data, standard library
only: nothing here reads the machine."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from dataprof.results.vocabulary import StartMethod, WorkerKind

FRAMEWORKS = ("torch", "paddle")
"""The loaders dataprof drives: ``torch.utils.data.DataLoader`` and ``paddle.io.DataLoader``."""

EVIDENCE_KNOBS = ("in_order", "multiprocessing_context")
"""PyTorch's knobs tried where the measurements say they can help (or where the user forces them), when the
installed DataLoader has them."""
WORKER_KINDS = tuple(kind.value for kind in WorkerKind)
"""How a loader's workers run: PyTorch's worker processes, or threads of one process (:data:`THREAD_LOADERS`)."""
THREAD_LOADERS = ("torch", "torchdata.nodes")
"""What builds a thread config's loader, first found first: the DataLoader's own, else ``torchdata.nodes``."""
TORCH_THREAD_ARGUMENT = "worker_method"  # pytorch#161044: DataLoader(..., worker_method="thread")
DEFAULT_PREFETCH_FACTORS = (2, 4)
"""``--prefetch-factor`` left out: the values the grid sweeps; adaptive tries values other than the DataLoader's
default only where a wait for a batch has a heavy tail (``prefetch_factor`` joins ``forced`` once given)."""
DEFAULT_BATCH_SIZE = 64
"""The batch size of a Dataset target when ``--batch-size`` is not given (a DataLoader target keeps its own)."""


@total_ordering
@dataclass(frozen=True)
class LoaderConfig:
    """The DataLoader settings one trial measures (a value of None is not passed to the loader)."""

    num_workers: int
    """Worker processes; 0 loads in the main process (the default of both frameworks)."""
    pin_memory: bool = False
    """PyTorch: page-locked host batches; only meaningful with an accelerator."""
    prefetch_factor: int | None = None
    """Batches buffered per worker; None when ``num_workers == 0``."""
    persistent_workers: bool | None = False
    """Keep workers alive across epochs; False when ``num_workers == 0``; None where the DataLoader lacks it."""
    use_shared_memory: bool | None = None
    """Paddle: workers hand batches over through /dev/shm (True) or pickled through a pipe; None at w0."""
    use_buffer_reader: bool | None = None
    """Paddle: a main-process thread reads batches ahead into a buffer."""
    framework: str = "torch"
    """Which DataLoader these settings are for (``torch`` or ``paddle``)."""
    in_order: bool | None = None
    """PyTorch ≥ 2.6: False lets ready batches overtake a slow one (the order changes, not the batches); None
    is not passed (in order, the default); needs workers."""
    multiprocessing_context: str | None = None
    """PyTorch: how workers start (``fork``, ``forkserver``, ``spawn``); None is not passed (Python's default
    start method); needs workers."""
    reader_buffer_size: int | None = None
    """Paddle: batches the buffer reader keeps ready; None is not passed (the loader's default, 2)."""
    worker_kind: str = "process"
    """PyTorch: ``process`` (DataLoader's worker processes) or ``thread`` (``num_workers`` threads of the one
    process, :data:`THREAD_LOADERS`); a thread config has no ``persistent_workers`` nor start method."""

    def to_dict(self) -> dict[str, Any]:
        """The framework's own argument names and values (``framework`` itself is in the environment), and
        ``worker_kind``."""
        return {**{name: getattr(self, name) for name in KNOBS[self.framework]}, "worker_kind": self.worker_kind}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderConfig:
        """Read :meth:`to_dict` back; Paddle's keys say the config is Paddle's (its null knobs stay None)."""
        paddle = "use_shared_memory" in data or "use_buffer_reader" in data
        persistent = data.get("persistent_workers")
        threads = data.get("worker_kind") == WorkerKind.THREAD
        knobs: dict[str, Any] = {knob.name: data.get(knob.name) for knob in REGISTRY if knob.keyword}
        return cls(**{**knobs, "num_workers": int(data["num_workers"]), "pin_memory": bool(data.get("pin_memory")),
                      "persistent_workers": persistent if paddle or threads else bool(persistent),
                      "framework": "paddle" if paddle else "torch",
                      "worker_kind": data.get("worker_kind") or WorkerKind.PROCESS.value})

    def __lt__(self, other: object) -> bool:
        """Framework, then fewer workers, then the knobs (a knob not passed sorts first)."""
        if not isinstance(other, LoaderConfig):
            return NotImplemented
        return self._key() < other._key()

    def _key(self) -> tuple[Any, ...]:
        return (self.framework, self.num_workers, self.pin_memory, self.prefetch_factor or 0,
                -1 if self.persistent_workers is None else int(self.persistent_workers),
                -1 if self.use_shared_memory is None else int(self.use_shared_memory),
                -1 if self.use_buffer_reader is None else int(self.use_buffer_reader),
                self.in_order is False, self.multiprocessing_context or "", self.worker_kind,
                self.reader_buffer_size or 0)

    @property
    def threads(self) -> bool:
        """Whether the workers are threads of the one process."""
        return self.worker_kind == WorkerKind.THREAD and self.num_workers > 0

    def as_threads(self) -> LoaderConfig:
        """The same loader over threads: the same count, buffer, pinning and order; no persistence nor start method."""
        return dataclasses.replace(self, worker_kind="thread", persistent_workers=None, multiprocessing_context=None)

    @property
    def short_label(self) -> str:
        """``w4`` (worker processes) or ``t8`` (threads): the label's first word."""
        return f"t{self.num_workers}" if self.threads else f"w{self.num_workers}"

    @property
    def prefetched_batches(self) -> int:
        """Batches kept ready ahead of the loop: ``prefetch_factor`` per worker (a thread loader's Prefetcher too)."""
        return max(1, (self.prefetch_factor or 2) * max(1, self.num_workers))

    @property
    def is_baseline(self) -> bool:
        """The framework's default loader: no workers, no pinning, Paddle's buffer reader as by default."""
        return self.num_workers == 0 and not self.pin_memory and self.use_buffer_reader is not False

    def label(self) -> str:
        """Short human label, e.g. ``w4 pf2 persist pin`` (Paddle: ``no-shm``, ``no-buf`` when turned off;
        ``unordered`` for ``in_order=False``, the start method when one is given); threads: ``t8 pf2``. Each
        knob's word is its record's (:data:`REGISTRY`)."""
        return " ".join([self.short_label, *(word for knob in REGISTRY if (word := knob.token(self)))])

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the framework's DataLoader, in :data:`REGISTRY`'s order (arguments left None are
        not passed; one that needs workers, only with workers); a thread config's ``worker_method`` is the
        backend's to add, where the DataLoader has it."""
        kwargs: dict[str, Any] = {"num_workers": self.num_workers}
        for knob in REGISTRY:
            if knob.keyword and self.framework in knob.frameworks and (self.num_workers > 0 or not knob.needs_workers):
                kwargs[knob.name] = getattr(self, knob.name)
        return {k: v for k, v in kwargs.items() if v is not None}


def baseline(framework: str) -> LoaderConfig:
    """The framework's default loader (``num_workers=0``), measured in every sweep as the reference."""
    if framework == "paddle":
        return LoaderConfig(0, use_buffer_reader=True, framework="paddle")
    return LoaderConfig(0)


@dataclass(frozen=True)
class Knob:
    """One DataLoader knob dataprof sweeps, and what every layer needs to know of it. The loader's keyword
    arguments, a config's label and JSON, the ``sweep`` options and the Python API's keywords derive from these
    records: a plain knob (one that only sets a loader keyword) is a record, a :class:`LoaderConfig` field, a
    :class:`SearchSpace` field, a test and its docs."""

    name: str
    """The loader's keyword argument, the :class:`LoaderConfig` field and the key in a trial's JSON ``config``."""
    frameworks: tuple[str, ...]
    flag: str
    """Its ``dataprof sweep`` option (the values to sweep, comma-separated); its Python API keyword is the
    flag's words joined by ``_`` (``--pin-memory``: ``pin_memory=``)."""
    values: str
    """How the option's text is read: ``on,off`` (booleans), ``ints`` or ``words``."""
    space_key: str
    """The values to sweep: the :class:`SearchSpace` and ``SweepOptions`` field, a key of the JSON ``settings``."""
    needs_workers: bool
    """Passed to the loader only with workers (``num_workers > 0``)."""
    token: Callable[[LoaderConfig], str | None]
    """Its word in a config's label (``pf2``, ``pin``), None where it adds none."""
    help: str
    """The option's ``--help`` text."""
    json_rank: int
    """Where it stands in a trial's JSON ``config`` after ``num_workers`` (the documents' order, kept)."""
    flag_rank: int
    """Where its option stands among the knobs' in ``--help``."""
    metavar: str | None = None
    default: str | None = None
    """The option's default text (``on``); None: not given, the search's own values."""
    keyword: bool = True
    """False for a knob that picks the loader rather than setting one of its arguments (the worker kind)."""
    held: Any = None
    """A config's value when none is given for it (and the one value of a space that does not sweep it)."""
    tried: tuple[Any, ...] = ()
    """The values swept when its option is not given (empty: none but :attr:`held`, or the knob's own search's)."""
    preferred: Callable[[SearchSpace], Any] = lambda space: None
    """The value the worker climb takes when the space holds it (else the space's least, or first)."""
    passed: Callable[[Any, SearchSpace], Any] = lambda value, space: value
    """The value a config holds for ``value`` in ``space``: None where the loader's default is meant."""
    tuned: bool = True
    """Tried one value at a time at the search's pick, where the space holds several (``persistent_workers``
    is not: the climb keeps its workers)."""

    @property
    def keyword_name(self) -> str:
        """The option's name as a Python keyword (``--pin-memory``: ``pin_memory``)."""
        return self.flag.lstrip("-").replace("-", "_")


def _with_workers(word: Callable[[LoaderConfig], str | None]) -> Callable[[LoaderConfig], str | None]:
    return lambda c: word(c) if c.num_workers > 0 else None


REGISTRY: tuple[Knob, ...] = (
    Knob("prefetch_factor", ("torch", "paddle"), "--prefetch-factor", "ints", "prefetch_factors", True,
         _with_workers(lambda c: None if c.prefetch_factor is None else f"pf{c.prefetch_factor}"),
         "prefetch_factor values (configs with workers only) [default: 2,4]. Adaptive tries a value other than 2 "
         "only when the wait for a batch has a heavy tail, unless given.", json_rank=2, flag_rank=0,
         held=2, tried=DEFAULT_PREFETCH_FACTORS, preferred=lambda space: 2),
    Knob("persistent_workers", ("torch", "paddle"), "--persistent-workers", "on,off", "persistent_workers", True,
         _with_workers(lambda c: None if c.threads else "persist" if c.persistent_workers else "respawn"),
         "persistent_workers values, e.g. on,off (configs with workers only).", json_rank=4, flag_rank=7,
         default="on", held=True, tried=(True,), preferred=lambda space: True, tuned=False),
    Knob("use_shared_memory", ("paddle",), "--use-shared-memory", "on,off", "use_shared_memory", True,
         lambda c: "no-shm" if c.use_shared_memory is False else None,
         "Paddle: use_shared_memory values [default: on,off] (configs with workers only).", json_rank=1, flag_rank=2,
         held=True, tried=(True, False), preferred=lambda space: True),
    Knob("use_buffer_reader", ("paddle",), "--use-buffer-reader", "on,off", "use_buffer_reader", False,
         lambda c: "no-buf" if c.use_buffer_reader is False else None,
         "Paddle: use_buffer_reader values [default: on,off].", json_rank=3, flag_rank=3, held=True,
         tried=(True, False), preferred=lambda space: True),
    Knob("pin_memory", ("torch",), "--pin-memory", "on,off", "pin_memory", False,
         lambda c: "pin" if c.pin_memory else None,
         "PyTorch: pin_memory values [default: on,off]; swept only when a GPU is used.", json_rank=0, flag_rank=1,
         held=False, tried=(True, False), preferred=lambda space: True),
    Knob("in_order", ("torch",), "--in-order", "on,off", "in_order", True,
         _with_workers(lambda c: "unordered" if c.in_order is False else None),
         "PyTorch ≥ 2.6: in_order values to sweep [default: off is tried when batches at num_workers=0 have "
         "stragglers]; off lets fast batches overtake a slow one (batch order changes, not the batches).",
         json_rank=5, flag_rank=4, metavar="ON,OFF", held=True, tried=(True,), preferred=lambda space: True,
         passed=lambda value, space: None if value else False),  # in order: the default, not passed
    Knob("multiprocessing_context", ("torch",), "--start-method", "words", "start_methods", True,
         _with_workers(lambda c: c.multiprocessing_context or None),
         "PyTorch: multiprocessing_context values, some of fork,forkserver,spawn [default: fork is tried under "
         "another default, the others after copy-on-read growth].", json_rank=6, flag_rank=5, metavar="METHODS",
         preferred=lambda space: space.start_method,
         passed=lambda value, space: None if value == space.start_method else value),  # in effect: not passed
    Knob("reader_buffer_size", ("paddle",), "--reader-buffer-size", "ints", "reader_buffer_sizes", False,
         lambda c: None if c.reader_buffer_size is None else f"rb{c.reader_buffer_size}",
         "Paddle: reader_buffer_size values, the batches its buffer reader keeps ready [default: its own, 2].",
         json_rank=8, flag_rank=8),
    Knob("worker_kind", ("torch",), "--worker-kind", "words", "worker_kinds", True, lambda c: None,
         "PyTorch: process, thread or process,thread: the worker kinds to sweep at every count [default: "
         "processes, and threads where the evidence calls for them: samples that release the GIL, copy-on-read "
         "growth, /dev/shm or start-up limits, IPC at the CPU ceiling]. Threads need torchdata (or a DataLoader "
         "with worker_method).", json_rank=7, flag_rank=6, metavar="KINDS", keyword=False,
         held=WorkerKind.PROCESS.value),
)
"""The knobs, in the order a DataLoader call lists them (its keyword arguments, a label's words)."""

KNOBS = {framework: ("num_workers", *(k.name for k in sorted(REGISTRY, key=lambda k: k.json_rank)
                                      if k.keyword and framework in k.frameworks)) for framework in FRAMEWORKS}
"""Each framework's swept DataLoader arguments, by their own names (the keys of a trial's JSON ``config``)."""


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
        for knob in REGISTRY:
            if not knob.keyword or self.framework not in knob.frameworks or (knob.needs_workers and workers == 0):
                continue
            value = values.get(knob.name, knob.held)
            given[knob.name] = None if knob.name in self.skipped else knob.passed(value, self)
        return LoaderConfig(workers, framework=self.framework, **given)

    def values_of(self, knob: Knob) -> tuple[Any, ...]:
        """The values the space sweeps of ``knob`` (its record's ``space_key`` field)."""
        return tuple(getattr(self, knob.space_key))

    def default_config(self, workers: int) -> LoaderConfig:
        """The config the worker climb uses: each knob at the value its record prefers, where the space holds it
        (else its least, or first)."""
        chosen: dict[str, Any] = {}
        for knob in REGISTRY:
            values, preferred = self.values_of(knob), knob.preferred(self)
            chosen[knob.name] = preferred if preferred in values or not values else \
                min(values) if knob.values == "ints" else values[0]
        return self.config(workers, thread=self.only_threads, **chosen)

    def to_dict(self) -> dict[str, Any]:
        """The space as the JSON ``settings`` hold it: each knob of its framework's values, by the knob's
        ``space_key`` (:data:`REGISTRY`), and what the sweep found of the machine and the target."""
        data: dict[str, Any] = {"workers": list(self.workers), "workers_reason": self.workers_reason}
        data.update({knob.space_key: list(getattr(self, knob.space_key)) for knob in REGISTRY
                     if self.framework in knob.frameworks})
        data["skipped_knobs"] = list(self.skipped)
        if self.framework != "paddle":
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
            **{knob.space_key: tuple(settings.get(knob.space_key) or defaults[knob.space_key]) for knob in REGISTRY},
        )

    def tuned_knobs(self) -> tuple[tuple[str, tuple[object, ...]], ...]:
        """The knobs tried one at a time at the best worker count, and their values as a config holds them: each
        of this framework's knobs its record tries two values of (pinning, Paddle's shared memory and buffer
        reader, a plain knob's), in :data:`TUNE_ORDER`; the knobs tried on evidence (``prefetch_factor``,
        ``in_order``, the start method) only when the user gave them."""
        evidence = ("prefetch_factor", *EVIDENCE_KNOBS)
        knobs = sorted((k for k in REGISTRY if k.keyword and self.framework in k.frameworks),
                       key=lambda k: TUNE_ORDER.index(k.name) if k.name in TUNE_ORDER else len(TUNE_ORDER))
        return tuple((knob.name, tuple(knob.passed(value, self) for value in self.values_of(knob)))
                     for knob in knobs
                     if (knob.name in self.forced if knob.name in evidence
                         else knob.tuned and (len(knob.tried) > 1 or len(self.values_of(knob)) > 1)))


TUNE_ORDER = ("pin_memory", "use_shared_memory", "use_buffer_reader", "prefetch_factor", "in_order",
              "multiprocessing_context")
"""The order the adaptive search tunes knobs in at its pick (a knob not named here after these)."""


START_METHODS = tuple(method.value for method in StartMethod)
"""``--start-method`` values: how DataLoader workers start (``multiprocessing_context``)."""
