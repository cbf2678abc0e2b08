"""The rich console report of ``dataprof run``: the verdict first, then each loader, the resources, the next step."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from dataprof.decide.run import band
from dataprof.decide.thresholds import Thresholds
from dataprof.render.view import SEVERITY_STYLE, num, percent
from dataprof.results.knobs import knob_words
from dataprof.results.run import RunReport
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import TITLES, WorkerKind


def header(report: RunReport) -> Text:
    """What was run, how it ended, on what."""
    env = report.environment
    if report.ended_by:
        how = f"watch ended by {report.ended_by}"
    else:
        how = f"exit code {report.exit_code}" if report.exit_code is not None else "no exit code"
    return Text(f"dataprof {report.tool_version} · run {' '.join(report.command)} · {report.wall_s:.1f} s, {how}\n"
                f"{env.framework} {env.framework_version or '?'} · {env.cpu_reason}")


def changes_line(report: RunReport) -> Text | None:
    """What the watch changed in the loaders (``--override``, ``--replay``), or None when nothing."""
    changes = report.changes
    if changes is None:
        return None
    where = f"the loader at {changes.loader}" if changes.loader else "every loader"
    parts = []
    if changes.knobs:
        knobs = knob_words(changes.knobs)
        parts.append(f"changed: {knobs} where {where} is built ({changes.overridden} built so)" if changes.overridden
                     else f"changed: nothing: no loader was built at {changes.loader or 'all'} ({knobs} not set)")
    if changes.replay:
        parts.append(f"replayed: {where}'s first {changes.replay} batch(es) again and again for the rest of each "
                     "epoch: the training with data for free (its ceiling)")
    for loader in report.loaders:
        if loader.knobs_lost:
            had = knob_words(loader.knobs_lost)
            parts.append(f"not landed at {loader.site}: the script changed the loader after building it (at its "
                         f"first epoch it had {had})")
    return Text("\n".join(parts), style="yellow")


def event_lines(report: RunReport) -> list[Text]:
    """What the watch saw beside the loaders: ranks the script started itself, a script the watch had to end."""
    lines = []
    if report.own_ranks:
        lines.append(Text(f"the script started ranks of its own ({report.own_ranks}): only this process was "
                          "watched, its ranks ran unwatched", style="yellow"))
    if report.stopped:
        lines.append(Text(f"the script {report.stopped}", style="yellow"))
    return lines


def loader_lines(report: RunReport) -> list[Text]:
    """Each DataLoader the script iterated, busiest first, in its steady state: two lines each."""
    lines = [Text("DataLoaders (steady state: each epoch's first batches, the workers' start and prefetch, "
                  "left out)", style="bold")]
    for loader in report.loaders:
        first = ", ".join(f"{s:.2f}" for s in loader.first_batch_s[:4]) + ("…" if len(loader.first_batch_s) > 4 else "")
        wait = loader.data_wait_fraction
        threads = " threads" if loader.worker_kind == WorkerKind.THREAD else ""
        others = "".join(f", {name}={value!r}" for name, value in loader.other_knobs.items())
        batch = f"batch_size={loader.batch_size}, " if loader.batch_size else ""  # None: a batch sampler's
        lines.append(Text(f" {loader.site} · {loader.loader_class}({loader.dataset}, {batch}"
                          f"num_workers={loader.num_workers}{threads}{others}) · "
                          f"{loader.batches} batches in {loader.epochs} epoch(s)"))
        share = "–" if wait is None else f"{wait:.0%} ({band(wait, Thresholds())})"
        lines.append(Text(f"   {num(loader.samples_per_s, ',.1f')} samples/s · data wait {share} · next() p50 "
                          f"{num(None if loader.wait_ms is None else loader.wait_ms.p50, '.1f')} ms · step p50 "
                          f"{num(None if loader.step_ms is None else loader.step_ms.p50, '.1f')} ms, "
                          f"p95 {num(None if loader.step_ms is None else loader.step_ms.p95, '.1f')} ms · "
                          f"first batch {first or '–'} s"))
    return lines


def resources(report: RunReport) -> Text:
    """CPU of the training process and of its workers, memory, and the GPU."""
    res = report.resources
    gpu = "GPU not sampled" if res.gpu_util_percent is None else f"GPU {res.gpu_util_percent:.0f}%"
    main = None if res.main_cpu_percent is None else res.main_cpu_percent / 100
    workers = None if res.workers_cpu_percent is None else res.workers_cpu_percent / 100
    return Text(f"CPU: training process {num(main, '.2f')} cores, workers {num(workers, '.2f')} cores "
                f"(of {report.environment.usable_cpus} usable) · machine {num(res.cpu_percent_system, '.0f')}%, "
                f"iowait {num(res.iowait_percent, '.0f')}% · peak PSS {fmt_bytes(res.peak_memory_bytes)} · {gpu}")


SPARKS = "▁▂▃▄▅▆▇█"


def spark(value: float, top: float) -> str:
    """One bar of a one-line chart: ``value``'s height out of ``top``, within the chart's bars whatever the
    value (a document written by hand or an older release may hold one below 0 or above ``top``)."""
    if top <= 0:
        return SPARKS[0]
    return SPARKS[max(0, min(len(SPARKS) - 1, int(value / top * len(SPARKS))))]


def gpu_line(report: RunReport) -> Text | None:
    """GPU utilisation over the watch as a one-line chart, when a GPU was sampled."""
    timeline = report.resources.gpu_timeline
    if not timeline:
        return None
    bars = "".join(spark(value, 100) for value in timeline)
    return Text(f"GPU utilisation over the watch (0–100%): {bars} mean "
                f"{num(report.resources.gpu_util_percent, '.0f')}%")


def storage_line(report: RunReport) -> Text | None:
    """What the training read from storage over the watch, as a one-line chart, and how much of its data files the
    page cache held at the end; None when it read nothing and held no data file."""
    res = report.resources
    if not res.storage_timeline and not res.data_files:
        return None
    top = max(res.storage_timeline, default=0.0)
    bars = "".join(spark(value, top) for value in res.storage_timeline)
    files = "" if not res.data_files else (
        f" · {res.data_files:,} data files held open or mapped ({fmt_bytes(res.data_bytes)}), "
        f"{percent(res.data_resident_fraction)}% in the page cache at the end")
    chart = f": {bars} (0–{fmt_bytes(top)}/s)" if bars else ""
    return Text(f"storage reads {fmt_bytes(res.storage_read_bytes_per_s)}/s over the watch{chart}{files}")


def rank_lines(report: RunReport) -> list[Text]:
    """Under torchrun: each rank's data wait, rate and step, the slowest marked (it sets everyone's pace)."""
    if not report.ranks:
        return []
    slowest = report.slowest_rank()
    lines = [Text(f"Ranks ({len(report.ranks)}; the one that waits most sets the pace of synchronous training)",
                  style="bold")]
    for r in report.ranks:
        wait = "–" if r.data_wait_fraction is None else f"{r.data_wait_fraction:.0%}"
        node = "" if r.node is None else f"node {r.node}, "
        lines.append(Text(f" {'◂' if r is slowest else ' '} rank {r.rank} ({node}{r.host}): data wait {wait} · "
                          f"{num(r.samples_per_s, ',.1f')} samples/s · step p50 {num(r.step_ms_p50, '.1f')} ms · "
                          f"exit code {r.exit_code}"))
    if report.rank_cause is not None:
        cause = report.rank_cause.finding
        lines.append(Text(f"slowest rank ({cause.severity}): {cause.evidence}", style=SEVERITY_STYLE[cause.severity]))
        lines.append(Text("→ " + cause.recommendation, style="bold"))
    return lines


def print_run(console: Console, report: RunReport) -> None:
    """Print the whole run report on ``console``."""
    console.print(header(report))
    if (changed := changes_line(report)) is not None:
        console.print(changed)
    for line in event_lines(report):
        console.print(line)
    if report.verdict is not None:
        verdict = report.verdict
        console.print(Rule(Text(f"Verdict: {TITLES[verdict.id]} ({verdict.severity})",
                                style=SEVERITY_STYLE[verdict.severity]), align="left"))
        console.print(Text(verdict.evidence))
        console.print(Text("→ " + verdict.recommendation, style="bold"))
    for line in loader_lines(report):
        console.print(line)
    console.print(resources(report))
    if (storage := storage_line(report)) is not None:
        console.print(storage)
    if (gpu := gpu_line(report)) is not None:
        console.print(gpu)
    for line in rank_lines(report):
        console.print(line)
    if report.next_command:
        console.print("next: measure the settings that feed this step fastest:", style="dim")
        console.print(report.next_command, style="bold green", soft_wrap=True, markup=False, highlight=False)
    if not report.complete:
        console.print("Partial result: the watch was interrupted.", style="yellow")
    for note in report.notes:
        console.print(f"note: {note}", style="dim", markup=False)
