"""The HTML report: one self-contained file (plotly.js inlined, nothing fetched) with charts and every trial.

Charts come from plotly (the optional ``html`` extra). :func:`summary_fragment`
needs nothing beyond the standard library: it is what Jupyter shows for a
Report. What each block says comes from :mod:`dataprof.render.view`, shared
with the console report.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from dataprof.errors import UsageError
from dataprof.render import trials, view
from dataprof.render.cache import COLD_COLUMNS, cold_rows
from dataprof.render.compare import comparison_view
from dataprof.results.compare import Comparison, RunComparison
from dataprof.results.inspect import Inspection
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import TrialStatus

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d2330; padding: 0 1rem; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.meta { color: #5b6475; font-size: .9rem; }
.answer { background: #eef6ee; border-left: 4px solid #2e8b57; padding: .6rem 1rem; }
.verdict { border-left: 4px solid #888; padding: .6rem 1rem; background: #f6f7f9; margin: .6rem 0; }
.critical { border-color: #c0392b; } .warning { border-color: #d68910; } .info { border-color: #2874a6; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .85rem; }
pre { background: #f3f4f6; padding: .6rem; overflow-x: auto; }
table { border-collapse: collapse; font-size: .85rem; } th, td { padding: .25rem .6rem; text-align: right; }
th { border-bottom: 1px solid #aab; } td:first-child, th:first-child { text-align: left; }
tr.best { font-weight: bold; background: #eef6ee; } tr.bad { color: #a93226; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
"""


def check_available() -> None:
    """UsageError (exit 2) when plotly, which draws the charts, is not installed."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise UsageError("--html needs plotly: pip install 'dataprof[html]'") from None


def _e(text: Any) -> str:
    return html.escape(str(text))


def _series_name(trial: TrialResult) -> str:
    """The trial's curve: its kind of workers and every knob but their count, in the label's words (``processes
    pf2 persist``, ``threads pf2``): configs that differ in anything but ``num_workers`` are curves apart."""
    config = trial.config
    kind = "threads" if config.threads else "processes" if config.num_workers else "num_workers=0"
    return " ".join([kind, *config.label().split()[1:]])


def _series(report: Report) -> dict[str, list[TrialResult]]:
    """Completed trials grouped by everything but num_workers, each sorted by workers."""
    groups: dict[str, list[TrialResult]] = defaultdict(list)
    for trial in report.trials:
        if trial.status == TrialStatus.OK:
            groups[_series_name(trial)].append(trial)
    return {name: sorted(trials, key=lambda t: t.config.num_workers) for name, trials in sorted(groups.items())}


def _figure(report: Report, title: str, y_title: str, value: Callable[[TrialResult], float | None],
            lines: tuple[tuple[float, str], ...] = ()) -> Any:
    import plotly.graph_objects as go

    workers = sorted({t.config.num_workers for t in report.trials})
    fig = go.Figure()
    for name, series in _series(report).items():
        fig.add_trace(go.Scatter(x=[str(t.config.num_workers) for t in series], y=[value(t) for t in series],
                                 mode="lines+markers", name=name))
    values = [v for t in report.trials if t.status == TrialStatus.OK and (v := value(t)) is not None]
    top = max(values, default=0.0)
    far = []
    for level, label in lines:
        if top and level > 3 * top:  # a line far above the data would flatten the curve: named in the title
            far.append(label)
            continue
        fig.add_hline(y=level, line_dash="dash", line_color="#c0392b", annotation_text=label,
                      annotation_position="top left")
    if far:
        title = f"{title}<br><sup>off the scale: {', '.join(far)}</sup>"
    fig.update_layout(title=title, height=340, margin={"l": 50, "r": 20, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.25}, template="plotly_white")
    fig.update_xaxes(title="num_workers", type="category", categoryorder="array",
                     categoryarray=[str(w) for w in workers])
    fig.update_yaxes(title=y_title, rangemode="tozero")
    return fig


def charts(report: Report) -> list[Any]:
    """Throughput, data-wait share, memory (with RAM and limit lines) and CPU, against num_workers."""
    env = report.environment
    memory_lines: list[tuple[float, str]] = []
    if env.available_ram_bytes:
        memory_lines.append((env.available_ram_bytes / 1e9, f"available RAM {fmt_bytes(env.available_ram_bytes)}"))
    limit = report.settings.memory_limit_bytes
    if limit:
        memory_lines.append((limit / 1e9, f"--memory-limit {fmt_bytes(limit)}"))
    return [
        _figure(report, "Throughput", "samples/s", lambda t: t.samples_per_s),
        _figure(report, "Time waiting for data", "% of the iteration",
                lambda t: None if t.wait_fraction is None else 100 * t.wait_fraction),
        _figure(report, "Memory (peak PSS of main + workers)", "GB",
                lambda t: None if t.memory.peak_memory_bytes is None else t.memory.peak_memory_bytes / 1e9,
                tuple(memory_lines)),
        _figure(report, "CPU used by the loader's processes", "cores",
                lambda t: None if t.cpu.cpu_percent is None else t.cpu.cpu_percent / 100,
                ((float(env.usable_cpus), f"{env.usable_cpus} usable CPUs"),)),
    ]


def html_table(head: Sequence[str], rows: Sequence[tuple[list[str], str | None]]) -> str:
    """A table: the header cells, then each row's cells with its CSS class (empty for none)."""
    body = "".join((f"<tr class='{css}'>" if css is not None else "<tr>") + "".join(f"<td>{_e(c)}</td>" for c in cells)
                   + "</tr>" for cells, css in rows)
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + body + "</tbody></table>")


