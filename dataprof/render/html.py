"""The HTML report: one self-contained file (plotly.js inlined, nothing fetched) with charts and every trial.

Charts come from plotly (the optional ``html`` extra). :func:`summary_fragment`
needs nothing beyond the standard library: it is what Jupyter shows for a
Report.
"""

from __future__ import annotations

import html
from collections import defaultdict
from typing import Any

from dataprof.diagnose import TITLES
from dataprof.diagnose.facts import cpus_text, recommended_trial
from dataprof.errors import UsageError
from dataprof.inspection import Inspection
from dataprof.model import Report, TrialResult
from dataprof.render.console import autotune_text, dataloader_line
from dataprof.units import fmt_bytes

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


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _series_name(trial: TrialResult) -> str:
    c = trial.config
    flags = (" · pin" if c.pin_memory else "") + (" · no-shm" if c.use_shared_memory is False else "") \
        + (" · no-buf" if c.use_buffer_reader is False else "")
    if c.num_workers == 0:
        return "num_workers=0" + flags
    return f"prefetch {c.prefetch_factor} · {'persistent' if c.persistent_workers else 'respawn'}" + flags


def _series(report: Report) -> dict[str, list[TrialResult]]:
    """Completed trials grouped by everything but num_workers, each sorted by workers."""
    groups: dict[str, list[TrialResult]] = defaultdict(list)
    for trial in report.trials:
        if trial.status == "ok":
            groups[_series_name(trial)].append(trial)
    return {name: sorted(trials, key=lambda t: t.config.num_workers) for name, trials in sorted(groups.items())}


def _figure(report: Report, title: str, y_title: str, value: Any, lines: tuple[tuple[float, str], ...] = ()) -> Any:
    import plotly.graph_objects as go

    workers = sorted({t.config.num_workers for t in report.trials})
    fig = go.Figure()
    for name, trials in _series(report).items():
        fig.add_trace(go.Scatter(x=[str(t.config.num_workers) for t in trials], y=[value(t) for t in trials],
                                 mode="lines+markers", name=name))
    values = [v for t in report.trials if t.status == "ok" and (v := value(t)) is not None]
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
    limit = report.settings.get("memory_limit_bytes")
    if limit:
        memory_lines.append((limit / 1e9, f"--memory-limit {fmt_bytes(limit)}"))
    return [
        _figure(report, "Throughput", "samples/s", lambda t: t.samples_per_s),
        _figure(report, "Time waiting for data", "% of the iteration",
                lambda t: None if t.wait_fraction is None else 100 * t.wait_fraction),
        _figure(report, "Memory (peak PSS of main + workers)", "GB",
                lambda t: None if t.peak_memory_bytes is None else t.peak_memory_bytes / 1e9, tuple(memory_lines)),
        _figure(report, "CPU used by the loader's processes", "cores",
                lambda t: None if t.cpu_percent is None else t.cpu_percent / 100,
                ((float(env.usable_cpus), f"{env.usable_cpus} usable CPUs"),)),
    ]


