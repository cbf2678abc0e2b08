"""A sweep's console report: the answer, the ready-to-paste DataLoader, the verdict, then the evidence.

What each block says comes from :mod:`dataprof.render.view`, shared with the HTML report; this module only
lays it out with rich.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from dataprof.render import trials, view
from dataprof.render.cache import COLD_COLUMNS, cold_rows
from dataprof.results.sweep import Report


def cold_table(report: Report) -> Table | None:
    """The cold trials beside their warm twins (◂: the window ended with the dataset's first pass)."""
    rows = cold_rows(report)
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, title="Cold trials (page cache evicted first; ◂ window = first pass)",
                  title_justify="left", pad_edge=False, padding=(0, 1, 0, 0))
    for name in COLD_COLUMNS:
        table.add_column(name, justify="left" if name == "config" else "right", no_wrap=True)
    for cells, chosen in rows:
        table.add_row(*cells, style="bold" if chosen else None)
    return table


def trials_table(report: Report) -> Table:
    """Every trial, fastest first; failures last with their status."""
    table = Table(box=box.SIMPLE_HEAD, title="Trials (steady state, fastest first)", title_justify="left",
                  pad_edge=False, padding=(0, 1, 0, 0))
    columns = trials.trial_columns(report)
    for name in columns:
        table.add_column(name, justify="left" if name in ("config", "status") else "right", no_wrap=True,
                         min_width=7 if name == "status" else None)
    for row in trials.trial_rows(report):
        table.add_row(*(row.cells[name] for name in columns),
                      style="bold" if row.chosen else ("red" if not row.ok else None))
    return table


CHART_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(value: float, top: float, width: int = CHART_WIDTH) -> str:
    """A horizontal bar of ``value / top`` of ``width`` cells, in eighths of a cell."""
    eighths = round(8 * width * value / top) if top > 0 else 0
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def throughput_chart(report: Report) -> RenderableType | None:
    """Throughput against num_workers (the best config at each count): the curve's shape at a glance."""
    curve = trials.throughput_curve(report)
    if not curve:
        return None
    top = max(rate for _, rate, _ in curve)
    title = "Throughput by num_workers (best config at each" + (
        "; t: threads)" if any(label.startswith("t") for label, _, _ in curve) else ")")
    lines: list[RenderableType] = [Text(title, style="bold")]
    for w, rate, chosen in curve:
        line = Text(f" {w:<5}│", style="dim")
        line.append(_bar(rate, top).ljust(CHART_WIDTH), style="green" if chosen else "cyan")
        line.append(f" {rate:,.0f}" + (" ★" if chosen else ""))
        lines.append(line)
    return Group(*lines)


def header(report: Report) -> Text:
    """Who measured what, where."""
    return Text("\n".join(view.header_lines(report)))


def recommendation(report: Report) -> tuple[RenderableType, str | None]:
    """The recommendation block, and the DataLoader line (printed unwrapped, to copy as is)."""
    answer = view.answer(report)
    if answer is None:
        return Text(view.NO_RESULT, style="red"), None
    lines = [Text(answer.yours, style="bold")] if answer.yours else []
    feeding = [Text(f"step: {answer.feeding}")] if answer.feeding else []
    storage = [Text(f"data: {answer.storage}")] if answer.storage else []
    storage += [Text(f"kinds: {answer.kinds}")] if answer.kinds else []
    return Group(Rule("Recommended", align="left"), *lines, Text(answer.headline), Text(f"why: {answer.reason}"),
                 *feeding, *storage), answer.loader_line


def verdict(report: Report) -> RenderableType | None:
    """The primary bottleneck: what limits the recommended config, the numbers, what to change."""
    shown = view.findings(report)
    if not shown or report.primary is None:
        return None
    primary = shown[0]
    return Group(
        Rule(Text(f"Bottleneck: {primary.title} ({primary.severity})", style=view.SEVERITY_STYLE[primary.severity]),
             align="left"),
        Text(primary.evidence),
        Text("→ " + primary.recommendation, style="bold"),
    )


def other_findings(report: Report) -> RenderableType | None:
    """Findings besides the primary verdict, most severe first."""
    rest = view.findings(report)[1 if report.primary is not None else 0:]
    if not rest:
        return None
    lines: list[RenderableType] = [Rule("Also found", align="left")]
    for finding in rest:
        head = Text(f"{finding.severity}: {finding.title} ", style=view.SEVERITY_STYLE[finding.severity])
        head.append(f"[{finding.id}]", style="dim")
        lines += [head, Padding(Text(finding.evidence), (0, 0, 0, 2)),
                  Padding(Text("→ " + finding.recommendation), (0, 0, 0, 2))]
    return Group(*lines)


def rules_of_thumb(report: Report) -> RenderableType | None:
    """What common advice (and Paddle's autotune) would have picked, measured in the same run."""
    rows = view.rules_of_thumb(report)
    if not rows:
        return None
    lines: list[RenderableType] = [Rule("Against the rules of thumb (measured in this run)", align="left")]
    lines += [Text(line, style="yellow" if beaten else "") for line, beaten in rows]
    return Group(*lines)


def search_story(report: Report) -> RenderableType | None:
    """Each trial in the order run and why the search chose it, then why it stopped."""
    steps = trials.search_steps(report)
    if not steps:
        return None
    lines: list[RenderableType] = [Rule(trials.search_title(report), align="left")]
    lines += [Text(f"{number:>2}. {label:<17} {figure:>18}  {why}") for number, label, figure, why in steps]
    if report.search_stop:
        lines.append(Text(f"stop: {report.search_stop}", style="dim"))
    return Group(*lines)


def ranks_table(report: Report) -> RenderableType | None:
    """Each rank at the recommended config, then each node's totals."""
    ranks = trials.rank_rows(report)
    if ranks is None:
        return None
    title, rows, nodes = ranks
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column in trials.RANK_COLUMNS:
        table.add_column(column, justify="left" if column in ("rank", "host") else "right")
    for cells, slowest in rows:
        table.add_row(("◂ " if slowest else "  ") + cells[0], *cells[1:])
    return Group(table, *(Text(line) for line in nodes))


def print_report(console: Console, report: Report) -> None:
    """Print the whole report on ``console``: the answer first, then the evidence."""
    console.print(header(report))
    block, loader_line = recommendation(report)
    console.print(block)
    if loader_line is not None:
        console.print(loader_line, style="bold green", soft_wrap=True, markup=False, highlight=False)
    parts = (verdict(report), ranks_table(report), rules_of_thumb(report), trials_table(report), cold_table(report),
             *(Text(line, style="red") for line in view.failures(report)), throughput_chart(report),
             search_story(report), other_findings(report))
    for part in parts:
        if part is not None:
            console.print(part)
    if not report.complete:
        console.print(view.PARTIAL, style="yellow")
    for note in report.notes:
        console.print(f"note: {note}", style="dim", markup=False)
