"""``dataprof tune``'s report: every run of the training, the answer as an edit of the user's loader, and what
data loading costs the training before and after."""

from __future__ import annotations

import html as escape
import io
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from dataprof.decide.tune.builders import builder_of, edit_through
from dataprof.render.html import page
from dataprof.results.knobs import changes_label, knob_words
from dataprof.results.tune import TuneAnswer, TunedLoader, TuneReport, TuneTrial
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import Framework, TuneVerdict, WorkerKind

ROLES = {"current": "yours", "headspace": "data for free", "candidate": "tried", "sweep": "the loader sweep's pick"}
"""How each kind of run is named in the table."""


def _config(trial: TuneTrial) -> str:
    if trial.role == "headspace":
        return "its first batches replayed"
    return changes_label(trial.config, trial.node_knobs)


def _num(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "–" if value is None else fmt.format(value)


def trials_table(report: TuneReport) -> Table:
    """One row per run of the training, the recommended one starred; a failed run's reason is a note below. Runs of
    several ranks show each rank's data wait (rank 0 first): the rank that waits most paces the others. The data
    wait is the steady state's; the waits at the starts of the epochs after the first are a column of their own
    where a run saw a second epoch (workers started anew at each short epoch: 11% steady, 76% at the starts)."""
    answer = report.answer
    table = Table(title="Runs of your training (steady iterations; start-up apart)", title_justify="left")
    gpu = any(t.gpu_util_percent is not None for t in report.trials)
    ranks = any(t.ranks for t in report.trials)
    starts = any(t.warmup_wait_fraction is not None for t in report.trials)
    columns = ("", "run", "it/s", "data wait") + (("by rank",) if ranks else ()) + \
        (("epoch\nstarts",) if starts else ()) + ("step p50", "vs free", "start-up") + (("GPU",) if gpu else ())
    for column in columns:
        table.add_column(column, justify="left" if column in ("", "run") else "right",
                         overflow="fold")  # a config's words broken across lines, never cut short
    for index, trial in enumerate(report.trials):
        star = "★" if answer is not None and answer.recommended == index else ""
        name = f"{ROLES[trial.role]}: {_config(trial)}"
        if not trial.ok:
            table.add_row(star, name, str(trial.status), *[""] * (len(columns) - 3))
            continue
        slowdown = None if answer is None else answer.step_slowdown.get(index)
        by_rank = (" / ".join(_num(r.data_wait_fraction, "{:.0%}") for r in trial.ranks),) if ranks else ()
        table.add_row(star, name, _num(trial.iterations_per_s), _num(trial.data_wait_fraction, "{:.0%}"), *by_rank,
                      *((_num(trial.warmup_wait_fraction, "{:.0%}"),) if starts else ()),
                      _num(None if trial.step_ms is None else trial.step_ms.p50, "{:.1f} ms"),
                      "–" if slowdown is None else fmt_change(slowdown),
                      _num(trial.startup_s, "{:.2f} s"), *((_num(trial.gpu_util_percent, "{:.0f}%"),) if gpu else ()))
    return table


def run_line(number: int, left_s: float, knobs: Mapping[str, Any], role: str, replayed: int | None,
             node_knobs: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The progress line of tune's next run: its number, the budget left, what it sets (``replayed``: the
    batches a headspace run replays; ``node_knobs``: a node's own)."""
    what = f"its first {replayed} batches replayed" if role == "headspace" else changes_label(knobs, node_knobs)
    return f"run {number} ({max(0.0, left_s):.0f} s of the budget left): {role}, {what}"


def side_effects_line(workdir: str | None) -> str:
    """What tune says as it starts: the script runs several times, and what it writes, it writes each time."""
    where = f"each run in its own directory under {workdir}" if workdir else \
        "in this directory (--workdir DIR gives each run its own)"
    return ("the script runs several times, each run a fresh process cut short after its window, " + where +
            ": whatever it writes (checkpoints, logs, runs on a tracker), it writes each time. DATAPROF_TRIAL=1 is "
            "set in its environment: skip saving and logging when it is (docs/tune.md#side-effects)")


def answer_lines(report: TuneReport) -> list[str]:
    """The answer: the edit at the loader's site, the gain with its range, and the data cost before and after."""
    answer, loader = report.answer, report.loader
    if answer is None or loader is None:
        return [report.error or "no answer: the script's own config did not complete a run"]
    if answer.recommended is None:
        swept = loader_sweep_line(report)
        said = answer.reason if answer.verdict == TuneVerdict.CANNOT_TELL else f"no answer: {answer.reason}"
        return [f"at {_where(loader)}: {said}", *_cost_line(answer, False), *([swept] if swept else [])]
    chosen = report.trials[answer.recommended]
    changes = {k: v for k, v in chosen.config.items() if loader.settings.get(k) != v}
    lines = []
    if changes:
        threads = changes.pop("worker_kind", None) == WorkerKind.THREAD
        through = edit_through(loader.built_by, changes)
        edit = ", ".join(f"{k}={loader.settings.get(k, '(default)')} → {v}" for k, v in changes.items())
        if threads:
            how = 'worker_method="thread"' if loader.threads == Framework.TORCH else \
                "the torchdata.nodes pipeline of docs/threads.md"
            edit += ("; " if edit else "") + f"its workers as threads of the training process ({how})"
        lines.append(f"at {_where(loader)}: {edit}")
        if through is not None:
            lines.append(through)
    else:
        lines.append(f"at {_where(loader)}: keep your settings")
    if chosen.node_knobs:
        hosts = {str(rank.node): rank.host for rank in chosen.ranks if rank.host and rank.node is not None}

        def named(node: str) -> str:
            return f"{node} ({hosts[node]})" if node in hosts else node

        rest = [named(str(n)) for n in range(report.nnodes) if str(n) not in chosen.node_knobs]
        lines[0] += (" on node " if len(rest) == 1 else " on nodes ") + ", ".join(rest)
        common = loader.settings | chosen.config
        lines += [f"on node {named(node)}: " + ", ".join(f"{k}={common.get(k, '(default)')} → {v}"
                                                         for k, v in own.items())
                  for node, own in sorted(chosen.node_knobs.items())]
        lines.append("a node's own value: pick it by the node (torchrun's GROUP_RANK in the training's environment) "
                     "or by what differs there (os.sched_getaffinity(0), its storage)")
    if answer.verdict == TuneVerdict.KEEP:
        lines.append(answer.reason)
    elif answer.gain_over_current is not None and answer.gain_range is not None:
        low, high = answer.gain_range
        lines.append(f"your training's iterations/s {fmt_change(answer.gain_over_current)} ({fmt_change(low)} to "
                     f"{fmt_change(high)}): {answer.reason}")
    swept = loader_sweep_line(report)
    return lines + _cost_line(answer, bool(changes)) + ([swept] if swept else [])


def _where(loader: TunedLoader) -> str:
    """The loader tuned, as the answer names it: its site (the user's line), class, split and builder."""
    builder = builder_of(loader.built_by)
    by = f", built by {builder.name if builder else loader.built_by[0]}" if loader.built_by else ""
    return f"{loader.site} ({loader.loader_class}" + (f", the {loader.split} loader" if loader.split else "") + \
        f"{by})"


def _cost_line(answer: TuneAnswer, changed: bool) -> list[str]:
    """What data loading costs the training now (and with the change), or why that is not known."""
    if answer.data_cost_fraction is None:
        return ["data loading's cost to your training not measured: the run with data for free did not complete"]
    after = answer.recommended_data_cost_fraction
    band = "" if answer.data_cost_range is None else \
        f" ({answer.data_cost_range[0]:.0%} to {answer.data_cost_range[1]:.0%})"
    return [f"data loading costs your training {answer.data_cost_fraction:.0%}{band} of its speed now"
            + ("" if after is None or not changed else f"; with the change, {after:.0%}")]


def loader_sweep_line(report: TuneReport) -> str | None:
    """What the loader-only sweep picked and how the training ranked it; None when there was none."""
    swept, answer = report.loader_sweep, report.answer
    if swept is None:
        return None
    args = "".join(f" --arg {k}={v!r}" for k, v in swept.args.items())
    alone = f"the loader alone (dataprof sweep {swept.target}{args}" + \
        (f" --step-ms {swept.step_ms:.1f}" if swept.step_ms else "") + ")"
    if swept.error is not None:
        return f"{alone}: {swept.error}" if swept.label is None else f"{alone} picks {swept.label}: {swept.error}"
    picked = f"{alone} picks {swept.label} ({_num(swept.samples_per_s, '{:,.0f}')} samples/s beside a dummy model)"
    if answer is None or answer.loader_sweep_rank is None:
        return f"{picked}; not run in your training (the budget ran out first)"
    place, of = answer.loader_sweep_rank
    versus = answer.loader_sweep_vs_recommended
    if versus is None or not versus:
        return f"{picked}; in your training it ranks {place} of {of}"
    within = ", within the noise of one run" if abs(versus) <= answer.noise else ""
    return (f"{picked}; in your training it ranks {place} of {of}, {fmt_change(versus, 1)} against the "
            f"recommended{within}")


def print_tune(console: Console, report: TuneReport) -> None:
    """Print the whole tune report on ``console``."""
    console.print(Text(f"dataprof {report.tool_version} · tune {' '.join(report.command)} · "
                       f"{len(report.trials)} runs in {report.wall_s:.0f} s"))
    if report.loader is not None:
        settings = knob_words(report.loader.settings)
        console.print(Text(f"loader: {report.loader.site} ({report.loader.loader_class}, batch size "
                           f"{report.loader.batch_size}; {settings})"))
    console.print(trials_table(report))
    for trial in report.trials:
        if not trial.ok:
            console.print(Text(f"{ROLES[trial.role]}: {_config(trial)} {trial.status}: {trial.error}", style="yellow"))
            for line in trial.stderr_tail:
                console.print(Text(f"  | {line}", style="dim"))
    console.print(Rule(Text("Answer", style="bold"), align="left"))
    for line in answer_lines(report):
        console.print(Text(line))
    if not report.complete:
        console.print("Partial result: tuning was interrupted.", style="yellow")
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))


def tune_page(report: TuneReport) -> str:
    """The tune report as a self-contained page (its console text)."""
    buffer = io.StringIO()
    print_tune(Console(width=120, file=buffer, color_system=None), report)
    return page(f"dataprof tune · {' '.join(report.command)}", f"<pre>{escape.escape(buffer.getvalue())}</pre>")
