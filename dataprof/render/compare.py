"""``dataprof compare`` rendered: the verdict first, then every config (or loader) side by side.

:func:`comparison_view` says what is shown, as plain text; the console and the HTML page lay it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dataprof.results.compare import Comparison, RunComparison
from dataprof.results.units import fmt_bytes, fmt_change
from dataprof.results.vocabulary import TrialStatus


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else fmt_change(value, 1)


def _wait(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


@dataclass(frozen=True)
class Line:
    """One line of the head: ``text`` then ``emphasis`` (bold), the whole in ``style``."""

    text: str
    emphasis: str = ""
    style: str | None = None


@dataclass(frozen=True)
class ComparisonView:
    """What a comparison shows: the head lines, the table (title, columns, each row and whether it regressed),
    the closing lines."""

    head: tuple[Line, ...]
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], bool], ...]
    tail: tuple[str, ...]


def _machines(comparison: Comparison | RunComparison, same: str) -> Line:
    if comparison.same_machine:
        return Line(same, style="dim")
    return Line("different environments, so differences may come from the machine, not the code: "
                + "; ".join(comparison.environment_changes), style="yellow")


def _verdict(comparison: Comparison | RunComparison) -> tuple[Line, ...]:
    """``REGRESSION: allowed −10%`` or ``ok: …`` when a threshold was given."""
    threshold = comparison.threshold
    if threshold is None:
        return ()
    regressed = comparison.regressed(threshold)
    return (Line(f"{'REGRESSION' if regressed else 'ok'}: allowed −{100 * threshold:g}%",
                 style="bold red" if regressed else "green"),)


def sweeps_view(comparison: Comparison) -> ComparisonView:
    """Two sweeps: the recommended throughput old → new, the bottleneck, then every config both measured."""
    old, new, threshold = comparison.old, comparison.new, comparison.threshold
    env = new.environment
    old_rec, new_rec = old.recommendation, new.recommendation
    head = [Line(f"dataprof compare · {old.target}" + (f" → {new.target}" if new.target != old.target else "")),
            _machines(comparison, f"same environment: {env.cpu_reason} · {env.framework} {env.framework_version} · "
                                  f"{env.device}"),
            Line("recommended: ", f"{old_rec.config.label() if old_rec else '–'} {_rate(comparison.old_rate)} → "
                                  f"{new_rec.config.label() if new_rec else '–'} {_rate(comparison.new_rate)} "
                                  f"samples/s ({_pct(comparison.change)})")]
    if old.primary != new.primary:
        head.append(Line(f"bottleneck: {old.primary} → {new.primary}"))
    rows = tuple(((row.config.label(),
                   f"{_rate(row.old.samples_per_s)} → {_rate(row.new.samples_per_s)}"
                   if row.old.status == row.new.status == TrialStatus.OK else f"{row.old.status} → {row.new.status}",
                   _pct(row.change), f"{_wait(row.old.wait_fraction)} → {_wait(row.new.wait_fraction)}",
                   f"{fmt_bytes(row.old.memory.peak_memory_bytes)} → {fmt_bytes(row.new.memory.peak_memory_bytes)}",
                   f"{_num(row.old.first_batch_s)} → {_num(row.new.first_batch_s)}"),
                  threshold is not None and row.regressed(threshold)) for row in comparison.common)
    tail = tuple(f"{label}: " + ", ".join(c.label() for c in configs)
                 for label, configs in (("only in old", comparison.only_old), ("only in new", comparison.only_new))
                 if configs)
    return ComparisonView((*head, *_verdict(comparison)), "Configs measured in both (old → new)",
                          ("config", "samples/s", "change", "wait%", "PSS", "1st s"), rows, tail)


def runs_view(comparison: RunComparison) -> ComparisonView:
    """Two watched runs: the busiest loader's samples/s old → new, the verdict, then each loader."""
    old, new, threshold = comparison.old, comparison.new, comparison.threshold
    head = [Line(f"dataprof compare · run {' '.join(new.command)}"),
            _machines(comparison, f"same environment: {new.environment.cpu_reason}"),
            Line("busiest loader: ", f"{_rate(comparison.old_rate)} → {_rate(comparison.new_rate)} samples/s "
                                     f"({_pct(comparison.change)})")]
    if old.verdict is not None and new.verdict is not None and old.verdict.id != new.verdict.id:
        head.append(Line(f"verdict: {old.verdict.id} → {new.verdict.id}"))
    rows = tuple(((row.site, f"{_rate(row.old.samples_per_s)} → {_rate(row.new.samples_per_s)}", _pct(row.change),
                   f"{_wait(row.old.data_wait_fraction)} → {_wait(row.new.data_wait_fraction)}",
                   f"{_num(None if row.old.step_ms is None else row.old.step_ms.p50)} → "
                   f"{_num(None if row.new.step_ms is None else row.new.step_ms.p50)}"),
                  threshold is not None and row.change is not None and row.change < -threshold)
                 for row in comparison.loaders)
    tail = tuple(f"{label}: " + ", ".join(sites)
                 for label, sites in (("only in old", comparison.only_old), ("only in new", comparison.only_new))
                 if sites)
    return ComparisonView((*head, *_verdict(comparison)), "DataLoaders watched in both (old → new)",
                          ("loader", "samples/s", "change", "data wait%", "step p50 ms"), rows, tail)


def comparison_view(comparison: Comparison | RunComparison) -> ComparisonView:
    """What either kind of comparison shows."""
    return runs_view(comparison) if isinstance(comparison, RunComparison) else sweeps_view(comparison)


def print_comparison(console: Console, comparison: Comparison | RunComparison) -> None:
    """The comparison on ``console``: the head, the table (rows that regressed in red), the closing lines."""
    view = comparison_view(comparison)
    for line in view.head:
        if line.emphasis:
            text = Text(line.text)
            text.append(line.emphasis, style="bold")
            console.print(text)
        else:
            console.print(line.text, style=line.style)
    table = Table(box=box.SIMPLE_HEAD, title=view.title, title_justify="left", pad_edge=False, padding=(0, 1, 0, 0))
    for name in view.columns:
        table.add_column(name, justify="left" if name == view.columns[0] else "right", no_wrap=True)
    for cells, regressed in view.rows:
        table.add_row(*cells, style="red" if regressed else None)
    console.print(table)
    for closing in view.tail:
        console.print(closing, style="dim")