def _trials_table(report: Report) -> str:
    columns = trials.trial_columns(report, errors=True)
    rows = [([row.cells[c].strip() for c in columns], "best" if row.chosen else ("bad" if not row.ok else ""))
            for row in trials.trial_rows(report)]
    return html_table(columns, rows)


def _cold_table(report: Report) -> str:
    rows = [([c.strip() for c in cells], "best" if chosen else "") for cells, chosen in cold_rows(report)]
    return f"<h2>Cold trials (page cache evicted first)</h2>{html_table(COLD_COLUMNS, rows)}" if rows else ""


def _ranks(report: Report) -> str:
    """Each rank at the recommended config (distributed sweeps)."""
    ranks = trials.rank_rows(report)
    if ranks is None:
        return ""
    title, rows, nodes = ranks
    table = html_table(trials.RANK_COLUMNS, [(cells, "bad" if slowest else "") for cells, slowest in rows])
    return f"<h2>{_e(title)}</h2>{table}" + "".join(f"<p class='meta'>{_e(line)}</p>" for line in nodes)


def _answer(report: Report) -> str:
    answer = view.answer(report)
    if answer is None:
        return f"<div class='answer'>{_e(view.NO_RESULT)}</div>"
    yours = f"<b>{_e(answer.yours)}</b><br>" if answer.yours else ""
    feeding = f"<br><span class='meta'>step: {_e(answer.feeding)}</span>" if answer.feeding else ""
    feeding += f"<br><span class='meta'>data: {_e(answer.storage)}</span>" if answer.storage else ""
    feeding += f"<br><span class='meta'>kinds: {_e(answer.kinds)}</span>" if answer.kinds else ""
    return (f"<div class='answer'>{yours}<b>Recommended: {_e(answer.headline)}</b><br><span class='meta'>"
            f"{_e(answer.reason)}</span>{feeding}<pre>{_e(answer.loader_line)}</pre></div>")


def _findings(report: Report) -> str:
    return "".join(f"<div class='verdict {_e(f.severity)}'><b>{f.label}: {_e(f.title)}</b> "
                   f"<span class='meta'>[{_e(f.id)}, {_e(f.severity)}]</span>"
                   f"<p>{_e(f.evidence)}</p><p>→ <b>{_e(f.recommendation)}</b></p></div>"
                   for f in view.findings(report))


def _header(report: Report) -> str:
    lines = view.header_lines(report)
    return f"<h1>dataprof · {_e(report.target)}</h1><div class='meta'>" + "<br>".join(map(_e, lines)) + "</div>"


def summary_fragment(report: Report) -> str:
    """Header, recommendation, diagnosis and the trial table: HTML without any script (Jupyter)."""
    return f"<div>{_header(report)}{_answer(report)}{_findings(report)}{_trials_table(report)}</div>"


