"""The knob records: what every layer knows of a DataLoader knob, in one place. The loader's keyword arguments, a
config's label, JSON and sort order, the ``sweep`` options and the Python API's keywords, ``--current`` and
``--override``, a user's loader read back, the checks on given values, the order the search steps knobs in and
a knob's cost in a tie all loop over :data:`REGISTRY`. Pure data, standard library only (what ``tune`` tries of
a knob is its own decision: ``decide/tune/refine.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, overload

from dataprof.results.vocabulary import Framework, StartMethod, WorkerKind

LoaderConfig = Any
"""A :class:`~dataprof.results.knobs.LoaderConfig` (that module is built on this one, so it is not imported)."""
SearchSpace = Any
"""A :class:`~dataprof.results.space.SearchSpace`."""

FRAMEWORKS = tuple(framework.value for framework in Framework)
"""The loaders dataprof drives: ``torch.utils.data.DataLoader`` and ``paddle.io.DataLoader``."""
DEFAULT_PREFETCH_FACTORS = (2, 4)
"""``--prefetch-factor`` left out: the values the grid sweeps; adaptive tries values other than the DataLoader's
default only where a wait for a batch has a heavy tail (``prefetch_factor`` joins ``forced`` once given)."""
START_METHODS = tuple(method.value for method in StartMethod)
"""``--start-method`` values: how DataLoader workers start (``multiprocessing_context``)."""
WORKER_KINDS = tuple(kind.value for kind in WorkerKind)
"""How a loader's workers run: PyTorch's worker processes, or threads of one process."""


@dataclass(frozen=True)
class Knob:
    """One DataLoader knob, and what every layer needs to know of it. A plain knob (one that only sets a loader
    keyword) is a record here, a :class:`~dataprof.results.knobs.LoaderConfig` field, a
    :class:`~dataprof.results.space.SearchSpace` field and a ``SweepOptions`` field (``tests/results`` ties the
    three to these records), a test and its docs."""

    name: str
    """The loader's keyword argument, the :class:`LoaderConfig` field and the key in a trial's JSON ``config``."""
    frameworks: tuple[str, ...]
    flag: str
    """Its ``dataprof sweep`` option (the values to sweep, comma-separated); its Python API keyword is the
    flag's words joined by ``_`` (``--pin-memory``: ``pin_memory=``)."""
    values: str
    """How the option's text is read: ``on,off`` (booleans), ``ints`` or ``words`` (``results.text``)."""
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
    passed: Callable[[Any, SearchSpace], Any] = lambda value, space: value
    """The value a config holds for ``value`` in ``space``: None where the loader's default is meant."""
    stepped: bool = True
    """Tried one value at a time at the search's pick, where the space holds several (``persistent_workers``
    is not: the climb keeps its workers)."""
    choices: tuple[str, ...] = ()
    """The words it takes (``words`` knobs); a given value outside them is a UsageError."""
    minimum: int | None = None
    """The least value it takes (``ints`` knobs)."""
    ordered: bool = False
    """Given values are put in :attr:`choices`' order (a sweep of them runs in that order)."""
    evidence: bool = False
    """Tried by the adaptive search only where the measurements say it can help, unless the user gives it
    (then ``forced``); where the installed DataLoader lacks it, skipped."""
    step_rank: int = 99
    """Its turn among the knobs the adaptive search steps one value at a time at its pick (lower first)."""
    grid_rank: int = 99
    """Its place among the knobs the grid varies, slowest first (a tie: the registry's order)."""
    loader_default: Any = None
    """The value the DataLoader takes when the argument is not passed."""
    costs: bool = False
    """A value away from :attr:`loader_default` costs in a tie (one more thing changed from the loader's own)."""
    read: Callable[[Any], Any] | None = None
    """Its value as a config holds it, read off a user's live loader (None: ``getattr(loader, name)``)."""
    attribute: bool = False
    """The loader keeps it as an attribute of its own name: ``run --override`` checks it there at the first
    iteration (a script that set it back after construction)."""
    node: str | None = None
    """Where a ``torchdata.nodes`` pipeline holds it: ``Node.argument``, the node's constructor argument of that
    name (``ParallelMapper.in_order``); None: no place."""
    threads: bool = False
    """Thread workers take it (``worker_kind=thread``: the DataLoader's ``worker_method``, or the pipeline
    dataprof builds); a loader whose batches threads load is passed no knob but these."""
    reported: str | None = None
    """The field of a run's loader record (``LoaderRun``, a key of the run document's loader) that reports the
    value the loader had; None: a run does not report it."""

    @property
    def keyword_name(self) -> str:
        """The option's name as a Python keyword (``--pin-memory``: ``pin_memory``)."""
        return self.flag.lstrip("-").replace("-", "_")

    def read_off(self, loader: Any) -> Any:
        """Its value on ``loader`` (a live DataLoader), as a config holds it; None where it does not read, or reads
        as no value the knob holds (a subclass's own attribute of the name, of another kind)."""
        try:
            value = getattr(loader, self.name, None) if self.read is None else self.read(loader)
        except Exception:
            return None
        return value if value_fits(self.name, value) else None

    def changed(self, config: LoaderConfig) -> bool:
        """Whether ``config`` sets it away from the loader's own default (and it costs in a tie)."""
        value = config.value(self.name)
        return self.costs and value is not None and value != self.loader_default


