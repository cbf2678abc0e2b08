"""The rich console report: every trial, the winner, a ready-to-paste DataLoader."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from dataprof.config import LoaderConfig
from dataprof.diagnose import TITLES
from dataprof.diagnose.facts import cpus_text, recommended_trial
from dataprof.model import AutotuneRun, Report, TrialResult
from dataprof.search import AUTOTUNE_RULE
from dataprof.units import fmt_bytes


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def dataloader_line(config: LoaderConfig, batch_size: int, shuffle: bool, collate_fn: str | None) -> str:
    """``DataLoader(dataset, batch_size=64, …)`` (Paddle: ``paddle.io.DataLoader(…)``) for the recommended config."""
    parts = ["dataset", f"batch_size={batch_size}"]
    if shuffle:
        parts.append("shuffle=True")
    parts.extend(f"{name}={value}" for name, value in config.dataloader_kwargs().items())
    if collate_fn:
        parts.append(f"collate_fn={collate_fn.rpartition(':')[2]}")
    loader = "paddle.io.DataLoader" if config.framework == "paddle" else "DataLoader"
    return f"{loader}({', '.join(parts)})"


def _sorted(trials: tuple[TrialResult, ...]) -> list[TrialResult]:
    return sorted(trials, key=lambda t: (t.status != "ok", -(t.samples_per_s or 0.0)))


def trials_table(report: Report) -> Table:
    """Every trial, fastest first; failures last with their status."""
    baseline = report.baseline
    chosen = report.recommendation.config if report.recommendation else None
    show_gpu = not report.environment.simulated_device
    show_status = any(t.status != "ok" for t in report.trials)
    table = Table(box=box.SIMPLE_HEAD, title="Trials (steady state, fastest first)", title_justify="left",
                  pad_edge=False, padding=(0, 1, 0, 0))
    columns = ["config", "samples/s", "±%", "×w0", "wait%", "1st s", "p95 ms", "CPU%", "PSS"]
    columns += ["GPU%"] * show_gpu + ["status"] * show_status
    for name in columns:
        table.add_column(name, justify="left" if name in ("config", "status") else "right", no_wrap=True,
                         min_width=7 if name == "status" else None)
    for trial in _sorted(report.trials):
        mark = "★ " if trial.config == chosen else "  "
        spread = None if trial.samples_per_s_spread is None else 100 * trial.samples_per_s_spread
        speedup = "–"
        if baseline is not None and trial.samples_per_s and baseline.samples_per_s:
            speedup = f"{trial.samples_per_s / baseline.samples_per_s:.2f}"
        wait = None if trial.wait_fraction is None else 100 * trial.wait_fraction
        cells = [
            mark + trial.config.label(), _num(trial.samples_per_s, ",.1f"), _num(spread, ".0f"), speedup,
            _num(wait, ".0f"), _num(trial.first_batch_s, ".2f"),
            _num(trial.wait_ms.p95 if trial.wait_ms else None, ".1f"),
            _num(trial.cpu_percent, ".0f"), fmt_bytes(trial.peak_memory_bytes),
        ]
        cells += [_num(trial.gpu_util_percent, ".0f")] * show_gpu + [trial.status] * show_status
        table.add_row(
            *cells,
            style="bold" if trial.config == chosen else ("red" if trial.status != "ok" else None),
        )
    return table


CHART_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(value: float, top: float, width: int = CHART_WIDTH) -> str:
    """A horizontal bar of ``value / top`` of ``width`` cells, in eighths of a cell."""
    eighths = round(8 * width * value / top) if top > 0 else 0
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def throughput_chart(report: Report) -> RenderableType | None:
    """Throughput against num_workers (the best config at each count): the curve's shape at a glance."""
    ok = [t for t in report.trials if t.status == "ok" and t.samples_per_s]
    best: dict[int, TrialResult] = {}
    for trial in ok:
        w = trial.config.num_workers
        if w not in best or (trial.samples_per_s or 0) > (best[w].samples_per_s or 0):
            best[w] = trial
    if len(best) < 2:
        return None
    top = max(t.samples_per_s or 0.0 for t in best.values())
    chosen = report.recommendation.config.num_workers if report.recommendation else None
    lines: list[RenderableType] = [Text("Throughput by num_workers (best config at each)", style="bold")]
    for w in sorted(best):
        rate = best[w].samples_per_s or 0.0
        line = Text(f" w{w:<4}│", style="dim")
        line.append(_bar(rate, top).ljust(CHART_WIDTH), style="green" if w == chosen else "cyan")
        line.append(f" {rate:,.0f}" + (" ★" if w == chosen else ""))
        lines.append(line)
    return Group(*lines)


def failures(report: Report) -> list[Text]:
    """One line per trial that did not finish: what happened, in a sentence."""
    return [Text(f"{t.config.label()}: {t.status}: {t.error}", style="red")
            for t in report.trials if t.status != "ok"]


