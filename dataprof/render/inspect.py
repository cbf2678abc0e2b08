"""The rich console report of ``dataprof inspect``: per sample, per stage, per batch, then the checks."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from dataprof.render.view import SEVERITY_STYLE
from dataprof.results.cache import PassReads
from dataprof.results.inspect import Inspection, TimedStage
from dataprof.results.threads import GilShare
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import DatasetKind

BAR_WIDTH = 12
SAMPLE_KIND = {"computing": "mostly computing", "waiting": "mostly waiting", "mixed": "part computing, part waiting"}


def header(ins: Inspection) -> Text:
    """What was inspected, and how."""
    ds, env, count = ins.dataset, ins.environment, ins.samples.count
    length = f"{ds.length:,} samples" if ds.length is not None else "no len()"
    chosen = (f"{count} random samples (seed {ins.settings.seed})" if ds.kind == DatasetKind.MAP
              else f"the first {count} items, in stream order")
    lines = [f"dataprof {ins.tool_version} · inspect {ins.target}",
             f"{ds.type_name} ({ds.kind}, {length}, built in {ds.init_s:.2f} s) · sample {ds.sample or '?'}",
             f"{chosen} · {env.framework} {env.framework_version or '?'} single-threaded, as in a DataLoader worker"
             f" · {env.cpu_reason}"]
    if ins.samples.stopped:
        lines.append(f"stopped early: {ins.samples.stopped}")
    return Text("\n".join(lines))


def _fetch(ins: Inspection) -> str:
    """How a sample is fetched: ``__getitem__`` (map-style), ``__next__`` of its iterator (a stream)."""
    return "__getitem__" if ins.dataset.kind == DatasetKind.MAP else "__next__"


def per_sample(ins: Inspection) -> RenderableType:
    """Per-sample latency (p50…max), CPU share and size, and the slowest indices."""
    samples = ins.samples
    lat = samples.latency_ms
    if not lat:
        return Group(Rule("Per sample", align="left"), Text("no sample was fetched", style="red"))
    first = f" · first fetch {samples.first_ms:.1f} ms (not counted)" if samples.first_ms else ""
    lines: list[RenderableType] = [
        Rule(f"Per sample ({_fetch(ins)})", align="left"),
        Text(f"p50 {lat['p50']:.2f} ms · p95 {lat['p95']:.2f} ms · p99 {lat['p99']:.2f} ms · "
             f"max {lat['max']:.2f} ms · mean {lat['mean']:.2f} ms{first}"),
        Text(f"CPU {samples.cpu_ms_mean or 0:.2f} ms per sample = {samples.cpu_share or 0:.0%} of its wall time "
             f"({SAMPLE_KIND.get(samples.kind or '', '?')}) · "
             f"{fmt_bytes(ins.bytes_per_sample)} per sample"),
    ]
    label = "slowest indices" if ins.dataset.kind == DatasetKind.MAP else "slowest items (stream position)"
    parts = []
    for item in samples.slowest[:5]:
        again = f" (again {item.repeat_ms:.1f})" if item.repeat_ms is not None else ""
        parts.append(f"[{item.index}] {item.ms:.1f} ms{again}")
    lines.append(Text(f"{label}: " + " · ".join(parts)))
    return Group(*lines)


def _bar(share: float | None) -> str:
    filled = round((share or 0.0) * BAR_WIDTH)
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def _add_rows(table: Table, stage: TimedStage, depth: int, gil: bool) -> None:
    composite = stage.children is not None
    calls = "" if composite else str(stage.calls)
    table.add_row("  " * depth + stage.name, f"{stage.mean_ms:.3f}", f"{(stage.share or 0):.0%}", _bar(stage.share),
                  calls, *([gil_cell(stage.gil_release)] if gil else []), style="bold" if composite else None)
    for child in stage.children or ():
        _add_rows(table, child, depth + 1, gil)


def gil_cell(release: float | None) -> str:
    """A stage's GIL column: ``released 92%``, ``held``, or empty when not measured."""
    if release is None:
        return ""
    return "held" if release <= 0.2 else f"released {release:.0%}"


def threads_advice(gil: GilShare) -> str:
    """What a sample's GIL share means for thread workers."""
    if gil.settled is None and not gil.free_threaded:
        return "measure both kinds with dataprof sweep --worker-kind process,thread"
    if gil.free_threaded or (gil.release or 0.0) >= 0.8:
        return ("thread workers load it side by side in one process (one heap, no /dev/shm, no start-up): "
                "dataprof sweep --worker-kind process,thread measures both")
    if (gil.release or 0.0) <= 0.2:
        return "threads would take turns at it: worker processes load it in parallel"
    return "threads overlap that share of it: dataprof sweep --worker-kind process,thread measures which wins"