def _with_workers(word: Callable[[LoaderConfig], str | None]) -> Callable[[LoaderConfig], str | None]:
    return lambda c: word(c) if c.num_workers > 0 else None


def _flag(value: Any) -> bool | None:
    """A loader's attribute as an on/off knob's value; None where it is no flag (a subclass's own attribute of the
    name, of another kind)."""
    return bool(value) if isinstance(value, int) else None


def _start_method(loader: Any) -> str | None:
    context = getattr(loader, "multiprocessing_context", None)
    return None if context is None else context if isinstance(context, str) else context.get_start_method()


class Registry(Sequence[Knob]):
    """The knob records, in order; every layer loops over this one object, so a record :meth:`added` (a knob a
    test registers) reaches them all at once."""

    def __init__(self, knobs: Sequence[Knob]) -> None:
        self._knobs = list(knobs)

    @overload
    def __getitem__(self, index: int) -> Knob: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Knob]: ...

    def __getitem__(self, index: int | slice) -> Knob | Sequence[Knob]:
        return self._knobs[index]

    def __len__(self) -> int:
        return len(self._knobs)

    def arguments(self, framework: str, workers: int) -> list[Knob]:
        """The knobs a DataLoader of ``framework`` with ``workers`` takes as arguments, in order (one that needs
        workers, only with workers)."""
        return [k for k in self._knobs
                if k.keyword and framework in k.frameworks and (workers > 0 or not k.needs_workers)]

    def idle(self, workers: int) -> set[str]:
        """The knobs that mean nothing to a loader with ``workers``: those that need workers, at none."""
        return set() if workers else {k.name for k in self._knobs if k.needs_workers}

    @contextmanager
    def added(self, knob: Knob) -> Iterator[Knob]:
        """``knob`` registered, last, while the block runs."""
        self._knobs.append(knob)
        try:
            yield knob
        finally:
            self._knobs.remove(knob)