def _search(report: Report) -> str:
    steps = [([str(number), label, figure, why], None) for number, label, figure, why in trials.search_steps(report)]
    stop = f"<p class='meta'>stop: {_e(report.search_stop)}</p>" if report.search_stop else ""
    thumbs = "".join(f"<li>{_e(line)}</li>" for line, _ in view.rules_of_thumb(report))
    return ((f"<h2>Against the rules of thumb</h2><ul>{thumbs}</ul>" if thumbs else "")
            + (f"<h2>{_e(trials.search_title(report))}</h2>{html_table([], steps)}{stop}" if steps else ""))


def sweep_page(report: Report) -> str:
    """A sweep's whole page. Needs plotly (check with :func:`check_available`)."""
    figures = charts(report)
    divs = [figure.to_html(full_html=False, include_plotlyjs=(i == 0),
                           config={"displayModeBar": False, "responsive": True})
            for i, figure in enumerate(figures)]
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
    partial = "" if report.complete else f"<p class='verdict warning'>{_e(view.PARTIAL)}</p>"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dataprof · {_e(report.target)}"
            f"</title><style>{STYLE}</style></head><body>{_header(report)}{partial}{_answer(report)}"
            f"{_findings(report)}<h2>Curves</h2><div class='charts'>{''.join(divs)}</div>"
            f"{_ranks(report)}<h2>Every trial</h2>{_trials_table(report)}{_cold_table(report)}{_search(report)}"
            f"{'<h2>Notes</h2><ul>' + notes + '</ul>' if notes else ''}</body></html>\n")


def inspection_fragment(ins: Inspection) -> str:
    """``dataprof inspect`` as HTML without any script (Jupyter)."""
    lat = ins.samples.latency_ms
    parts = [f"<h1>dataprof inspect · {_e(ins.target)}</h1><div class='meta'>{_e(ins.dataset.type_name)} "
             f"({_e(ins.dataset.kind)}) · {ins.samples.count} samples · sample {_e(ins.dataset.sample)}</div>"]
    if lat:
        parts.append(f"<p>per sample: p50 {lat['p50']:.2f} ms · p95 {lat['p95']:.2f} ms · p99 {lat['p99']:.2f} ms "
                     f"· max {lat['max']:.2f} ms · CPU {ins.samples.cpu_share or 0:.0%} of wall</p>")
    if ins.cpu_ceiling:
        parts.append(f"<p><b>CPU ceiling: {ins.cpu_ceiling:,.0f} samples/s</b> on "
                     f"{ins.environment.usable_cpus} CPUs</p>")
    if ins.transforms:
        rows = "".join(f"<tr><td>{_e(t.name)}</td><td>{_e(t.path)}</td><td>{t.mean_ms:.3f}</td>"
                       f"<td>{100 * (t.share or 0):.0f}%</td></tr>" for t in ins.transforms)
        parts.append("<table><thead><tr><th>stage</th><th>path</th><th>ms/sample</th><th>share</th></tr></thead>"
                     f"<tbody>{rows}</tbody></table>")
    parts += [f"<p class='meta'>note: {_e(note)}</p>" for note in ins.notes]
    parts += [f"<div class='verdict {_e(c.severity)}'><b>{_e(c.id)}</b> ({_e(c.severity)}): {_e(c.evidence)}"
              f"<br>→ {_e(c.recommendation)}</div>" for c in ins.checks]
    return "<div>" + "".join(parts) + "</div>"


def page(title: str, body: str) -> str:
    """A self-contained page without any script: the report's style, ``body`` (HTML)."""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>\n")


def inspection_page(ins: Inspection) -> str:
    """``dataprof inspect``'s whole page: the fragment Jupyter shows, with the report's style."""
    return page(f"dataprof inspect · {ins.target}", inspection_fragment(ins))


def comparison_page(comparison: Comparison | RunComparison) -> str:
    """``dataprof compare``'s page: the head lines, the table (rows that regressed marked), the closing lines."""
    shown = comparison_view(comparison)
    head = "".join(f"<p class='{_e(line.style or '')}'>{_e(line.text)}<b>{_e(line.emphasis)}</b></p>"
                   for line in shown.head)
    rows = [(list(cells), "bad" if regressed else "") for cells, regressed in shown.rows]
    tail = "".join(f"<p class='meta'>{_e(line)}</p>" for line in shown.tail)
    return page("dataprof compare", f"<h1>{_e(shown.head[0].text)}</h1>{head}<h2>{_e(shown.title)}</h2>"
                                    f"{html_table(shown.columns, rows)}{tail}")
