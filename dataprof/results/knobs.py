"""The knobs of a loader: one configuration a trial measures (:class:`LoaderConfig`), the values each knob may
take in a sweep (:class:`SearchSpace`), and some knobs' values (:class:`KnobValues`: a script's settings, the
changes a run of ``run`` or ``tune`` makes on them), all built from the knob records (``results.registry``). Pure
data, standard library only: nothing here reads the machine."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from dataprof.results.registry import KNOBS, REGISTRY, knob_names, record_of
from dataprof.results.vocabulary import Framework, WorkerKind

THREAD_LOADERS = ("torch", "torchdata.nodes")
"""What builds a thread config's loader, first found first: the DataLoader's own, else ``torchdata.nodes``."""
TORCH_THREAD_ARGUMENT = "worker_method"  # pytorch#161044: DataLoader(..., worker_method="thread")
DEFAULT_BATCH_SIZE = 64
"""The batch size of a Dataset target when ``--batch-size`` is not given (a DataLoader target keeps its own)."""


class KnobValues(Mapping[str, Any]):
    """Some knobs of a loader with their values, by their DataLoader names: a script's settings as a run read them,
    or the changes a run makes on top of them (``--override``, a tune run's config). Only knobs the records know
    (``num_workers`` and :data:`REGISTRY`'s): any other name is a ValueError. ``a | b`` is ``a`` with ``b``'s
    values set on top; the JSON form is the plain object, in the order the values were given."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None, **more: Any) -> None:
        given = {**(values or {}), **more}
        unknown = sorted(set(given) - knob_names())
        if unknown:
            raise ValueError(f"no loader knob named {', '.join(unknown)} (knobs: {', '.join(sorted(knob_names()))})")
        self._values: dict[str, Any] = given

    @classmethod
    def read(cls, data: Mapping[str, Any] | None) -> KnobValues:
        """A JSON object's knobs: those the records know (a newer document's other knobs left out)."""
        known = knob_names()
        return cls({k: v for k, v in (data or {}).items() if k in known})

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __or__(self, other: Mapping[str, Any]) -> KnobValues:
        return KnobValues({**self._values, **other})

    def __repr__(self) -> str:
        return f"KnobValues({self._values!r})"

    def apart_from(self, settings: Mapping[str, Any]) -> KnobValues:
        """These values less those ``settings`` has already (the changes they make on it; a knob ``settings``
        lacks is None there)."""
        return KnobValues({k: v for k, v in self._values.items() if settings.get(k) != v})

    @property
    def workers(self) -> int:
        """``num_workers`` (0 when unset or None)."""
        return int(self._values.get("num_workers") or 0)

    def value(self, name: str) -> Any:
        """The value of the knob ``name`` (None: not set), as :meth:`LoaderConfig.value` reads a config's."""
        return self._values.get(name)

    def in_effect(self, name: str) -> Any:
        """The value of the knob ``name`` the loader has: this one, else the loader's own default
        (``Knob.loader_default``; 0 workers)."""
        value = self._values.get(name)
        if value is not None:
            return value
        return 0 if name == "num_workers" else record_of(name).loader_default

    @property
    def threads(self) -> bool:
        """Whether its workers are threads (``worker_kind=thread``), as a :class:`LoaderConfig`'s ``threads``."""
        return self._values.get("worker_kind") == WorkerKind.THREAD


def knob_words(values: Mapping[str, Any]) -> str:
    """Knobs' values as a DataLoader call sets them (``num_workers=2, multiprocessing_context='fork'``), in its
    order (``num_workers``, then :data:`REGISTRY`'s); empty for none."""
    order = ["num_workers", *(knob.name for knob in REGISTRY)]
    ranked = sorted(values, key=lambda name: order.index(name) if name in order else len(order))
    return ", ".join(f"{name}={values[name]!r}" for name in ranked)


def changes_label(changes: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """What a run changes on a script's loader (:func:`knob_words`; ``as the script has it`` for nothing), each
    node's own changes after them (``num_workers=2; node 1: num_workers=1``)."""
    return "; ".join([knob_words(changes) or "as the script has it",
                      *(f"node {node}: {knob_words(own)}" for node, own in sorted((nodes or {}).items()))])


def checked_knobs(record: Any, name: str) -> None:
    """The field ``name`` of the frozen dataclass ``record`` made :class:`KnobValues` (from a plain mapping, as a
    caller may give it): each record that holds knobs' values holds them checked."""
    value = getattr(record, name)
    if not isinstance(value, KnobValues):
        object.__setattr__(record, name, KnobValues(value))


DEFAULT_PREFETCH_FACTOR = 2
"""The batches each worker keeps ready where ``prefetch_factor`` is not given (torch's and Paddle's default)."""


def warmup_batches(num_workers: int, prefetch_factor: int | None) -> int:
    """Iterations to drain before the window opens.

    Workers pre-buffer ``num_workers × prefetch_factor`` batches; draining them
    plus one more round of every worker means the window sees the pipeline's
    production rate, not its buffer.
    """
    if num_workers == 0:
        return 2
    return num_workers * (prefetch_factor or DEFAULT_PREFETCH_FACTOR) + num_workers


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
    others: tuple[tuple[str, Any], ...] = ()
    """The values of knobs with no field of their own (a record registered beside the built-in ones), by name;
    read with :meth:`value`."""

    @classmethod
    def of(cls, num_workers: int, **values: Any) -> LoaderConfig:
        """A config with ``values`` by knob name: a knob with a field of its own in it, any other in
        :attr:`others` (a value of None is not passed, so not kept)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        others = tuple(sorted((k, v) for k, v in values.items() if k not in fields and v is not None))
        return cls(num_workers, **{k: v for k, v in values.items() if k in fields}, others=others)

    def value(self, name: str) -> Any:
        """The value of the knob ``name`` (None: not passed)."""
        if name in self.__dataclass_fields__:
            return getattr(self, name)
        return dict(self.others).get(name)

    def with_value(self, name: str, value: Any) -> LoaderConfig:
        """This config with the knob ``name`` at ``value``: its field, or its place in :attr:`others` (a knob with
        no field of its own; None drops it there)."""
        if name in self.__dataclass_fields__:
            return dataclasses.replace(self, **{name: value})
        others = {**dict(self.others), name: value}
        return dataclasses.replace(self, others=tuple(sorted((k, v) for k, v in others.items() if v is not None)))

    def to_dict(self) -> dict[str, Any]:
        """The framework's own argument names and values (``framework`` itself is in the environment), and
        ``worker_kind``."""
        return {name: self.value(name) for name in self.names()}

    def names(self) -> tuple[str, ...]:
        """The names of its knobs, in its JSON's order: its framework's arguments (:data:`KNOBS`), then
        ``worker_kind``."""
        return (*KNOBS[self.framework], "worker_kind")

    def changed_from(self, other: LoaderConfig) -> tuple[str, ...]:
        """The knobs whose values differ from ``other``'s, in :meth:`names`' order (a knob not passed differs from
        one passed: ``prefetch_factor=None`` is what a loader with no workers needs)."""
        return tuple(name for name in self.names() if self.value(name) != other.value(name))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoaderConfig:
        """Read :meth:`to_dict` back; Paddle's keys say the config is Paddle's (its null knobs stay None)."""
        paddle = "use_shared_memory" in data or "use_buffer_reader" in data
        persistent = data.get("persistent_workers")
        threads = data.get("worker_kind") == WorkerKind.THREAD
        knobs: dict[str, Any] = {knob.name: data.get(knob.name) for knob in REGISTRY if knob.keyword}
        return cls.of(**{**knobs, "num_workers": int(data["num_workers"]), "pin_memory": bool(data.get("pin_memory")),
                         "persistent_workers": persistent if paddle or threads else bool(persistent),
                         "framework": "paddle" if paddle else "torch",
                         "worker_kind": data.get("worker_kind") or WorkerKind.PROCESS.value})

    def __lt__(self, other: object) -> bool:
        """Framework, then fewer workers, then the knobs (a knob not passed sorts first)."""
        if not isinstance(other, LoaderConfig):
            return NotImplemented
        return self._key() < other._key()

    def _key(self) -> tuple[Any, ...]:
        values = (self.value(k.name) for k in sorted(REGISTRY, key=lambda k: k.json_rank))
        return (self.framework, self.num_workers, *((value is not None, value) for value in values))

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
    def prefetch(self) -> int:
        """``prefetch_factor`` as the loader takes it: the framework's default (:data:`DEFAULT_PREFETCH_FACTOR`)
        where it is not given."""
        return self.prefetch_factor or DEFAULT_PREFETCH_FACTOR

    @property
    def prefetched_batches(self) -> int:
        """Batches kept ready ahead of the loop: ``prefetch_factor`` per worker (a thread loader's Prefetcher too)."""
        return max(1, self.prefetch * max(1, self.num_workers))

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
        for knob in REGISTRY.arguments(self.framework, self.num_workers):
            kwargs[knob.name] = self.value(knob.name)
        return {k: v for k, v in kwargs.items() if v is not None}


def baseline(framework: str) -> LoaderConfig:
    """The framework's default loader (``num_workers=0``), measured in every sweep as the reference."""
    if framework == Framework.PADDLE:
        return LoaderConfig(0, use_buffer_reader=True, framework=Framework.PADDLE.value)
    return LoaderConfig(0)
