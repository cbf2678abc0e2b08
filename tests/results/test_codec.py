"""The one codec: a record written as its fields and read back by its field types, with the few shapes the
documents need said in field metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from dataprof.results.codec import AS_TEXT, FLAT, HIDDEN, Mismatch, decode, encode, named, objects, view
from dataprof.results.knobs import KnobValues, LoaderConfig
from dataprof.results.vocabulary import TrialStatus


@dataclass(frozen=True)
class Inner:
    a: int = 0
    b: float | None = None


@dataclass(frozen=True)
class Outer:
    status: TrialStatus
    label: str = field(metadata=named("class"))
    config: LoaderConfig = LoaderConfig(0)
    inner: Inner = field(default=Inner(), metadata=FLAT)
    marks: tuple[int, ...] = field(default=(), metadata=HIDDEN)
    pairs: tuple[tuple[int, float], ...] = field(default=(), metadata=objects("n", "s"))
    args: dict[str, Any] = field(default_factory=dict, metadata=AS_TEXT)
    knobs: KnobValues = field(default_factory=KnobValues)
    by_index: dict[int, float] = field(default_factory=dict)
    span: tuple[float, float] | None = None
    nested: tuple[Inner, ...] = ()
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("twice",)

    @property
    def twice(self) -> int:
        return 2 * self.inner.a


def test_a_record_round_trips_through_json_with_each_shape_its_metadata_says() -> None:
    record = Outer(TrialStatus.OK, "DataLoader", LoaderConfig(2, prefetch_factor=4), Inner(3, 0.5), (7, 8),
                   ((2, 0.1), (4, 0.05)), {"n": [1, 2]}, KnobValues(num_workers=2), {1: 0.5}, (0.1, 0.2),
                   (Inner(1),))
    data = json.loads(json.dumps(encode(record)))
    assert list(data) == ["status", "class", "config", "a", "b", "pairs", "args", "knobs", "by_index", "span",
                          "nested", "twice"]
    assert data["status"] == "ok" and data["config"] == LoaderConfig(2, prefetch_factor=4).to_dict()
    assert data["pairs"] == [{"n": 2, "s": 0.1}, {"n": 4, "s": 0.05}] and data["args"] == {"n": "[1, 2]"}
    back = decode(Outer, data)
    assert back == Outer(TrialStatus.OK, "DataLoader", LoaderConfig(2, prefetch_factor=4), Inner(3, 0.5), (),
                         ((2, 0.1), (4, 0.05)), back.args, KnobValues(num_workers=2), {1: 0.5}, (0.1, 0.2),
                         (Inner(1),))
    assert back.status is TrialStatus.OK and isinstance(back.knobs, KnobValues)
    assert repr(back.args["n"]) == "[1, 2]"  # read back as the text it was written as


def test_reading_is_lenient_for_older_documents_and_strict_for_messages() -> None:
    old = {"status": "ok", "class": "L", "b": None, "span": None, "a_later_key": 1}
    assert decode(Outer, {**old, "config": None}) == Outer(TrialStatus.OK, "L")  # null where not optional: default
    with pytest.raises(KeyError):
        decode(Outer, {"status": "ok"})
    with pytest.raises(ValueError, match="'b' is null, where a value is needed"):  # a tune's wall_s, say
        decode(Strict, {"a": 1, "b": None})  # not a None the renderers then format as a number
    assert decode(Strict, {"a": 1, "b": 2}) == Strict(1, 2)
    assert decode(Loose, {"a": 1}) == Loose(1, None)  # an optional figure an older document lacks: not known
    with pytest.raises(Mismatch, match=r"unknown keys \['x'\], missing keys \['b'\]"):
        decode(Strict, {"a": 1, "x": 2}, strict=True)
    with pytest.raises(Mismatch, match="Strict: b '2' is not a <class 'int'>"):
        decode(Strict, {"a": 1, "b": "2"}, strict=True)  # what comes over the network: of its field's kind
    with pytest.raises(Mismatch, match="a True"):
        decode(Strict, {"a": True, "b": 2}, strict=True)
    with pytest.raises(ValueError, match="Outer: unknown status 'exploded'"):
        decode(Outer, {**old, "status": "exploded"})
    assert decode(Rated, {"rate": 2}) == Rated(2)  # a number is a number, in a document
    with pytest.raises(Mismatch, match="Rated: rate 'fast' where a number goes"):  # not compared with numbers later
        decode(Rated, {"rate": "fast"})
    with pytest.raises(Mismatch, match=r"Loose: b \[1\] where a number goes"):
        decode(Loose, {"a": 1, "b": [1]})


@dataclass(frozen=True)
class Strict:
    a: int
    b: int


@dataclass(frozen=True)
class Loose:
    a: int
    b: int | None


@dataclass(frozen=True)
class Rated:
    rate: float | None


@dataclass(frozen=True)
class Viewed:
    """A document's shapes: a block that is a view of the record, a field written as several keys, a field read
    back from another's block, and the contract's key order with a derived key between fields."""

    name: str
    best: Inner = field(metadata=view(lambda r: {"a_then_b": [r.best.a, r.best.b]},
                                      lambda data: Inner(*data["best"]["a_then_b"])))
    pair: tuple[int, int] = field(default=(0, 0), metadata={
        **FLAT, **view(lambda r: {"first": r.pair[0], "second": r.pair[1]},
                       lambda data: (data["first"], data.get("second", 0)))})
    count: int = 0
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("first", "name", "doubled", "best", "second", "count")
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("doubled",)

    @property
    def doubled(self) -> int:
        return 2 * self.count


@dataclass(frozen=True)
class Unordered(Viewed):
    extra: int = 1


def test_a_view_writes_the_contract_s_shape_in_its_order_and_reads_it_back() -> None:
    record = Viewed("x", Inner(3, 0.5), (1, 2), 4)
    data = json.loads(json.dumps(encode(record)))
    assert list(data) == ["first", "name", "doubled", "best", "second", "count"]
    assert data == {"first": 1, "name": "x", "doubled": 8, "best": {"a_then_b": [3, 0.5]}, "second": 2, "count": 4}
    assert decode(Viewed, data) == record
    del data["second"]  # a document written before the key existed: the view's fallback
    assert decode(Viewed, data).pair == (1, 0)
    with pytest.raises(ValueError, match=r"Unordered: keys \['extra'\] are not in its JSON_KEYS"):
        encode(Unordered("x", Inner()))  # a field the contract's order leaves out is a bug, not a dropped key
