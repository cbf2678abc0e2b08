"""The console rendering of ``dataprof compare``: the verdict first, then every config side by side."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dataprof.decide.compare import Comparison, RunComparison
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import TrialStatus


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"


def _wait(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}"


def print_comparison(console: Console, comparison: Comparison, threshold: float | None = None) -> None:
    """The verdict (recommended throughput old → new, against ``threshold``), then every common config."""
    old, new = comparison.old, comparison.new
    console.print(f"dataprof compare · {old.target}" + (f" → {new.target}" if new.target != old.target else ""))
    if comparison.same_machine:
        console.print(f"same environment: {new.environment.cpu_reason} · {new.environment.framework} "
                      f"{new.environment.framework_version} · "
                      f"{new.environment.device}", style="dim")
    else:
        console.print("different environments, so differences may come from the machine, not the code: "
                      + "; ".join(comparison.environment_changes), style="yellow")
    old_rec, new_rec = old.recommendation, new.recommendation
    line = Text("recommended: ")
    line.append(f"{old_rec.config.label() if old_rec else '–'} {_rate(comparison.old_rate)} → "
                f"{new_rec.config.label() if new_rec else '–'} {_rate(comparison.new_rate)} samples/s "
                f"({_pct(comparison.change)})", style="bold")
    console.print(line)
    if old.primary != new.primary:
        console.print(f"bottleneck: {old.primary} → {new.primary}")
    _verdict_line(console, comparison, threshold)
    table = _table("Configs measured in both (old → new)", ("config", "samples/s", "change", "wait%", "PSS", "1st s"))
    for row in comparison.common:
        o, n = row.old, row.new
        change = row.change
        style = "red" if threshold is not None and row.regressed(threshold) else None
        table.add_row(
            row.config.label(),
            f"{_rate(o.samples_per_s)} → {_rate(n.samples_per_s)}" if o.status == n.status == TrialStatus.OK
            else f"{o.status} → {n.status}",
            _pct(change),
            f"{_wait(o.wait_fraction)} → {_wait(n.wait_fraction)}",
            f"{fmt_bytes(o.peak_memory_bytes)} → {fmt_bytes(n.peak_memory_bytes)}",
            f"{_num(o.first_batch_s)} → {_num(n.first_batch_s)}",
            style=style,
        )
    console.print(table)
    if comparison.only_old:
        console.print("only in old: " + ", ".join(c.label() for c in comparison.only_old), style="dim")
    if comparison.only_new:
        console.print("only in new: " + ", ".join(c.label() for c in comparison.only_new), style="dim")


def print_run_comparison(console: Console, comparison: RunComparison, threshold: float | None = None) -> None:
    """Two watched runs: the busiest loader's samples/s old → new against ``threshold``, then each loader."""
    old, new = comparison.old, comparison.new
    console.print(f"dataprof compare · run {' '.join(new.command)}")
    if comparison.same_machine:
        console.print(f"same environment: {new.environment.cpu_reason}", style="dim")
    else:
        console.print("different environments, so differences may come from the machine, not the code: "
                      + "; ".join(comparison.environment_changes), style="yellow")
    line = Text("busiest loader: ")
    line.append(f"{_rate(comparison.old_rate)} → {_rate(comparison.new_rate)} samples/s ({_pct(comparison.change)})",
                style="bold")
    console.print(line)
    if old.verdict is not None and new.verdict is not None and old.verdict.id != new.verdict.id:
        console.print(f"verdict: {old.verdict.id} → {new.verdict.id}")
    _verdict_line(console, comparison, threshold)
    table = _table("DataLoaders watched in both (old → new)",
                   ("loader", "samples/s", "change", "data wait%", "step p50 ms"))
    for row in comparison.loaders:
        o, n = row.old, row.new
        table.add_row(row.site, f"{_rate(o.samples_per_s)} → {_rate(n.samples_per_s)}", _pct(row.change),
                      f"{_wait(o.data_wait_fraction)} → {_wait(n.data_wait_fraction)}",
                      f"{_num((o.step_ms or {}).get('p50'))} → {_num((n.step_ms or {}).get('p50'))}",
                      style="red" if threshold is not None and row.change is not None and row.change < -threshold
                      else None)
    console.print(table)
    for label, sites in (("only in old", comparison.only_old), ("only in new", comparison.only_new)):
        if sites:
            console.print(f"{label}: " + ", ".join(sites), style="dim")


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def render(comparison: Comparison, threshold: float | None = None, width: int = 120) -> str:
    """Plain text of the comparison (no colour), as a test or a log would see it."""
    buffer = io.StringIO()
    print_comparison(Console(width=width, file=buffer, color_system=None), comparison, threshold)
    return buffer.getvalue()


def _verdict_line(console: Console, comparison: Comparison | RunComparison, threshold: float | None) -> None:
    """``REGRESSION: allowed −10%`` or ``ok: …`` when a threshold was given (a sweep's or a run's comparison)."""
    if threshold is None:
        return
    regressed = comparison.regressed(threshold)
    console.print(f"{'REGRESSION' if regressed else 'ok'}: allowed −{100 * threshold:g}%",
                  style="bold red" if regressed else "green")


def _table(title: str, columns: tuple[str, ...]) -> Table:
    """A comparison table: the first column (what is compared) left-aligned, the figures right-aligned."""
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, padding=(0, 1, 0, 0))
    for name in columns:
        table.add_column(name, justify="left" if name == columns[0] else "right", no_wrap=True)
    return table