def header(report: Report) -> Text:
    env = report.environment
    device = "simulated device (no GPU)" if env.simulated_device else f"{env.device} {env.gpu_name or ''}".strip()
    ds = report.dataset
    dataset = "" if ds is None else (
        f"{ds.type_name} ({ds.kind}, {ds.length if ds.length is not None else '?'} samples, "
        f"loaded in {ds.init_s:.2f} s)")
    step = report.settings.get("step_ms", 0)
    model = f"model step {step:g} ms" if step else "no model step (loader ceiling)"
    loader = "paddle.io.DataLoader" if env.framework == "paddle" else "torch DataLoader"
    skipped = report.settings.get("skipped_knobs") or []
    lines = [
        f"dataprof {report.tool_version} · {report.target} {dataset}",
        f"{loader} ({env.framework} {env.framework_version or '?'}) · batch size {report.settings.get('batch_size')}"
        f" · {model} · {device} · {env.cpu_reason}",
    ]
    if skipped:
        lines.append(f"skipped: {', '.join(skipped)} (not an argument of this {env.framework} version's DataLoader)")
    if env.world_size > 1:
        shard = "its own stream (an IterableDataset splits itself by rank)" \
            if report.dataset is not None and report.dataset.kind == "iterable" else "its DistributedSampler shard"
        lines.append(f"{env.world_size} ranks ({env.nodes} node(s) × {env.local_world_size}), each loading {shard}; "
                     f"configs are per rank, samples/s = {env.world_size} × the slowest rank's, the pace of "
                     "synchronous training")
    return Text("\n".join(lines))


def recommendation(report: Report) -> tuple[RenderableType, str | None]:
    """The recommendation block, and the DataLoader line (printed unwrapped, to copy as is)."""
    rec = report.recommendation
    if rec is None:
        return Text("No configuration completed: see the reasons above.", style="red"), None
    speed = f" ({rec.speedup_vs_baseline:.2f}× num_workers=0)" if rec.speedup_vs_baseline else ""
    line = dataloader_line(rec.config, report.settings.get("batch_size", 0),
                           bool(report.settings.get("shuffle")), report.settings.get("collate_fn"))
    ceiling = "" if rec.cpu_ceiling_share is None else (
        f" · {rec.cpu_ceiling_share:.0%} of what {cpus_text(report)} can do "
        f"(CPU ceiling {rec.cpu_ceiling_samples_per_s:,.0f} samples/s)")
    block = Group(
        Rule("Recommended", align="left"),
        Text(f"{rec.config.label()}: {rec.samples_per_s:,.1f} samples/s{speed}{ceiling}"),
        Text(f"why: {rec.reason}"),
    )
    return block, line


SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def verdict(report: Report) -> RenderableType | None:
    """The primary bottleneck: what limits the recommended config, the numbers, what to change."""
    if not report.findings or report.primary is None:
        return None
    primary = report.findings[0]
    style = SEVERITY_STYLE.get(primary.severity, "")
    title = TITLES.get(primary.id, primary.id)
    return Group(
        Rule(Text(f"Bottleneck: {title} ({primary.severity})", style=style), align="left"),
        Text(primary.evidence),
        Text("→ " + primary.recommendation, style="bold"),
    )


def other_findings(report: Report) -> RenderableType | None:
    """Findings besides the primary verdict, most severe first."""
    rest = report.findings[1:] if report.primary is not None else report.findings
    if not rest:
        return None
    lines: list[RenderableType] = [Rule("Also found", align="left")]
    for finding in rest:
        head = Text(f"{finding.severity}: {TITLES.get(finding.id, finding.id)} ", style=SEVERITY_STYLE.get(
            finding.severity, ""))
        head.append(f"[{finding.id}]", style="dim")
        lines += [head, Padding(Text(finding.evidence), (0, 0, 0, 2)),
                  Padding(Text("→ " + finding.recommendation), (0, 0, 0, 2))]
    return Group(*lines)


def autotune_text(run: AutotuneRun) -> str:
    """What Paddle's own autotune tried and picked, in its own numbers."""
    if run.status != "ok":
        return f"Paddle's autotune (tuning_steps={run.tuning_steps}): {run.status}: {run.error}"
    if run.skipped:
        return f"Paddle's autotune (paddle.incubate.autotune) tuned nothing: {run.skipped}; it keeps num_workers=" \
               f"{run.num_workers}"
    tried = ", ".join(f"w{w} {1000 * s:.1f} ms/batch" for w, s in run.evaluations) or "nothing logged"
    return (f"Paddle's autotune (paddle.incubate.autotune, tuning_steps={run.tuning_steps}) tries 0, 2, 4, … "
            f"below cpu_count/2 = {run.max_workers:g} and keeps a count only when ≥ 25% faster: {tried}; "
            f"it picked num_workers={run.num_workers} in {run.wall_s or 0:.1f} s")