def transforms(ins: Inspection) -> RenderableType:
    """The transform tree with each stage's time per sample and share."""
    lines: list[RenderableType] = [Rule("Transforms (timed in place; share of the sample time)", align="left")]
    if ins.tree:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
        gil = any(t.gil_release is not None for t in ins.transforms)
        for name in ("stage", "ms/sample", "share", "", "calls", *(["GIL"] if gil else [])):
            table.add_column(name, justify="left" if name in ("stage", "", "GIL") else "right", no_wrap=True)
        for root in ins.tree:
            _add_rows(table, root, 0, gil)
        if ins.outside_ms is not None:
            table.add_row(f"(rest of {_fetch(ins)})", f"{ins.outside_ms:.3f}", f"{ins.outside_share or 0:.0%}",
                          _bar(ins.outside_share), "", *([""] if gil else []), style="dim")
        lines.append(table)
        if ins.transforms:
            top = ", ".join(f"{t.name} {t.share or 0:.0%}" for t in ins.transforms[:3])
            lines.append(Text(f"costliest stages: {top}"))
    for note in ins.notes:
        lines.append(Text(f"note: {note}", style="yellow"))
    return Group(*lines)


def batch(ins: Inspection) -> RenderableType:
    """Collation, the pickled dataset, and the CPU ceiling."""
    ds = ins.dataset
    lines: list[RenderableType] = [Rule("Batch and workers", align="left")]
    if ins.collate_ms is not None and ds.batch_samples:
        lines.append(Text(f"collate {ds.batch_samples} samples: {ins.collate_ms:.2f} ms "
                          f"({ins.collate_ms / ds.batch_samples:.3f} ms per sample) · batch "
                          f"{fmt_bytes(ds.batch_bytes)} in {ds.batch_tensors} tensor(s) + "
                          f"{ds.batch_objects} other Python object(s)"))
    if ins.batched_ms is not None:
        one = ins.samples.latency_ms.get("mean")
        apart = f" against {one:.3f} ms one by one" if one else ""
        lines.append(Text(f"a batch at once (__getitems__, as a DataLoader fetches it): {ins.batched_ms:.3f} ms per "
                          f"sample{apart}; the CPU ceiling and a worker's rate below are the batch's"))
    pickled = (f"{fmt_bytes(ins.pickle_bytes)} (pickled in {ins.pickle_s or 0:.3f} s)"
               if ins.pickle_bytes is not None else f"cannot be pickled: {ins.pickle_error}")
    lines.append(Text(f"dataset object: {pickled} · start method {ins.environment.start_method}"))
    if ins.gil is not None:
        lines.append(Text(f"threads: a sample {ins.gil.words()}; {threads_advice(ins.gil)}"))
    if ins.cpu_ceiling and ins.cpu_s_per_sample:
        lines.append(Text(
            f"CPU ceiling: {ins.environment.usable_cpus} CPUs ÷ {ins.cpu_s_per_sample * 1000:.2f} ms CPU per "
            f"sample (collation included) = {ins.cpu_ceiling:,.0f} samples/s · one worker delivers "
            f"{ins.worker_rate or 0:,.0f} samples/s", style="bold"))
    return Group(*lines)


def _pass(label: str, reads: PassReads | None) -> Text | None:
    if reads is None:
        return None
    files = "" if reads.files_per_sample is None else f" · {reads.files_per_sample:.2f} files opened per sample"
    return Text(f"{label}: {reads.samples} samples, {reads.wall_ms_mean:.2f} ms each · from storage "
                f"{fmt_bytes(reads.read_bytes_per_sample)} per sample · read() {fmt_bytes(reads.read_chars_per_sample)}"
                f" per sample{files}")


def storage(ins: Inspection) -> RenderableType | None:
    """What the samples read: as the page cache found them, cold and warm; the dataset against the page cache."""
    reads = ins.storage
    if reads is None:
        return None
    lines: list[RenderableType] = [Rule("Storage", align="left")]
    found = reads.footprint
    if found is not None:
        where = ", ".join(p for p in (found.filesystem, found.directory) if p)
        fits = "fits: later epochs read it warm" if found.fits_in_page_cache else \
            "does not fit: every epoch reads from storage"
        lines.append(Text(f"dataset: {fmt_bytes(found.bytes)} in {found.files:,} files ({where}), "
                          f"{100 * (found.cache_ratio or 0):.0f}% of the {fmt_bytes(found.page_cache_bytes)} page "
                          f"cache: it {fits}"))
    lines += [line for line in (_pass("as found", reads.first), _pass("cold", reads.cold), _pass("warm", reads.warm))
              if line is not None]
    if reads.cold is not None and reads.warm is not None and reads.warm.wall_ms_mean:
        lines.append(Text(f"cold samples take {reads.cold.wall_ms_mean / reads.warm.wall_ms_mean:.1f}× as long as "
                          "warm ones (dataprof sweep --cache cold measures what that does to a loader)",
                          style="bold"))
    if reads.note:
        lines.append(Text(f"note: {reads.note}", style="yellow"))
    return Group(*lines)


def checks(ins: Inspection) -> RenderableType | None:
    """Every check, most severe first as analysed."""
    if not ins.checks:
        return None
    lines: list[RenderableType] = [Rule("Checks", align="left")]
    for check in ins.checks:
        head = Text(f"{check.severity}: ", style=SEVERITY_STYLE[check.severity])
        head.append(f"[{check.id}] ", style="dim")
        head.append(check.evidence)
        lines += [head, Padding(Text("→ " + check.recommendation), (0, 0, 0, 2))]
    return Group(*lines)


def print_inspection(console: Console, ins: Inspection) -> None:
    """Print the whole inspect report on ``console``."""
    console.print(header(ins))
    for block in (per_sample(ins), transforms(ins), batch(ins), storage(ins), checks(ins)):
        if block is not None:
            console.print(block)
