"""Plans for other machines, from pipeline models with known costs and from recorded sweeps: what feeding a step
takes, the config each rank gets, what the node's ranks need, and where a plan says it extrapolates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dataprof.decide.model import predict
from dataprof.decide.plan import machine_of, make_plan, plan_again, plan_for
from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig
from dataprof.results.pipeline import Estimate, PipelineModel
from dataprof.results.plan import Measured, Plan, TargetMachine
from tests.conftest import decided, trial

KNOBS = LoaderConfig(4, False, 2, True)
MEASURED = Measured(cpus=2.0, cpu_reason=None, trials=4, workers=(0, 2, 4), step_ms=0.0, batch_size=8)


def exact(value: float) -> Estimate:
    return Estimate(value, value, value, 3)


def model(work: float = 0.010, wait: float = 0.0, main: float = 0.001, batch: int = 256,
          **more: object) -> PipelineModel:
    """A pipeline whose samples cost ``work`` s of CPU and ``wait`` s besides, received in ``main`` s a batch,
    measured on 2 CPUs at w0, w2, w4."""
    figures: dict[str, object] = dict(
        batch_size=batch, cpus=2.0, worker_cpu_s_per_sample=exact(work), wait_s_per_sample=exact(wait),
        serial_s_per_batch=exact(batch * (work + wait)), serial_overlaps_step=False, main_s_per_batch=exact(main),
        main_cpu_s_per_batch=exact(main), copy_s_per_batch=0.0, cpu_share=0.95, memory_base_bytes=500e6,
        memory_per_worker_bytes=200e6, worker_growth_bytes_per_s=None, shm_bytes_per_batch=10_000_000,
        startup_base_s=0.2, startup_per_worker_s=0.1, measured_workers=(0, 2, 4), noise=0.03)
    figures.update(more)
    return PipelineModel(**figures)  # type: ignore[arg-type]


def machine(cpus: float = 24.0, ranks: int = 1, step_ms: float = 120.0, batch: int = 256,
            ram: int | None = None, shm: int | None = None) -> TargetMachine:
    return TargetMachine(cpus=cpus, ranks_per_node=ranks, ram_bytes=ram, shm_bytes=shm, step_ms=step_ms,
                         batch_size=batch)


def plan(pipeline: PipelineModel, target: TargetMachine) -> Plan:
    return plan_for("pkg:Train", MEASURED, target, pipeline, KNOBS)


def test_the_cpus_a_step_needs_are_what_the_samples_cost_at_the_rate_that_feeds_it() -> None:
    planned = plan(model(), machine(cpus=96, ranks=4))  # 24 CPUs per rank
    feed = planned.feeding
    assert feed is not None and feed.workers is not None and feed.cpus_per_rank is not None
    rate = 256 / (0.120 / 0.95)  # the loop may wait 5% of each iteration
    assert feed.samples_per_s == pytest.approx(rate)
    assert feed.cpus_per_rank == pytest.approx(rate * (0.010 + 0.001 / 256) / 0.95)
    assert feed.headroom == pytest.approx(24 / feed.cpus_per_rank - 1)
    # the model's own prediction on that many CPUs, with that many workers, delivers that rate
    at_need = predict(model(), feed.workers, feed.cpus_per_rank, 0.120, 256)
    assert at_need.samples_per_s == pytest.approx(rate, rel=1e-6)
    rec = planned.recommended
    assert rec.feeds_step and rec.num_workers == min(p.num_workers for p in planned.curve if p.feeds_step)
    assert predict(model(), rec.num_workers - 1, 24, 0.120, 256).samples_per_s < rate


def test_workers_that_also_wait_need_more_cpus_than_their_samples_cost_where_they_queue_for_them() -> None:
    waiting = model(work=0.010, wait=0.010)  # as long away from the CPUs as on them
    target = machine(cpus=96, ranks=4)
    feed = plan(waiting, target).feeding
    assert feed is not None and feed.workers is not None and feed.cpus_per_rank is not None
    cost = feed.samples_per_s * (0.010 + 0.001 / 256) / 0.95
    assert cost < feed.cpus_per_rank < 1.15 * cost
    assert predict(waiting, feed.workers, feed.cpus_per_rank, 0.120, 256).samples_per_s == \
        pytest.approx(feed.samples_per_s, rel=1e-6)
    assert predict(waiting, feed.workers - 1, feed.cpus_per_rank, 0.120, 256).samples_per_s < feed.samples_per_s
    enough, fewer = (plan(waiting, machine(cpus=4 * cpus, ranks=4))
                     for cpus in (feed.cpus_per_rank, 0.99 * feed.cpus_per_rank))
    assert enough.recommended.feeds_step and enough.recommended.num_workers == feed.workers
    assert not fewer.recommended.feeds_step


def test_a_cpu_limit_no_trial_reached_is_said_where_the_plan_rests_on_it() -> None:
    idle = plan(model(wait=0.050, cpus_used=0.3), machine(cpus=1, step_ms=0))  # on 1 CPU the CPUs hold it back
    assert idle.recommended.limit == "cpus"
    assert any("a limit the sweep never reached (its trials used at most 0.3 of 2)" in e for e in idle.extrapolations)
    busy = plan(model(wait=0.050, cpus_used=1.9), machine(cpus=1, step_ms=0))
    assert not any("never reached" in e for e in busy.extrapolations)
    ample = plan(model(wait=0.050, cpus_used=0.3), machine(cpus=64, step_ms=0))  # the main process holds it back
    assert ample.recommended.limit != "cpus" and not any("never reached" in e for e in ample.extrapolations)


def test_too_few_cpus_say_how_many_too_few_and_give_the_fastest_config_there() -> None:
    planned = plan(model(), machine(cpus=8))
    feed = planned.feeding
    assert feed is not None and feed.cpus_per_rank is not None and feed.headroom is not None
    assert feed.headroom < 0 and planned.recommended.feeds_step is False
    assert planned.recommended.limit == "cpus"
    fastest = max(p.samples_per_s for p in planned.curve)
    assert planned.recommended.samples_per_s >= 0.95 * fastest


def test_a_step_no_cpu_count_feeds_says_why_and_how_many_reach_the_ceiling() -> None:
    receiving = model(main=0.050)  # 50 ms to receive a batch against a 20 ms step
    planned = plan(receiving, machine(step_ms=20))
    feed = planned.feeding
    assert feed is not None and feed.cpus_per_rank is None and feed.workers is None
    assert feed.reason is not None and "main process" in feed.reason and "71%" in feed.reason
    assert not any(p.feeds_step for p in planned.curve)
    document = planned.to_dict()
    assert document["cpus_per_rank_to_feed_step"] is None and document["recommended"]["feeds_step"] is False


def test_without_a_step_nothing_is_fed_and_the_fewest_workers_near_the_fastest_are_picked() -> None:
    planned = plan(model(wait=0.010), machine(step_ms=0))
    assert planned.feeding is None and all(p.feeds_step is None for p in planned.curve)
    fastest = max(p.samples_per_s for p in planned.curve)
    assert planned.recommended.samples_per_s >= 0.95 * fastest
    fewer = [p for p in planned.curve if p.num_workers < planned.recommended.num_workers]
    assert all(p.samples_per_s < 0.95 * fastest for p in fewer)
    assert planned.to_dict()["cpus_per_rank_to_feed_step"] is None


def test_ram_and_shm_are_every_rank_s_and_what_does_not_fit_is_not_recommended() -> None:
    roomy = plan(model(), machine(cpus=96, ranks=4))
    rec = roomy.recommended
    assert rec.memory_bytes == pytest.approx(4 * (500e6 + 200e6 * rec.num_workers))
    assert rec.shm_bytes == pytest.approx(4 * rec.num_workers * 2 * 10_000_000)
    tight = plan(model(), machine(cpus=96, ranks=4, ram=int(4 * (500e6 + 200e6 * 8))))
    assert tight.recommended.fits and tight.recommended.num_workers < rec.num_workers
    none = plan(model(), machine(cpus=96, ranks=4, ram=1_000_000))
    assert not none.recommended.fits and any("fits" in note for note in none.notes)


def test_a_plan_says_where_it_leaves_what_was_measured() -> None:
    same = plan(model(), machine(cpus=2, step_ms=0, batch=256))
    assert same.recommended.num_workers in (0, 2, 4) and same.extrapolations == ()
    assert same.to_dict()["extrapolated"] is False
    far = plan(model(), machine(cpus=96, ranks=4, batch=512)).extrapolations
    assert any("more than the 2" in line for line in far)
    assert any("a count the sweep skipped" in line or "more than the sweep measured" in line for line in far)
    assert any("batch size 512" in line for line in far)


def test_the_plan_document_has_the_stable_keys_and_reads_back() -> None:
    planned = plan(model(), machine(cpus=96, ranks=8, ram=256 << 30, shm=64 << 30))
    document = json.loads(planned.to_json())
    assert document["kind"] == "plan"
    assert {"cpus", "ranks_per_node", "ram_bytes", "step_ms", "batch_size"} <= set(document["machine"])
    assert {"config", "samples_per_s", "samples_per_s_low", "samples_per_s_high", "feeds_step"} <= \
        set(document["recommended"])
    assert document["recommended"]["config"]["num_workers"] == planned.recommended.num_workers
    assert all({"num_workers", "samples_per_s"} <= set(point) for point in document["curve"])
    assert document["cpus_per_rank_to_feed_step"] == planned.feeding.cpus_per_rank  # type: ignore[union-attr]
    assert Plan.from_dict(document) == planned
    assert plan_again(Plan.from_dict(document)) == planned


def test_a_recorded_sweep_plans_for_fewer_cpus_with_the_cpu_bound_rate_halved() -> None:
    report = decided("cpu_bound")
    here, half = (make_plan(report, machine_of(report, cpus=cpus)) for cpus in (2.0, 1.0))
    assert half.recommended.samples_per_s == pytest.approx(here.recommended.samples_per_s / 2, rel=0.05)
    assert half.recommended.num_workers <= here.recommended.num_workers
    assert half.measured.workers == (0, 1, 2, 4) and half.measured.trials == 4


def test_the_sweep_s_own_machine_and_step_are_the_defaults() -> None:
    report = decided("model_bound")
    target = machine_of(report)
    assert target.cpus == report.environment.usable_cpus and target.ranks_per_node == 1
    assert target.step_ms == report.settings.step_ms and target.batch_size == report.settings.batch_size
    assert target.ram_bytes is None and target.shm_bytes is None  # another machine's are not known


@pytest.mark.parametrize(("given", "flag"), [({"cpus": 0.0}, "--cpus"), ({"ram_bytes": -1}, "--ram"),
                                             ({"shm_bytes": 0}, "--shm"), ({"ranks_per_node": 0}, "--ranks-per-node"),
                                             ({"step_ms": -5.0}, "--step-ms")])
def test_a_machine_that_cannot_be_is_refused_naming_its_option(given: dict[str, float], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        machine_of(decided("model_bound"), **given)  # type: ignore[arg-type]


def test_a_sweep_of_one_config_gives_no_plan_and_says_what_to_sweep() -> None:
    report = decided("model_bound")
    one = dataclasses.replace(report, trials=(trial(2, 500.0), trial(4, 0.0, status="failed")), model=None)
    with pytest.raises(UsageError, match=r"1 of 2 trials completed.*--workers 0,2,4"):
        make_plan(one, machine_of(report))


def test_a_sweep_that_threads_won_plans_its_best_worker_process_config_and_says_why() -> None:
    report = decided("threads_win")
    assert report.recommendation is not None and report.recommendation.config.threads
    plan = make_plan(report, machine_of(report, cpus=8))
    assert not plan.config.threads and not plan.knobs.threads
    assert plan.knobs == LoaderConfig(128, False, 2, True)  # the sweep's best process config
    assert plan.knobs_reason is not None and plan.notes[0] == plan.knobs_reason
    assert "the sweep recommended threads (t128 pf2), which the model does not predict" in plan.knobs_reason
    assert not any(" t1" in e or "t148" in e for e in plan.extrapolations)
    again = Plan.from_dict(json.loads(plan.to_json()))
    assert again == plan and plan_again(again) == plan
    assert make_plan(decided("cpu_bound"), machine_of(decided("cpu_bound"))).knobs_reason is None


def test_node_groups_get_a_plan_each_what_their_group_gives_and_the_rest_as_given() -> None:
    import dataprof
    from dataprof.render.plan import per_node, plan_page

    report = decided("cpu_bound")
    planned = dataprof.plan(report, ranks_per_node=2, step_ms=0,
                            node_groups=["0,2-3:cpus=16", "1:cpus=1.5,ram=64GB"])
    alone = dataprof.plan(report, cpus=1.5, ranks_per_node=2, step_ms=0)
    assert planned.machine.nodes == (0, 2, 3) and planned.machine.cpus == 16 and planned.machine.ranks_per_node == 2
    (slow,) = planned.groups
    assert (slow.machine.nodes, slow.machine.cpus, slow.machine.ram_bytes) == ((1,), 1.5, 64_000_000_000)
    assert slow.config == alone.config and slow.recommended == alone.recommended  # as a plan for that machine
    assert planned.config.num_workers > slow.config.num_workers  # more CPUs, more workers
    lines = per_node(planned)
    assert lines[0].startswith(f"nodes 0, 2, 3: {planned.config.label()} (16 CPUs, 2 rank(s))")
    assert lines[1].startswith(f"node 1: {slow.config.label()} (1.5 CPUs, 2 rank(s))")
    again = Plan.from_dict(json.loads(planned.to_json()))
    assert again == planned and json.loads(planned.to_json())["node_groups"][0]["machine"]["nodes"] == [1]
    assert "Per node" in plan_page(planned) and "Nodes 0, 2, 3" in plan_page(planned)


def test_a_node_in_two_groups_and_a_group_that_cannot_be_read_are_usage_errors() -> None:
    import dataprof
    from dataprof.results.text import parse_node_group

    with pytest.raises(UsageError, match="node 1 is in two groups"):
        dataprof.plan(decided("cpu_bound"), node_groups=["0-1:cpus=8", "1:cpus=2"])
    assert parse_node_group("0,2-3:cpus=32,ranks=8,shm=1GB").nodes == (0, 2, 3)
    for text, message in (("1", "expected NODES:KEY=VALUE"), ("a:cpus=2", "'a' is not a node"),
                          ("1:gpus=2", "give cpus=, ranks=, ram=, shm="), ("1:cpus=x", "cpus='x' is not a number")):
        with pytest.raises(UsageError, match=message):
            parse_node_group(text)
