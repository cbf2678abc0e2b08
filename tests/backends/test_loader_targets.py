"""DataLoader and DataModule targets, in process: the recipe a sweep rebuilds, the settings it settles, the
"your settings" comparison. No loader here starts a worker (the end-to-end sweeps are in test_sweep_loaders)."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from dataprof.backends.construction import CONSTRUCTED, constructed_with, remember_arguments
from dataprof.backends.loaders import LoaderTemplate
from dataprof.backends.target import build_dataset, loader_framework
from dataprof.decide.search import AdaptiveStrategy, Budget, GridStrategy
from dataprof.decide.settings import settle_loader
from dataprof.decide.sweep import decide
from dataprof.errors import TargetError, UsageError
from dataprof.render import view
from dataprof.results.codec import decode
from dataprof.results.environment import DatasetInfo, Environment, UserLoader
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.sweep import Report, YourSettings
from dataprof.results.trial import TrialResult
from tests.conftest import FIXTURES

FIXTURE = FIXTURES / "loaders.py"


@pytest.fixture(scope="module")
def fx() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loader_fixtures", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["loader_fixtures"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recording(fx: ModuleType) -> None:
    """TaggedLoaders keep their constructor call, as every DataLoader does in dataprof's host.

    The fixture's own subclass stands in for torch's DataLoader: a class's ``__new__`` cannot be taken back
    once set, and this test process's DataLoader is left as torch made it. Loaders of other classes here are
    rebuilt from their attributes, as one handed over by the Python API is.
    """
    remember_arguments(SimpleNamespace(DataLoader=fx.TaggedLoader))  # type: ignore[arg-type]


def test_recording_keeps_the_signatures_that_inspect_reports(recording: None, fx: ModuleType) -> None:
    class Child(fx.TaggedLoader):  # type: ignore[misc, name-defined]
        pass

    assert list(inspect.signature(fx.TaggedLoader).parameters) == ["dataset", "tag", "kwargs"]
    assert list(inspect.signature(Child).parameters) == ["dataset", "tag", "kwargs"]
    assert constructed_with(Child(TensorDataset(torch.randn(4, 2)), "mine", batch_size=2)) is not None


@pytest.mark.parametrize("recorded", [True, False])
def test_a_rebuilt_loader_keeps_everything_but_the_knobs(recording: None, fx: ModuleType, recorded: bool) -> None:
    loader = fx.make_loader(workers=2)
    if not recorded:  # as if built before the recording
        del loader.__dict__[CONSTRUCTED]
    template = LoaderTemplate.of(loader)
    assert template.recorded is recorded
    assert template.current == LoaderConfig(2, False, 2, True)
    rebuilt = template.build(LoaderConfig(4, False, 4, False))
    assert type(rebuilt) is fx.TaggedLoader and rebuilt._tag == "mine"
    assert (rebuilt.num_workers, rebuilt.prefetch_factor, rebuilt.persistent_workers) == (4, 4, False)
    assert rebuilt.sampler is loader.sampler and rebuilt.batch_size == 8
    assert rebuilt.collate_fn is fx.item_collate and rebuilt.worker_init_fn is fx.seed_worker
    baseline = template.build(LoaderConfig(0))  # prefetch_factor and persistent_workers need workers: dropped
    assert (baseline.num_workers, baseline.prefetch_factor, baseline.persistent_workers) == (0, None, False)
    assert next(iter(baseline)).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
    assert template.build(LoaderConfig(0), batch_size=3).batch_size == 3


def test_the_first_batch_describes_the_users_samples(recording: None, fx: ModuleType) -> None:
    template = LoaderTemplate.of(fx.make_loader())
    described = template.check(None, None, None)
    assert described["sample"] == "Item" and described["batch_samples"] == 8
    described = LoaderTemplate.of(fx.plain_batches()).check(None, None, None)
    assert described["sample"] == "(Tensor[8] float32)" and described["batch_samples"] == 16


def test_a_loader_missing_its_own_argument_cannot_be_rebuilt_from_attributes(fx: ModuleType) -> None:
    class Opaque(DataLoader):
        def __init__(self, dataset: Any, secret: int, **kwargs: Any) -> None:
            super().__init__(dataset, **kwargs)

    with pytest.raises(TargetError, match="its argument secret is not kept on the instance"):
        LoaderTemplate.of(Opaque(TensorDataset(torch.randn(10, 2)), 3))


def test_what_the_loader_keeps_is_described(recording: None, fx: ModuleType) -> None:
    kept = LoaderTemplate.of(fx.make_loader()).describe()
    assert kept["class"].endswith("TaggedLoader") and kept["batch_size"] == 8
    assert (kept["sampler"], kept["collate_fn"], kept["worker_init_fn"]) == ("EvenSampler", "item_collate",
                                                                              "seed_worker")
    assert kept["extra_arguments"] == ["tag"] and kept["rebuilt_from"] == "its constructor call"
    shuffled = LoaderTemplate.of(DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2, shuffle=True)).describe()
    assert shuffled["shuffle"] is True
    batches = LoaderTemplate.of(fx.batch_sampler_loader())
    assert batches.batch_size is None and batches.describe()["batch_sampler"] == "BatchSampler"


def test_targets_resolve_to_loaders_never_to_datasets_of_batches(fx: ModuleType) -> None:
    made = build_dataset(fx.plain_batches, {}, "plain_batches")
    assert loader_framework(made) == "torch"
    module = build_dataset(fx.StandInDataModule, {"length": 10}, "StandInDataModule", "val")
    assert module.batch_size == 8 and len(module.dataset) == 5
    assert loader_framework(build_dataset(fx.StandInDataModule(), {}, "dm")) == "torch"
    with pytest.raises(TargetError, match="neither a Dataset .*, a DataLoader nor a LightningDataModule"):
        build_dataset(fx.not_a_loader, {}, "not_a_loader")


def test_a_datamodule_setup_error_names_the_users_exception_and_line(fx: ModuleType) -> None:
    with pytest.raises(TargetError) as caught:
        build_dataset(fx.BrokenDataModule, {}, "BrokenDataModule")
    message = str(caught.value)
    assert message.startswith("BrokenDataModule.setup('fit') raised FileNotFoundError: no data under")
    assert "loaders.py:" in message


def test_the_datamodule_runs_prepare_data_and_setup_before_its_loader(fx: ModuleType) -> None:
    module = fx.StandInDataModule()
    with pytest.raises(TargetError, match="without test_dataloader"):
        build_dataset(module, {}, "dm", "test")
    build_dataset(module, {}, "dm", "train")
    assert module.stages[-2:] == ["prepare_data", "fit"]


LOADER_INFO = UserLoader("pkg.TaggedLoader", batch_size=8, shuffle=True, current=LoaderConfig(2, False, 2, True))
SAMPLED = dataclasses.replace(LOADER_INFO, batch_size=None, batch_sampler="MySampler")


def test_a_loader_target_settles_batch_size_order_and_your_settings() -> None:
    settings = SweepSettings(target="t.py:f", space=SearchSpace((0, 2)), batch_size_given=False)
    settled = settle_loader(settings, LOADER_INFO, 8)
    assert (settled.batch_size, settled.shuffle, settled.current_source) == (8, True, "TaggedLoader")
    assert settled.current == LoaderConfig(2, False, 2, True)
    given = settle_loader(dataclasses.replace(settings, batch_size=32, batch_size_given=True), LOADER_INFO, 8)
    assert given.batch_size == 32
    no_batch_size = settle_loader(settings, SAMPLED, 10)
    assert no_batch_size.batch_size == 10


@pytest.mark.parametrize(("change", "message"), [
    ({"batch_size": 32, "batch_size_given": True},
     r"--batch-size 32: TaggedLoader takes its batches from its batch_sampler \(MySampler\), .* wins"),
    ({"current": LoaderConfig(4, False, 2, True)}, "--current: TaggedLoader carries its own settings"),
    ({"shuffle": True}, "--shuffle: TaggedLoader keeps its own sampler"),
])
def test_options_that_contradict_the_loader_are_usage_errors(change: dict[str, Any], message: str) -> None:
    settings = dataclasses.replace(SweepSettings(target="t.py:f", space=SearchSpace((0, 2))), **change)
    with pytest.raises(UsageError, match=message):
        settle_loader(settings, SAMPLED, 10)


@pytest.mark.parametrize("strategy", [AdaptiveStrategy, GridStrategy])
def test_your_settings_are_measured_right_after_the_baseline(strategy: Any) -> None:
    mine = LoaderConfig(3, False, 2, True)
    search = strategy(SearchSpace((0, 2, 4)), Budget(usable_cpus=2), False, None, mine)
    first = search.propose([])
    assert first.config == LoaderConfig(0)
    second = search.propose([trial(LoaderConfig(0), 100.0)])
    assert second.config == mine and "your settings (w3 pf2 persist)" in second.why
    third = search.propose([trial(LoaderConfig(0), 100.0), trial(mine, 250.0)])
    assert third.config not in (LoaderConfig(0), mine)


def trial(config: LoaderConfig, rate: float, status: str = "ok") -> TrialResult:
    return TrialResult(config=config, status=status, samples_per_s=rate if status == "ok" else None,
                       samples_per_s_spread=0.02, batches=100, samples=800, window_s=1.0,
                       error=None if status == "ok" else "worker killed")


def report_with(trials: list[TrialResult], current: LoaderConfig | None, source: str = "TaggedLoader") -> Report:
    settings = {"batch_size": 8, "current": None if current is None else current.to_dict(),
                "current_source": source, "rules_of_thumb": False, "workers": [0, 2, 8]}
    loader = UserLoader("pkg.TaggedLoader") if source != "--current" else None
    env = Environment(cpu_count=2, usable_cpus=2, cpu_reason="2 usable CPUs", ram_bytes=8 << 30,
                      available_ram_bytes=4 << 30, python="3.11", torch="2", device="cpu", start_method="fork")
    return decide(Report(target="t.py:f", tool_version="x", environment=env,
                         settings=decode(SweepSettings, {**settings, "target": "t.py:f"}), trials=tuple(trials),
                         dataset=DatasetInfo("map", "PickyDataset", 4000, 0.1, loader=loader)))


def test_your_settings_lead_the_answer_with_only_what_changes() -> None:
    mine = LoaderConfig(2, False, 2, True)
    report = report_with([trial(LoaderConfig(0), 100.0), trial(mine, 200.0),
                          trial(LoaderConfig(8, False, 4, True), 800.0)], mine)
    assert report.current == YourSettings("TaggedLoader", mine, "ok", 200.0, 4.0, False,
                                          ("num_workers", "prefetch_factor"))
    answer = view.answer(report)
    assert answer is not None
    assert answer.yours == ("your settings (w2 pf2 persist, TaggedLoader): 200.0 samples/s → recommended "
                            "(w8 pf4 persist): 800.0 samples/s, 4.00× as fast")
    assert answer.loader_line == "TaggedLoader(..., num_workers=8, prefetch_factor=4)  # the rest as you have it"
    data = report.to_dict()["current"]
    assert data["changes"] == ["num_workers", "prefetch_factor"] and data["recommended_speedup"] == 4.0
    assert Report.from_dict(report.to_dict()).current == report.current


def test_your_settings_when_they_are_the_best_or_within_noise_or_failed() -> None:
    mine = LoaderConfig(2, False, 2, True)
    best = report_with([trial(LoaderConfig(0), 100.0), trial(mine, 200.0)], mine)
    assert view.answer(best).yours.endswith("200.0 samples/s, the recommended config: keep them")  # type: ignore[union-attr]
    assert view.answer(best).loader_line == "keep your TaggedLoader(...) as it is"  # type: ignore[union-attr]
    mine = LoaderConfig(8, False, 2, True)  # as fast as w4, which the recommendation prefers for its fewer workers
    close = report_with([trial(LoaderConfig(0), 100.0), trial(mine, 199.0),
                         trial(LoaderConfig(4, False, 2, True), 200.0)], mine, "--current")
    assert view.answer(close).yours == ("your settings (w8 pf2 persist, --current): 199.0 samples/s, within noise "  # type: ignore[union-attr]
                                        "of the recommended (w4 pf2 persist): 200.0 samples/s")
    assert close.current is not None and close.current.within_noise and close.current.changes == ("num_workers",)
    assert view.answer(close).loader_line == "DataLoader(..., num_workers=4)  # the rest as you have it"  # type: ignore[union-attr]
    failed = report_with([trial(LoaderConfig(0), 100.0), trial(mine, 0.0, "crashed")], mine)
    assert view.answer(failed).yours == ("your settings (w8 pf2 persist, TaggedLoader): crashed: worker killed → "  # type: ignore[union-attr]
                                         "recommended (w0): 100.0 samples/s")
    assert report_with([trial(LoaderConfig(0), 100.0)], None).current is None
    with_current = report_with([trial(LoaderConfig(0), 100.0), trial(LoaderConfig(8), 700.0)],
                               LoaderConfig(8), "--current")
    assert view.answer(with_current).loader_line == "keep your DataLoader(...) as it is"  # type: ignore[union-attr]


def test_a_shuffling_loader_is_rebuilt_with_its_own_sampler() -> None:
    loader = DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2, shuffle=True)
    rebuilt = LoaderTemplate.of(loader).build(LoaderConfig(0))
    assert isinstance(rebuilt.sampler, RandomSampler)


def test_each_rank_gets_a_distributed_sampler_unless_the_loader_has_its_own(fx: ModuleType) -> None:
    from torch.utils.data import DistributedSampler

    shuffled = LoaderTemplate.of(DataLoader(TensorDataset(torch.randn(10, 2)), batch_size=2, shuffle=True))
    shuffled.arguments.pop("sampler")  # as recorded from DataLoader(..., shuffle=True): no sampler of its own
    shuffled.arguments["shuffle"] = True
    sharded = shuffled.build(LoaderConfig(0), shard=(1, 2))
    assert isinstance(sharded.sampler, DistributedSampler)
    assert (sharded.sampler.rank, sharded.sampler.num_replicas, sharded.sampler.shuffle) == (1, 2, True)
    own = LoaderTemplate.of(fx.make_loader()).build(LoaderConfig(0), shard=(1, 2))
    assert type(own.sampler).__name__ == "EvenSampler"


def test_both_renderers_lead_with_your_settings() -> None:
    from dataprof.render import html
    from dataprof.render.documents import ConsoleRenderer

    mine = LoaderConfig(2, False, 2, True)
    report = report_with([trial(LoaderConfig(0), 100.0), trial(mine, 200.0),
                          trial(LoaderConfig(8, False, 4, True), 800.0)], mine)
    text = ConsoleRenderer(200).render(report)
    yours = text.index("your settings (w2 pf2 persist, TaggedLoader): 200.0 samples/s → recommended")
    assert yours < text.index("w8 pf4 persist: 800.0 samples/s") < text.index("TaggedLoader(..., num_workers=8")
    assert "your settings (w2 pf2 persist, TaggedLoader)" in html.summary_fragment(report)


def test_a_pipeline_that_batches_itself_is_refused_with_where_to_point_instead() -> None:
    nodes = pytest.importorskip("torchdata.nodes")
    source = nodes.IterableWrapper([torch.zeros(4, 2) for _ in range(3)])
    for made in (nodes.Loader(source), source):
        with pytest.raises(TargetError) as caught:
            build_dataset(lambda: made, {}, "train:pipeline")  # noqa: B023 (called at once)
        message = str(caught.value)
        assert message.startswith(f"train:pipeline returned a {type(made).__name__}, a torchdata.nodes pipeline "
                                  "that makes its batches itself")
        assert "the map-style dataset it maps" in message and "dataprof tune" in message


class _Prefetching:
    """A wrapper that iterates the loader it holds (timm's PrefetchLoader's shape)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        return iter(self.loader)


class _Streaming(torch.utils.data.IterableDataset):
    """A dataset that streams samples from a loader of its own: a dataset all the same."""

    def __init__(self) -> None:
        self.source = DataLoader(range(4), batch_size=None)

    def __iter__(self) -> Any:
        return iter(self.source)


def test_a_wrapper_of_loaders_is_refused_with_the_loader_to_point_at_and_a_dataset_holding_one_is_not() -> None:
    one = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    with pytest.raises(TargetError, match=r"^w:f returned a _Prefetching, which iterates the DataLoader it holds "
                                          r"\(\.loader\): its items are that loader's batches; point dataprof at the "
                                          r"DataLoader itself"):
        build_dataset(lambda: _Prefetching(one), {}, "w:f")
    combined = _Prefetching(one)
    combined.__dict__.update(by_name={"a": one, "b": DataLoader(range(4))}, flat=[one])
    with pytest.raises(TargetError, match=r"iterates the 2 loaders it holds \(\.loader, \.by_name\): .* one "):
        build_dataset(lambda: combined, {}, "w:f")
    streaming = _Streaming()
    assert build_dataset(lambda: streaming, {}, "w:f") is streaming
    assert build_dataset(lambda: TensorDataset(torch.zeros(2)), {}, "w:f") is not None
