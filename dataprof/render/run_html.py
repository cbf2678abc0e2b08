"""The HTML page of a ``dataprof run`` document: self-contained, no script (the verdict, each loader, the
resources, the ranks, the next step)."""

from __future__ import annotations

import html

from dataprof.render.html import page
from dataprof.render.run import header, resources
from dataprof.render.view import num
from dataprof.results.run import RunReport
from dataprof.results.vocabulary import TITLES

LOADER_HEAD = ("loader", "dataset", "batch", "workers", "batches", "epochs", "samples/s", "data wait %",
               "next() p50 ms", "step p50 ms", "step p95 ms", "first batch s")


def _e(text: object) -> str:
    return html.escape(str(text))


def _row(cells: list[str], css: str = "") -> str:
    return f"<tr class='{css}'>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>"


def run_page(report: RunReport) -> str:
    """The whole page."""
    head = header(report).plain.split("\n")
    parts = [f"<h1>dataprof run · {_e(' '.join(report.command))}</h1>",
             "<div class='meta'>" + "<br>".join(map(_e, head)) + "</div>"]
    if report.verdict is not None:
        v = report.verdict
        parts.append(f"<div class='verdict {_e(v.severity)}'><b>{_e(TITLES[v.id])}</b> "
                     f"<span class='meta'>[{_e(v.id)}, {_e(v.severity)}]</span><p>{_e(v.evidence)}</p>"
                     f"<p>→ <b>{_e(v.recommendation)}</b></p></div>")
    rows = [_row([r.site, r.dataset, num(r.batch_size, "d"), num(r.num_workers, "d"), str(r.batches), str(r.epochs),
                  num(r.samples_per_s, ",.1f"),
                  num(None if r.data_wait_fraction is None else 100 * r.data_wait_fraction, ".0f"),
                  num(None if r.wait_ms is None else r.wait_ms.p50, ".1f"),
                  num(None if r.step_ms is None else r.step_ms.p50, ".1f"),
                  num(None if r.step_ms is None else r.step_ms.p95, ".1f"),
                  ", ".join(f"{s:.2f}" for s in r.first_batch_s)])
            for r in report.loaders]
    parts.append("<h2>DataLoaders (steady state)</h2><table><thead><tr>"
                 + "".join(f"<th>{_e(h)}</th>" for h in LOADER_HEAD) + "</tr></thead><tbody>" + "".join(rows)
                 + "</tbody></table>")
    parts.append(f"<p>{_e(resources(report).plain)}</p>")
    if report.ranks:
        slowest = report.slowest_rank()
        parts.append("<h2>Ranks</h2><table><tbody>" + "".join(
            _row([f"rank {r.rank}", r.host, num(None if r.data_wait_fraction is None else 100 * r.data_wait_fraction,
                                               ".0f") + "% data wait", num(r.samples_per_s, ",.1f") + " samples/s"],
                 "bad" if r is slowest else "") for r in report.ranks) + "</tbody></table>")
    if report.next_command:
        parts.append(f"<h2>Next</h2><pre>{_e(report.next_command)}</pre>")
    parts += [f"<p class='meta'>note: {_e(n)}</p>" for n in report.notes]
    return page("dataprof run", "".join(parts))
