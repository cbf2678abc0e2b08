"""``dataprof plan``'s report, on a console and as a page: the machine planned for and the sweep it comes
from, the predicted rate of each worker count there, the config to use with its range and what it needs,
what feeding the step takes, where the plan extrapolates, and the model behind it."""

from __future__ import annotations

import html
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from dataprof.decide.model import LIMITS
from dataprof.render.html import html_table, page
from dataprof.render.view import dataloader_line, feeding_text
from dataprof.results.pipeline import Estimate, PipelineModel
from dataprof.results.plan import Plan, PlanPoint
from dataprof.results.units import fmt_bytes

COLUMNS = ("num_workers", "samples/s", "range", "limited by", "RAM", "/dev/shm", "fits", "feeds step")


@dataclass(frozen=True)
class PlanView:
    """What the plan's report says, in words, for either renderer."""

    head: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], bool], ...]
    """Each worker count's cells, and whether it is the recommended one."""
    answer: tuple[str, ...]
    loader_line: str
    extrapolations: tuple[str, ...]
    model: tuple[str, ...]
    notes: tuple[str, ...]


def _size(value: float | None, limit: int | None) -> str:
    return "?" if value is None else fmt_bytes(value) + ("" if limit is None else f" of {fmt_bytes(limit)}")


def _rate(point: PlanPoint) -> str:
    return f"{point.samples_per_s:,.0f} samples/s ({point.samples_per_s_low:,.0f}–{point.samples_per_s_high:,.0f})"


def _estimate(name: str, estimate: Estimate | None, unit: float = 1000, suffix: str = "ms") -> str:
    if estimate is None:
        return f"{name}: not measured"
    spread = "" if estimate.trials < 2 else f" ({unit * estimate.low:.3g}–{unit * estimate.high:.3g})"
    return f"{name}: {unit * estimate.value:.3g} {suffix}{spread}, from {estimate.trials} trial(s)"


def model_lines(model: PipelineModel) -> tuple[str, ...]:
    """The fitted figures, and the trial the model fits worst."""
    lines = [_estimate("a worker's CPU per sample", model.worker_cpu_s_per_sample),
             _estimate("wait per sample besides CPU (I/O, sleeps, locks)", model.wait_s_per_sample),
             _estimate("the main process receiving a batch", model.main_s_per_batch),
             _estimate("the main process loading a batch at num_workers=0", model.serial_s_per_batch),
             f"the processes reach {model.cpu_share:.0%} of their CPUs; trials vary by ±{model.noise:.0%}"]
    if model.memory_base_bytes is not None and model.memory_per_worker_bytes is not None:
        lines.append(f"memory (PSS) {fmt_bytes(model.memory_base_bytes)} + {fmt_bytes(model.memory_per_worker_bytes)}"
                     " per worker")
    worst = model.worst_residual
    if worst is not None:
        lines.append(f"fits its own trials within {abs(worst.error):.0%} (worst: {worst.config}, measured "
                     f"{worst.measured_samples_per_s:,.0f}, model {worst.predicted_samples_per_s:,.0f} samples/s)")
    return tuple(lines)


def plan_view(plan: Plan) -> PlanView:
    """The plan in words."""
    m, rec, measured = plan.machine, plan.recommended, plan.measured
    ram = "RAM not checked (--ram)" if m.ram_bytes is None else f"RAM {fmt_bytes(m.ram_bytes)}"
    shm = "/dev/shm not checked (--shm)" if m.shm_bytes is None else f"/dev/shm {fmt_bytes(m.shm_bytes)}"
    step = f"a {m.step_ms:g} ms step" if m.step_ms else "no model step (the loader's ceiling)"
    ranks = f"{m.cpus:g} CPUs, one rank" if m.ranks_per_node == 1 else \
        f"{m.cpus:g} CPUs, {m.ranks_per_node} ranks per node → {m.cpus_per_rank:g} CPUs per rank"
    head = (f"dataprof {plan.tool_version} · plan for {plan.target}",
            f"for: {ranks} · {ram} · {shm} · {step} · batch size {m.batch_size}",
            f"from: a sweep of {measured.trials} trials on {measured.cpus:g} CPUs "
            f"({', '.join(f'w{w}' for w in measured.workers)}), batch size {measured.batch_size}: "
            "predicted, not measured")
    columns = COLUMNS if plan.feeding is not None else COLUMNS[:-1]
    rows = tuple(((str(p.num_workers), f"{p.samples_per_s:,.0f}",
                   f"{p.samples_per_s_low:,.0f}–{p.samples_per_s_high:,.0f}", p.limit,
                   _size(p.memory_bytes, None), _size(p.shm_bytes, None), "yes" if p.fits else "no",
                   "yes" if p.feeds_step else "no")[:len(columns)], p.num_workers == rec.num_workers)
                 for p in plan.curve)
    per = " per rank" if m.ranks_per_node > 1 else ""
    held = f"feeds the {m.step_ms:g} ms step" if rec.feeds_step else f"held back: {LIMITS[rec.limit]}"
    answer = [f"{plan.config.label()}: {_rate(rec)}{per}; {held}"]
    if plan.feeding is not None:
        answer.append(f"step: {feeding_text(plan.feeding)}")
    who = "it needs" if m.ranks_per_node == 1 else f"the node's {m.ranks_per_node} ranks need"
    answer.append(f"{who} RAM {_size(rec.memory_bytes, m.ram_bytes)}, /dev/shm {_size(rec.shm_bytes, m.shm_bytes)}")
    line = dataloader_line(plan.config, m.batch_size, measured.shuffle, measured.collate_fn)
    return PlanView(head, columns, rows, tuple(answer), line, plan.extrapolations, model_lines(plan.model), plan.notes)