def _trials_table(report: Report) -> str:
    chosen = report.recommendation.config if report.recommendation else None
    baseline = report.baseline
    head = ("config", "status", "samples/s", "±%", "×w0", "wait %", "first batch s", "wait p95 ms", "CPU %",
            "peak PSS", "GPU %", "error")
    rows = []
    for t in sorted(report.trials, key=lambda t: (t.status != "ok", -(t.samples_per_s or 0.0))):
        speedup = (t.samples_per_s / baseline.samples_per_s
                   if baseline is not None and baseline.samples_per_s and t.samples_per_s else None)
        cells = [("★ " if t.config == chosen else "") + t.config.label(), t.status,
                 _num(t.samples_per_s, ",.1f"),
                 _num(None if t.samples_per_s_spread is None else 100 * t.samples_per_s_spread, ".0f"),
                 _num(speedup, ".2f"), _num(None if t.wait_fraction is None else 100 * t.wait_fraction, ".0f"),
                 _num(t.first_batch_s, ".2f"), _num(t.wait_ms.p95 if t.wait_ms else None, ".1f"),
                 _num(t.cpu_percent, ".0f"), fmt_bytes(t.peak_memory_bytes), _num(t.gpu_util_percent, ".0f"),
                 t.error or ""]
        css = "best" if t.config == chosen else ("bad" if t.status != "ok" else "")
        rows.append(f"<tr class='{css}'>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _ranks(report: Report) -> str:
    """Each rank at the recommended config (distributed sweeps)."""
    trial = recommended_trial(report)
    if trial is None or not trial.ranks:
        return ""
    head = ("rank", "node", "host", "samples/s", "±%", "wait %", "first batch s", "CPU %", "peak PSS")
    slowest = min(trial.ranks, key=lambda r: r.samples_per_s or 0.0)
    rows = "".join(
        f"<tr class='{'bad' if r is slowest else ''}'>" + "".join(f"<td>{_e(c)}</td>" for c in (
            r.rank, r.node, r.host, _num(r.samples_per_s, ",.1f"),
            _num(None if r.samples_per_s_spread is None else 100 * r.samples_per_s_spread, ".0f"),
            _num(None if r.wait_fraction is None else 100 * r.wait_fraction, ".0f"), _num(r.first_batch_s, ".2f"),
            _num(r.cpu_percent, ".0f"), fmt_bytes(r.peak_memory_bytes))) + "</tr>" for r in trial.ranks)
    return (f"<h2>Ranks at {_e(trial.config.label())} (the slowest, marked, sets the pace)</h2><table><thead><tr>"
            + "".join(f"<th>{_e(h)}</th>" for h in head) + f"</tr></thead><tbody>{rows}</tbody></table>")


def _answer(report: Report) -> str:
    rec = report.recommendation
    if rec is None:
        return "<div class='answer'>No configuration completed.</div>"
    speed = f" ({rec.speedup_vs_baseline:.2f}× num_workers=0)" if rec.speedup_vs_baseline else ""
    ceiling = "" if rec.cpu_ceiling_share is None else \
        f" · {rec.cpu_ceiling_share:.0%} of what {cpus_text(report)} can do"
    line = dataloader_line(rec.config, report.settings.get("batch_size", 0), bool(report.settings.get("shuffle")),
                           report.settings.get("collate_fn"))
    return (f"<div class='answer'><b>Recommended: {_e(rec.config.label())}</b>: {rec.samples_per_s:,.1f} "
            f"samples/s{_e(speed)}{_e(ceiling)}<br><span class='meta'>{_e(rec.reason)}</span>"
            f"<pre>{_e(line)}</pre></div>")


def _findings(report: Report) -> str:
    parts = []
    for index, finding in enumerate(report.findings):
        title = TITLES.get(finding.id, finding.id)
        label = "Bottleneck" if index == 0 and report.primary is not None else "Finding"
        parts.append(f"<div class='verdict {_e(finding.severity)}'><b>{label}: {_e(title)}</b> "
                     f"<span class='meta'>[{_e(finding.id)}, {_e(finding.severity)}]</span>"
                     f"<p>{_e(finding.evidence)}</p><p>→ <b>{_e(finding.recommendation)}</b></p></div>")
    return "".join(parts)


def _header(report: Report) -> str:
    env, ds = report.environment, report.dataset
    device = "simulated device (no GPU)" if env.simulated_device else f"{env.device} {env.gpu_name or ''}"
    dataset = "" if ds is None else f"{ds.type_name} ({ds.kind}, {ds.length if ds.length is not None else '?'} samples)"
    step = report.settings.get("step_ms", 0)
    return (f"<h1>dataprof · {_e(report.target)}</h1><div class='meta'>{_e(dataset)} · batch size "
            f"{_e(report.settings.get('batch_size'))} · model step {_e(step)} ms · {_e(device)} · "
            f"{_e(env.cpu_reason)} · {_e(env.framework)} {_e(env.framework_version)} · "
            + (f"{env.world_size} ranks on {env.nodes} node(s), samples/s = {env.world_size} × the slowest rank's · "
               if env.world_size > 1 else "")
            + f"dataprof {_e(report.tool_version)}</div>")


def summary_fragment(report: Report) -> str:
    """Header, recommendation, diagnosis and the trial table: HTML without any script (Jupyter)."""
    return f"<div>{_header(report)}{_answer(report)}{_findings(report)}{_trials_table(report)}</div>"


def _search(report: Report) -> str:
    by_config = {t.config: t for t in report.trials}
    rows = []
    for number, step in enumerate(report.search_steps, 1):
        trial = by_config.get(step.config)
        rate = "" if trial is None else (_num(trial.samples_per_s, ",.1f") if trial.samples_per_s else trial.status)
        rows.append(f"<tr><td>{number}</td><td>{_e(step.config.label())}</td><td>{_e(rate)}</td>"
                    f"<td style='text-align:left'>{_e(step.why)}</td></tr>")
    stop = f"<p class='meta'>stop: {_e(report.search_stop)}</p>" if report.search_stop else ""
    thumbs = "".join(
        f"<li>{_e(r.rule)} → {_e(r.config.label())}: "
        + (_e(f"{r.samples_per_s:,.1f} samples/s; the recommendation is {r.recommended_speedup or 0:.2f}× as fast"
              + (" (within noise: the advice is right here)" if r.within_noise else ""))
           if r.samples_per_s is not None else "not measured in this run")
        + "</li>" for r in report.rules_of_thumb)
    if report.autotune is not None:
        thumbs = f"<li>{_e(autotune_text(report.autotune))}</li>" + thumbs
    return ((f"<h2>Against the rules of thumb</h2><ul>{thumbs}</ul>" if thumbs else "")
            + (f"<h2>Search ({_e(report.settings.get('strategy'))}, {len(report.trials)} trials in "
               f"{report.wall_s:.0f} s)</h2><table><tbody>{''.join(rows)}</tbody></table>{stop}" if rows else ""))


def render(report: Report) -> str:
    """The whole page. Needs plotly (check with :func:`check_available`)."""
    figures = charts(report)
    divs = [figure.to_html(full_html=False, include_plotlyjs=(i == 0),
                           config={"displayModeBar": False, "responsive": True})
            for i, figure in enumerate(figures)]
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
    partial = "" if report.complete else "<p class='verdict warning'>Partial result: the sweep did not finish.</p>"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dataprof · {_e(report.target)}"
            f"</title><style>{STYLE}</style></head><body>{_header(report)}{partial}{_answer(report)}"
            f"{_findings(report)}<h2>Curves</h2><div class='charts'>{''.join(divs)}</div>"
            f"{_ranks(report)}<h2>Every trial</h2>{_trials_table(report)}{_search(report)}"
            f"{'<h2>Notes</h2><ul>' + notes + '</ul>' if notes else ''}</body></html>\n")


