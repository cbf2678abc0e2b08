"""A sweep's settings: planned from what was asked, settled once the dataset is loaded."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dataprof.decide.search.common import climb_config
from dataprof.decide.search.grid import grid_configs
from dataprof.decide.workers import adaptive_workers
from dataprof.errors import UsageError
from dataprof.results.codec import encode
from dataprof.results.environment import ProbeReply
from dataprof.results.request import MemoryLimit
from dataprof.results.settings import SweepSettings
from dataprof.results.space import SearchSpace


def test_in_order_and_the_start_method_are_discovered_from_the_dataloader_signature() -> None:
    import dataclasses

    from dataprof.decide.settings import resolve_settings
    from dataprof.results.registry import KNOBS
    from dataprof.results.settings import SweepSettings

    forced = SearchSpace((0, 2), in_order=(True, False), start_methods=("spawn",),
                         forced=("in_order", "multiprocessing_context"))
    settings = SweepSettings(target="t.py:D", space=forced)
    new = {"framework": "torch", "loader_arguments": list(KNOBS["torch"]) + ["dataset"], "start_method": "fork",
           "start_methods": ["fork", "spawn", "forkserver"]}
    space = resolve_settings(settings, ProbeReply.of(new), lambda framework: 0).space
    assert (space.skipped, space.forced, space.in_order) == ((), ("in_order", "multiprocessing_context"), (True, False))
    assert space.start_method == "fork" and climb_config(space, 2).multiprocessing_context == "spawn"
    old = dict(new, loader_arguments=["dataset", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
                                      "multiprocessing_context"])
    space = resolve_settings(settings, ProbeReply.of(old), lambda framework: 0).space  # torch < 2.6: no in_order
    assert space.skipped == ("in_order",) and space.in_order == (True,) and space.forced == ("multiprocessing_context",)
    assert encode(space)["skipped_knobs"] == ["in_order"]
    assert all(config.in_order is None for config in grid_configs(space))
    lonely = dict(new, start_methods=["spawn"])
    with pytest.raises(UsageError, match="--start-method forkserver: not offered here"):
        unoffered = dataclasses.replace(forced, start_methods=("forkserver",))
        resolve_settings(dataclasses.replace(settings, space=unoffered), ProbeReply.of(lonely), lambda framework: 0)


def plan_of(**options: Any) -> SweepSettings:
    """The plan of a sweep of ``t.py:D`` on 2 CPUs and 1 GB of RAM, with ``options`` (``sweep`` or ``budgets``)."""
    from dataprof.decide.settings import settings_for
    from dataprof.results.environment import CpuBudget
    from dataprof.results.request import LoadOptions, SweepOptions, SweepRequest, TrialBudgets

    sweep = SweepOptions(**{k: v for k, v in options.items() if k in SweepOptions.__dataclass_fields__})
    budgets = TrialBudgets(**{k: v for k, v in options.items() if k in TrialBudgets.__dataclass_fields__})
    return settings_for(SweepRequest(LoadOptions("t.py:D"), sweep, budgets), CpuBudget(2, 2, None, 2), 10**9)


def test_a_plan_takes_the_defaults_and_the_machine_for_what_was_left_out() -> None:
    settings = plan_of()
    assert settings.space.workers == adaptive_workers(2) and settings.space.prefetch_factors == (2, 4)
    assert settings.memory_limit_bytes == 8 * 10**8 and settings.batch_size == 64 and not settings.batch_size_given
    assert plan_of(memory_limit=MemoryLimit(bytes=5000)).memory_limit_bytes == 5000
    assert plan_of(workers=(0, 2), prefetch_factors=(2,)).space.forced == ("prefetch_factor",)


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": (-1,)}, "--workers: -1 is below the minimum of 0"),
    ({"prefetch_factors": (0,)}, "--prefetch-factor: 0 is below the minimum of 1"),
    ({"start_methods": ("bogus",)}, "--start-method 'bogus': expected some of fork, forkserver, spawn"),
    ({"trial_seconds": 5.0, "trial_timeout_s": 5.0}, "--trial-timeout 5 must be longer than --trial-seconds 5"),
    ({"device": "tpu"}, "expected auto, cpu, cuda or cuda:N"),
    ({"memory_limit": MemoryLimit(share=1.5)}, "--memory-limit"),
    ({"worker_kinds": ("fibers",)}, "--worker-kind 'fibers': expected some of process, thread"),
])
def test_a_plan_refuses_what_cannot_be_asked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        plan_of(**options)


def test_worker_kinds_are_settled_by_what_the_probe_found() -> None:
    from dataprof.decide.settings import resolve_settings
    from dataprof.results.registry import KNOBS

    found = {"framework": "torch", "loader_arguments": list(KNOBS["torch"]), "kind": "map",
             "thread_loader": "torchdata.nodes", "gil": {"release": 0.9, "free_threaded": False}}
    both = plan_of(worker_kinds=("thread", "process"))
    assert both.space.worker_kinds == ("process", "thread")  # in their own order
    space = resolve_settings(both, ProbeReply.of(found), lambda framework: 0).space
    assert (space.worker_kinds, space.thread_loader, space.gil_release) == (("process", "thread"),
                                                                           "torchdata.nodes", 0.9)
    alone = resolve_settings(plan_of(worker_kinds=("thread",)), ProbeReply.of(found), lambda framework: 0).space
    assert alone.only_threads and climb_config(alone, 4).threads
    for absent in ({**found, "thread_loader": None}, {**found, "kind": "iterable"}):
        left = resolve_settings(plan_of(worker_kinds=("thread",)), ProbeReply.of(absent), lambda framework: 0).space
        assert left.thread_loader is None and left.worker_kinds == ("process",)  # threads alone: processes then
    paddle = {"framework": "paddle", "loader_arguments": list(KNOBS["paddle"]), "kind": "map",
              "thread_loader": None}
    assert resolve_settings(plan_of(), ProbeReply.of(paddle), lambda framework: 0).space.worker_kinds == ()


def test_your_thread_settings_need_a_thread_loader_for_the_target() -> None:
    from dataprof.decide.settings import resolve_settings
    from dataprof.results.registry import KNOBS
    from dataprof.results.text import parse_current

    found = {"framework": "torch", "loader_arguments": list(KNOBS["torch"]), "kind": "map",
             "thread_loader": "torchdata.nodes"}
    yours = plan_of(current=parse_current("num_workers=4,worker_kind=thread"))
    settled = resolve_settings(yours, ProbeReply.of(found), lambda framework: 0)
    assert settled.current is not None and settled.current.threads and settled.space.worker_kinds == ()
    for absent in ({**found, "thread_loader": None}, {**found, "kind": "iterable"}):
        with pytest.raises(UsageError, match=r"--current t4 pf2: nothing here loads this target by threads"):
            resolve_settings(yours, ProbeReply.of(absent), lambda framework: 0)


def test_the_probe_reply_reads_the_probes_message_and_defaults_to_nothing_found() -> None:
    message = {"framework": "paddle", "framework_version": "3.0", "kind": "map", "loader_arguments": ["dataset"],
               "start_method": "fork", "start_methods": ["fork", "spawn"], "sharing_strategy": None,
               "thread_loader": "torch", "gil": {"release": 0.4, "release_high": 0.6, "free_threaded": False},
               "loader": None, "batch_samples": 8, "type_name": "D"}
    reply = ProbeReply.of(message)
    assert (reply.framework, reply.kind, reply.loader_arguments, reply.start_methods) == \
        ("paddle", "map", ("dataset",), ("fork", "spawn"))
    assert (reply.gil_release, reply.gil_release_high, reply.free_threaded) == (0.4, 0.6, False)
    assert reply.sharing_strategy is None and reply.loader is None and reply.batch_samples == 8
    assert ProbeReply.of({}) == ProbeReply() and ProbeReply().sharing_strategy == "file_descriptor"