def nodes_text(nodes: tuple[int, ...]) -> str:
    """``node 1``, ``nodes 0, 2, 3``."""
    return f"node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))}"


def per_node(plan: Plan) -> tuple[str, ...]:
    """With node groups: each group's config in a line (``nodes 0, 2: num_workers=8 …``); empty without."""
    if not plan.groups:
        return ()
    return tuple(f"{nodes_text(p.machine.nodes)}: {p.config.label()} ({p.machine.cpus:g} CPUs, "
                 f"{p.machine.ranks_per_node} rank(s)): {_rate(p.recommended)} per rank"
                 for p in (plan, *plan.groups))


def print_plan(console: Console, plan: Plan) -> None:
    """The plan on ``console``: with node groups, each group's, then the config of each."""
    for one in (plan, *plan.groups):
        if plan.groups:
            console.print(Rule(Text(nodes_text(one.machine.nodes).capitalize(), style="bold")))
        _print_one(console, one)
    if plan.groups:
        console.print(Rule("Per node", align="left"))
        for line in per_node(plan):
            console.print(Text(line, style="bold"))


def _print_one(console: Console, plan: Plan) -> None:
    shown = plan_view(plan)
    console.print(Text("\n".join(shown.head)))
    table = Table(box=box.SIMPLE_HEAD, title="Predicted by num_workers (each rank)", title_justify="left",
                  pad_edge=False, padding=(0, 1, 0, 0))
    for name in shown.columns:
        table.add_column(name, justify="left" if name == "limited by" else "right", no_wrap=True)
    for cells, chosen in shown.rows:
        table.add_row(*cells, style="bold" if chosen else None)
    console.print(table)
    console.print(Rule("Recommended", align="left"))
    for line in shown.answer:
        console.print(Text(line))
    console.print(shown.loader_line, soft_wrap=True, markup=False, highlight=False)
    if shown.extrapolations:
        console.print(Rule("Extrapolated: beyond what the sweep measured", align="left"))
        for line in shown.extrapolations:
            console.print(Text(f"• {line}"))
    console.print(Rule("The model (docs/plan.md)", align="left"))
    for line in shown.model:
        console.print(Text(f"• {line}"), style="dim")
    for note in shown.notes:
        console.print(Text(f"note: {note}", style="dim"))


def _items(lines: tuple[str, ...]) -> str:
    return "".join(f"<li>{html.escape(line)}</li>" for line in lines)


def plan_page(plan: Plan) -> str:
    """The plan as a self-contained page (no script): with node groups, each group's, then the config of each."""
    if not plan.groups:
        return page(f"dataprof plan · {plan.target}", _section(plan))
    sections = "".join(f"<h1>{html.escape(nodes_text(one.machine.nodes).capitalize())}</h1>{_section(one)}"
                       for one in (plan, *plan.groups))
    return page(f"dataprof plan · {plan.target}",
                f"{sections}<h1>Per node</h1><ul>{_items(per_node(plan))}</ul>")


def _section(plan: Plan) -> str:
    shown = plan_view(plan)
    head = "<br>".join(html.escape(line) for line in shown.head[1:])
    answer = "<br>".join(html.escape(line) for line in shown.answer)
    extrapolated = "" if not shown.extrapolations else \
        f"<h2>Extrapolated: beyond what the sweep measured</h2><ul>{_items(shown.extrapolations)}</ul>"
    model = _items(shown.model)
    notes = "".join(f"<p class='meta'>note: {html.escape(note)}</p>" for note in shown.notes)
    rows = [(list(cells), "best" if chosen else None) for cells, chosen in shown.rows]
    return (f"<h1>{html.escape(shown.head[0])}</h1><div class='meta'>{head}</div>"
            f"<div class='answer'><b>Recommended</b><br>{answer}<pre>{html.escape(shown.loader_line)}</pre></div>"
            f"<h2>Predicted by num_workers (each rank)</h2>{html_table(shown.columns, rows)}{extrapolated}"
            f"<h2>The model</h2><ul>{model}</ul>{notes}")