def inspection_fragment(ins: Inspection) -> str:
    """``dataprof inspect`` as HTML without any script (Jupyter)."""
    data, lat = ins.data, ins.latency_ms
    parts = [f"<h1>dataprof inspect · {_e(data.target)}</h1><div class='meta'>{_e(data.dataset.type_name)} "
             f"({_e(data.dataset.kind)}) · {len(data.wall_s)} samples · sample {_e(data.dataset.sample)}</div>"]
    if lat:
        parts.append(f"<p>per sample: p50 {lat['p50']:.2f} ms · p95 {lat['p95']:.2f} ms · p99 {lat['p99']:.2f} ms "
                     f"· max {lat['max']:.2f} ms · CPU {ins.cpu_share or 0:.0%} of wall</p>")
    if ins.cpu_ceiling:
        parts.append(f"<p><b>CPU ceiling: {ins.cpu_ceiling:,.0f} samples/s</b> on "
                     f"{data.environment.usable_cpus} CPUs</p>")
    if ins.transforms:
        rows = "".join(f"<tr><td>{_e(t['name'])}</td><td>{_e(t['path'])}</td><td>{t['mean_ms']:.3f}</td>"
                       f"<td>{100 * t['share']:.0f}%</td></tr>" for t in ins.transforms)
        parts.append("<table><thead><tr><th>stage</th><th>path</th><th>ms/sample</th><th>share</th></tr></thead>"
                     f"<tbody>{rows}</tbody></table>")
    parts += [f"<p class='meta'>note: {_e(note)}</p>" for note in data.pipeline_notes]
    parts += [f"<div class='verdict {_e(c.severity)}'><b>{_e(c.id)}</b> ({_e(c.severity)}): {_e(c.evidence)}"
              f"<br>→ {_e(c.recommendation)}</div>" for c in ins.checks]
    return "<div>" + "".join(parts) + "</div>"