def rules_of_thumb(report: Report) -> RenderableType | None:
    """What common advice (and Paddle's autotune) would have picked, measured in the same run."""
    if not (report.rules_of_thumb or report.autotune) or report.recommendation is None:
        return None
    usable = report.environment.usable_cpus
    lines: list[RenderableType] = [Rule("Against the rules of thumb (measured in this run)", align="left")]
    if report.autotune is not None:
        lines.append(Text(autotune_text(report.autotune), style="dim"))
    for row in report.rules_of_thumb:
        head = f"{row.rule} ({usable} CPUs) → {row.config.label()}" if row.rule != AUTOTUNE_RULE \
            else f"{row.rule} → {row.config.label()} (paddle.io.DataLoader's defaults)"
        if row.samples_per_s is None:
            state = "not measured in this run" if row.status is None else f"{row.status}"
            lines.append(Text(f"{head}: {state}"))
        elif row.within_noise:
            lines.append(Text(f"{head}: {row.samples_per_s:,.1f} samples/s, within noise of the "
                              "recommendation: the advice is right here"))
        else:
            lines.append(Text(f"{head}: {row.samples_per_s:,.1f} samples/s; the recommendation is "
                              f"{row.recommended_speedup or 0:.2f}× as fast", style="yellow"))
    if report.environment.framework == "torch" and report.environment.simulated_device \
            and any(r.config.pin_memory is False for r in report.rules_of_thumb):
        lines.append(Text("(the rules also say pin_memory=True, which needs a GPU)", style="dim"))
    return Group(*lines)


def search_story(report: Report) -> RenderableType | None:
    """Each trial in the order run and why the search chose it, then why it stopped."""
    if not report.search_steps:
        return None
    strategy = report.settings.get("strategy", "?")
    by_config = {t.config: t for t in report.trials}
    lines: list[RenderableType] = [Rule(f"Search: {strategy}, {len(report.trials)} trials in {report.wall_s:.0f} s",
                                        align="left")]
    for number, step in enumerate(report.search_steps, 1):
        trial = by_config.get(step.config)
        figure = "" if trial is None else (f"{trial.samples_per_s:,.1f} samples/s" if trial.samples_per_s
                                           else trial.status)
        lines.append(Text(f"{number:>2}. {step.config.label():<17} {figure:>18}  {step.why}"))
    if report.search_stop:
        lines.append(Text(f"stop: {report.search_stop}", style="dim"))
    return Group(*lines)


def ranks_table(report: Report) -> RenderableType | None:
    """Each rank at the recommended config, then each node's totals."""
    trial = recommended_trial(report)
    if trial is None or not trial.ranks:
        return None
    slowest = min(trial.ranks, key=lambda r: r.samples_per_s or 0.0)
    table = Table(box=box.SIMPLE_HEAD, title=f"Ranks at {trial.config.label()} (the slowest sets the pace)",
                  title_justify="left")
    for column in ("rank", "node", "host", "samples/s", "±%", "wait%", "1st s", "CPU%", "PSS"):
        table.add_column(column, justify="left" if column in ("rank", "host") else "right")
    for r in trial.ranks:
        mark = "◂ " if r is slowest else "  "
        table.add_row(f"{mark}{r.rank}", str(r.node), r.host or "?", _num(r.samples_per_s, ",.1f"),
                      _num(None if r.samples_per_s_spread is None else 100 * r.samples_per_s_spread, ".0f"),
                      _num(None if r.wait_fraction is None else 100 * r.wait_fraction, ".0f"),
                      _num(r.first_batch_s, ".2f"), _num(r.cpu_percent, ".0f"),
                      fmt_bytes(r.peak_memory_bytes))
    lines: list[RenderableType] = [table]
    usable = report.environment.usable_cpus * report.environment.local_world_size
    for node in sorted({r.node for r in trial.ranks}):
        on = [r for r in trial.ranks if r.node == node]
        cpu = sum(r.cpu_percent or 0.0 for r in on)
        memory = sum(r.peak_memory_bytes or 0 for r in on)
        lines.append(Text(f"node {node} ({on[0].host or '?'}): {len(on)} ranks · loader CPU {cpu / 100:.1f} of "
                          f"{usable} usable CPUs · PSS {fmt_bytes(memory)}"))
    return Group(*lines)


def print_report(console: Console, report: Report) -> None:
    """Print the whole report on ``console``: the answer first, then the evidence."""
    console.print(header(report))
    block, loader_line = recommendation(report)
    console.print(block)
    if loader_line is not None:
        console.print(loader_line, style="bold green", soft_wrap=True, markup=False, highlight=False)
    parts = (verdict(report), ranks_table(report), rules_of_thumb(report), trials_table(report), *failures(report),
             throughput_chart(report), search_story(report), other_findings(report))
    for part in parts:
        if part is not None:
            console.print(part)
    if not report.complete:
        console.print("Partial result: the sweep did not finish.", style="yellow")
    for note in report.notes:
        console.print(f"note: {note}", style="dim", markup=False)


def render(report: Report, width: int = 120) -> str:
    """Plain text of the report (no colour), as a test or a log would see it."""
    buffer = io.StringIO()
    print_report(Console(width=width, file=buffer, color_system=None), report)
    return buffer.getvalue()