REGISTRY = Registry((
    Knob("prefetch_factor", ("torch", "paddle"), "--prefetch-factor", "ints", "prefetch_factors", True,
         _with_workers(lambda c: None if c.prefetch_factor is None else f"pf{c.prefetch_factor}"),
         "prefetch_factor values (configs with workers only) [default: 2,4]. Adaptive tries a value other than 2 "
         "only when the wait for a batch has a heavy tail, unless given.", grid_rank=3, json_rank=2, flag_rank=0,
         held=2, tried=DEFAULT_PREFETCH_FACTORS, minimum=1, evidence=True, step_rank=3,
         loader_default=2, attribute=True, node="Prefetcher.prefetch_factor", threads=True,
         reported="prefetch_factor"),
    Knob("persistent_workers", ("torch", "paddle"), "--persistent-workers", "on,off", "persistent_workers", True,
         _with_workers(lambda c: None if c.threads else "persist" if c.persistent_workers else "respawn"),
         "persistent_workers values, e.g. on,off (configs with workers only).", grid_rank=4, json_rank=4, flag_rank=7,
         default="on", held=True, tried=(True,), stepped=False, loader_default=False,
         read=lambda loader: _flag(getattr(loader, "persistent_workers", getattr(loader, "_persistent_workers",
                                                                                  False))), attribute=True,
         reported="persistent_workers"),
    Knob("use_shared_memory", ("paddle",), "--use-shared-memory", "on,off", "use_shared_memory", True,
         lambda c: "no-shm" if c.use_shared_memory is False else None,
         "Paddle: use_shared_memory values [default: on,off] (configs with workers only).", grid_rank=2, json_rank=1,
         flag_rank=2, held=True, tried=(True, False), step_rank=1,
         loader_default=True, costs=True,
         read=lambda loader: _flag(getattr(loader, "use_shared_memory", True))),
    Knob("use_buffer_reader", ("paddle",), "--use-buffer-reader", "on,off", "use_buffer_reader", False,
         lambda c: "no-buf" if c.use_buffer_reader is False else None,
         "Paddle: use_buffer_reader values [default: on,off].", grid_rank=1, json_rank=3, flag_rank=3, held=True,
         tried=(True, False), step_rank=2, loader_default=True, costs=True,
         read=lambda loader: _flag(getattr(loader, "use_buffer_reader", True))),
    Knob("pin_memory", ("torch",), "--pin-memory", "on,off", "pin_memory", False,
         lambda c: "pin" if c.pin_memory else None,
         "PyTorch: pin_memory values [default: on,off]; swept only when a GPU is used.", grid_rank=0, json_rank=0,
         flag_rank=1, held=False, tried=(True, False), step_rank=0, loader_default=False,
         read=lambda loader: _flag(getattr(loader, "pin_memory", False)), attribute=True, threads=True,
         reported="pin_memory"),
    Knob("in_order", ("torch",), "--in-order", "on,off", "in_order", True,
         _with_workers(lambda c: "unordered" if c.in_order is False else None),
         "PyTorch ≥ 2.6: in_order values to sweep [default: off is tried when batches at num_workers=0 have "
         "stragglers]; off lets fast batches overtake a slow one (batch order changes, not the batches).",
         grid_rank=5, json_rank=5, flag_rank=4, metavar="ON,OFF", held=True, tried=(True,),
         passed=lambda value, space: None if value else False,  # in order: the default, not passed
         evidence=True, step_rank=4, loader_default=True, costs=True, node="ParallelMapper.in_order", threads=True,
         read=lambda loader: False if getattr(loader, "in_order", True) is False else None),
    Knob("multiprocessing_context", ("torch",), "--start-method", "words", "start_methods", True,
         _with_workers(lambda c: c.multiprocessing_context or None),
         "PyTorch: multiprocessing_context values, some of fork,forkserver,spawn [default: fork is tried under "
         "another default, the others after copy-on-read growth].", grid_rank=6, json_rank=6, flag_rank=5,
         metavar="METHODS",
         passed=lambda value, space: None if value == space.start_method else value,  # in effect: not passed
         choices=START_METHODS, evidence=True, step_rank=5, costs=True, read=_start_method,
         node="ParallelMapper.multiprocessing_context", reported="start_method"),
    Knob("reader_buffer_size", ("paddle",), "--reader-buffer-size", "ints", "reader_buffer_sizes", False,
         lambda c: None if c.reader_buffer_size is None else f"rb{c.reader_buffer_size}",
         "Paddle: reader_buffer_size values, the batches its buffer reader keeps ready [default: its own, 2].",
         json_rank=8, flag_rank=8, minimum=1, loader_default=2,
         read=lambda loader: None if getattr(loader, "reader_buffer_size", 2) == 2 else loader.reader_buffer_size),
    Knob("worker_kind", ("torch",), "--worker-kind", "words", "worker_kinds", True, lambda c: None,
         "PyTorch: process, thread or process,thread: the worker kinds to sweep at every count [default: "
         "processes, and threads where the evidence calls for them: samples that release the GIL, copy-on-read "
         "growth, /dev/shm or start-up limits, IPC at the CPU ceiling]. Threads need torchdata (or a DataLoader "
         "with worker_method).", json_rank=7, flag_rank=6, metavar="KINDS", keyword=False,
         held=WorkerKind.PROCESS.value, choices=WORKER_KINDS, ordered=True, node="ParallelMapper.method",
         reported="worker_kind",
         loader_default=WorkerKind.PROCESS.value),
))
"""The knobs, in the order a DataLoader call lists them (its keyword arguments, a label's words)."""


class _Keys(Mapping[str, tuple[str, ...]]):
    def __getitem__(self, framework: str) -> tuple[str, ...]:
        if framework not in FRAMEWORKS:
            raise KeyError(framework)
        return ("num_workers", *(k.name for k in sorted(REGISTRY, key=lambda k: k.json_rank)
                                 if k.keyword and framework in k.frameworks))

    def __iter__(self) -> Iterator[str]:
        return iter(FRAMEWORKS)

    def __len__(self) -> int:
        return len(FRAMEWORKS)


KNOBS: Mapping[str, tuple[str, ...]] = _Keys()
"""Each framework's swept DataLoader arguments, by their own names (the keys of a trial's JSON ``config``), as
the registry holds them now."""


def knob_names() -> frozenset[str]:
    """The name of every knob a loader's settings may hold: ``num_workers`` and the registry's, as it is now."""
    return frozenset(("num_workers", *(knob.name for knob in REGISTRY)))


def record_of(name: str) -> Knob:
    """The record of the knob ``name`` (KeyError for no knob)."""
    for record in REGISTRY:
        if record.name == name:
            return record
    raise KeyError(name)


def value_fits(name: str, value: Any) -> bool:
    """Whether ``value`` (read from JSON another process wrote) is one the knob ``name`` can hold: None, or of the
    record's kind (``on,off``: a bool; ``ints``: an int, at its minimum or above; ``words``: one of its choices, or
    a short word where it names none)."""
    if value is None:
        return True
    if name == "num_workers":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    record = record_of(name)
    if record.values == "on,off":
        return isinstance(value, bool)
    if record.values == "ints":
        return isinstance(value, int) and not isinstance(value, bool) and value >= (record.minimum or 0)
    return isinstance(value, str) and (value in record.choices if record.choices
                                       else len(value) <= 64 and value.replace("_", "").isalnum())


def evidence_knobs(framework: str) -> tuple[str, ...]:
    """The knobs of ``framework`` the search tries on evidence alone (unless given)."""
    return tuple(k.name for k in REGISTRY if k.evidence and framework in k.frameworks)
