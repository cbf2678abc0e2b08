"""What a sweep report shows, block by block, as plain text: the one description the console and HTML share.

Each function reads a decided Report and returns strings and rows; the
console renderer lays them out with rich, the HTML renderer with tags. No
figure is computed here that the data or decision layers already define
(speedup, best per worker count, the CPU text come from there). The severity colours here are every console
report's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.decide.crashes import explained
from dataprof.decide.diagnose.facts import cpus_text, sampled_batch
from dataprof.decide.search import AUTOTUNE_RULE
from dataprof.render.cache import storage_text
from dataprof.render.threads import kinds_text, thread_loader_code
from dataprof.results.environment import UserLoader
from dataprof.results.knobs import LoaderConfig
from dataprof.results.plan import Feeding
from dataprof.results.sweep import AutotuneRun, Report
from dataprof.results.vocabulary import TITLES, CacheMode, DatasetKind, FindingId, Framework, Severity, TrialStatus


def num(value: float | None, fmt: str) -> str:
    """``value`` formatted, ``–`` when unknown."""
    return "–" if value is None else format(value, fmt)


def percent(share: float | None, fmt: str = ".0f") -> str:
    """A share (0.25) as a percentage number (``25``), ``–`` when unknown."""
    return num(None if share is None else 100 * share, fmt)


def feeding_text(feeding: Feeding) -> str:
    """``this pipeline needs 9.5 CPUs per rank (13 workers) to feed a 120 ms step at batch 256; with 12 it has
    26% headroom``, or why no CPU count can."""
    step = f"a {feeding.step_ms:g} ms step at batch {feeding.batch_size}"
    if feeding.cpus_per_rank is None:
        return f"no CPU count feeds {step}: {feeding.reason}"
    if feeding.workers == 0:
        need = f"the main process alone feeds {step}, without workers"
    else:
        need = (f"this pipeline needs {feeding.cpus_per_rank:.1f} CPUs per rank ({feeding.workers} worker"
                f"{'s' if feeding.workers != 1 else ''}) to feed {step}")
    headroom = feeding.headroom or 0.0
    have = f"{feeding.cpus:g}"
    if headroom >= 1:
        return f"{need}; with {have} it has {1 + headroom:.1f}× what it needs"
    return f"{need}; with {have} it has {headroom:.0%} headroom" if headroom >= 0 else \
        f"{need}; {have} are {-headroom / (1 + headroom):.0%} too few"


def dataloader_line(config: LoaderConfig, batch_size: int, shuffle: bool, collate_fn: str | None) -> str:
    """``DataLoader(dataset, batch_size=64, …)`` (Paddle: ``paddle.io.DataLoader(…)``) for the recommended config."""
    parts = ["dataset", f"batch_size={batch_size}"]
    if shuffle:
        parts.append("shuffle=True")
    parts.extend(f"{name}={value!r}" for name, value in config.dataloader_kwargs().items())
    if collate_fn:
        parts.append(f"collate_fn={collate_fn.rpartition(':')[2]}")
    loader = "paddle.io.DataLoader" if config.framework == Framework.PADDLE else "DataLoader"
    return f"{loader}({', '.join(parts)})"


def device_text(report: Report) -> str:
    """``simulated device (no GPU)`` or ``cuda:0 NVIDIA H200``."""
    env = report.environment
    return "simulated device (no GPU)" if env.simulated_device else f"{env.device} {env.gpu_name or ''}".strip()


def dataset_text(report: Report) -> str:
    """``MyDataset (map, 1000 samples, loaded in 0.12 s)``; empty before the dataset loaded."""
    ds = report.dataset
    if ds is None:
        return ""
    return (f"{ds.type_name} ({ds.kind}, {ds.length if ds.length is not None else '?'} samples, "
            f"loaded in {ds.init_s:.2f} s)")


def header_lines(report: Report) -> list[str]:
    """Who measured what, where: the lines above the answer."""
    env = report.environment
    step = report.settings.step_ms
    model = f"model step {step:g} ms" if step else "no model step (loader ceiling)"
    loader = "paddle.io.DataLoader" if env.framework == Framework.PADDLE else "torch DataLoader"
    lines = [
        f"dataprof {report.tool_version} · {report.target} {dataset_text(report)}".rstrip(),
        f"{loader} ({env.framework} {env.framework_version or '?'}) · {batch_text(report)}"
        f" · {model} · {device_text(report)} · {env.cpu_reason}",
    ]
    if report.dataset is not None and report.dataset.loader:
        lines.append(loader_text(report.dataset.loader))
    lines.append(start_method_text(report))
    skipped = report.settings.space.skipped
    if skipped:
        lines.append(f"skipped: {', '.join(skipped)} (not an argument of this {env.framework} version's DataLoader)")
    if env.world_size > 1:
        stream = report.dataset is not None and report.dataset.kind == DatasetKind.ITERABLE
        shard = "its own stream (an IterableDataset splits itself by rank)" if stream else \
            "its DistributedSampler shard"
        lines.append(f"{env.world_size} ranks ({env.nodes} node(s) × {env.local_world_size}), each loading {shard}; "
                     f"configs are per rank, samples/s = {env.world_size} × the slowest rank's, the pace of "
                     "synchronous training")
    return lines


def start_method_text(report: Report) -> str:
    """``workers start by fork (Python's default here; spawn also measured)``."""
    default = report.environment.start_method or "?"
    others = sorted({t.config.multiprocessing_context for t in report.trials
                     if t.config.num_workers and t.config.multiprocessing_context})
    measured = f"; {', '.join(others)} also measured" if others else ""
    return f"workers start by {default} (Python's default here{measured})"


def batch_text(report: Report) -> str:
    """``batch size 64``; for a loader whose batch sampler makes its batches, their mean size in the trials."""
    mean = sampled_batch(report)
    return f"batch size {report.settings.batch_size}" if mean is None else f"batches of {mean} samples on average"


def loader_text(loader: UserLoader) -> str:
    """``your TaggedLoader (batch_size 8, sampler EvenSampler, …, also tag): rebuilt for each trial …``."""
    kept = [f"batch_sampler {loader.batch_sampler}" if loader.batch_sampler else f"batch_size {loader.batch_size}"]
    kept += [f"{name} {value}" for name in ("sampler", "collate_fn", "worker_init_fn")
             if (value := getattr(loader, name))]
    kept += ["shuffle"] * loader.shuffle + ["drop_last"] * loader.drop_last
    if loader.extra_arguments:
        kept.append(f"its own {', '.join(loader.extra_arguments)}")
    where = f" from {loader.origin}" if loader.origin else ""
    return (f"your {loader.name}{where} ({', '.join(kept)}): rebuilt from {loader.rebuilt_from} "
            "for each trial, only the swept knobs changed")


@dataclass(frozen=True)
class Answer:
    """The recommendation block."""

    headline: str
    """``w4 pf2 persist: 812.3 samples/s (3.10× num_workers=0) · 80% of what 2 CPUs can do (…)``."""
    reason: str
    loader_line: str
    """The ready-to-paste ``DataLoader(...)``: with the user's own settings known, only what changes."""
    yours: str | None = None
    """``your settings (w8 pf2 persist, MyLoader): X samples/s → recommended (…): Y samples/s, Z× as fast``."""
    feeding: str | None = None
    """With a model step: the CPUs per rank feeding it takes (:func:`feeding_text`)."""
    storage: str | None = None
    """With data files: the dataset against the page cache, and the epoch forecast (:func:`storage_text`)."""
    kinds: str | None = None
    """With thread and process configs measured: the fastest of each kind (:func:`kinds_text`)."""


def your_settings(report: Report) -> str | None:
    """The user's own settings against the recommendation, in one line; None when the target carried none."""
    mine, rec = report.current, report.recommendation
    if mine is None:
        return None
    yours = f"your settings ({mine.config.label()}, {mine.source})"
    best = "" if rec is None else f"recommended ({rec.config.label()}): {rec.samples_per_s:,.1f} samples/s"
    if mine.samples_per_s is None:
        trial = next((t for t in report.trials if t.config == mine.config), None)
        state = "not measured in this run" if trial is None else f"{trial.status}: {explained(trial.error)}"
        return f"{yours}: {state}" + (f" → {best}" if best else "")
    rate = f"{mine.samples_per_s:,.1f} samples/s"
    if rec is None:
        return f"{yours}: {rate}"
    if rec.config == mine.config:
        return f"{yours}: {rate}, the recommended config: keep them"
    if mine.within_noise:
        return f"{yours}: {rate}, within noise of the {best}"
    return f"{yours}: {rate} → {best}, {mine.recommended_speedup or 0:.2f}× as fast"


def changes_line(report: Report) -> str:
    """The user's loader call with only the knobs the recommendation changes (``...``: the rest as it is)."""
    mine, rec = report.current, report.recommendation
    assert mine is not None and rec is not None
    loader = report.dataset.loader if report.dataset is not None else None
    name = loader.name if loader is not None else \
        ("paddle.io.DataLoader" if rec.config.framework == Framework.PADDLE else "DataLoader")
    if not mine.changes:
        return f"keep your {name}(...) as it is"
    where = f"in {loader.origin}, " if loader is not None and loader.origin else ""
    return (f"{name}(..., {', '.join(f'{knob}={rec.config.value(knob)!r}' for knob in mine.changes)})  "
            f"# {where}the rest as you have it")


def answer(report: Report) -> Answer | None:
    """The recommendation, its speedup and CPU-ceiling share, why, and its DataLoader line; None if none."""
    rec = report.recommendation
    if rec is None:
        return None
    speed = f" ({rec.speedup_vs_baseline:.2f}× num_workers=0)" if rec.speedup_vs_baseline else ""
    ceiling = "" if rec.cpu_ceiling_share is None else (
        f" · {rec.cpu_ceiling_share:.0%} of what {cpus_text(report)} can do "
        f"(CPU ceiling {rec.cpu_ceiling_samples_per_s:,.0f} samples/s)")
    batch, shuffle, collate = report.settings.batch_size, report.settings.shuffle, report.settings.collate_fn
    if rec.config.threads:
        batched = report.dataset is not None and bool(report.dataset.has_getitems)
        line = thread_loader_code(rec.config, batch, shuffle, collate, report.settings.space.thread_loader,
                                  report.settings.drop_last, batched)
    else:
        line = changes_line(report) if report.current is not None else \
            dataloader_line(rec.config, batch, shuffle, collate)
    cold = " cold" if rec.cache == CacheMode.COLD else ""
    return Answer(f"{rec.config.label()}: {rec.samples_per_s:,.1f} samples/s{cold}{speed}{ceiling}", rec.reason,
                  line, your_settings(report), None if report.feeding is None else feeding_text(report.feeding),
                  storage_text(report), kinds_text(report))


@dataclass(frozen=True)
class FindingView:
    """One finding as shown: the primary verdict first."""

    label: str
    """``Bottleneck`` for the primary verdict, ``Finding`` otherwise."""
    title: str
    id: FindingId
    severity: Severity
    evidence: str
    recommendation: str


def findings(report: Report) -> list[FindingView]:
    """The diagnosis, primary verdict first, with the human title of each id."""
    return [FindingView("Bottleneck" if index == 0 and report.primary is not None else "Finding",
                        TITLES[f.id], f.id, f.severity, f.evidence, f.recommendation)
            for index, f in enumerate(report.findings)]


def autotune_text(run: AutotuneRun) -> str:
    """What Paddle's own autotune tried and picked, in its own numbers."""
    if run.status != TrialStatus.OK:
        return f"Paddle's autotune (tuning_steps={run.tuning_steps}): {run.status}: {run.error}"
    if run.skipped:
        return f"Paddle's autotune (paddle.incubate.autotune) tuned nothing: {run.skipped}; it keeps num_workers=" \
               f"{run.num_workers}"
    tried = ", ".join(f"w{w} {1000 * s:.1f} ms/batch" for w, s in run.evaluations) or "nothing logged"
    return (f"Paddle's autotune (paddle.incubate.autotune, tuning_steps={run.tuning_steps}) tries 0, 2, 4, … "
            f"below cpu_count/2 = {run.max_workers:g} and keeps a count only when ≥ 25% faster: {tried}; "
            f"it picked num_workers={run.num_workers} in {run.wall_s or 0:.1f} s")


def rules_of_thumb(report: Report) -> list[tuple[str, bool]]:
    """(line, the recommendation beats it beyond noise) for Paddle's autotune and each rule of thumb."""
    if not (report.rules_of_thumb or report.autotune) or report.recommendation is None:
        return []
    usable = report.environment.usable_cpus
    lines = [(autotune_text(report.autotune), False)] if report.autotune is not None else []
    for row in report.rules_of_thumb:
        head = f"{row.rule} ({usable} CPUs) → {row.config.label()}" if row.rule != AUTOTUNE_RULE \
            else f"{row.rule} → {row.config.label()} (paddle.io.DataLoader's defaults)"
        if row.samples_per_s is None:
            lines.append((f"{head}: {'not measured in this run' if row.status is None else row.status}", False))
        elif row.within_noise and row.config == report.recommendation.config:
            lines.append((f"{head}: {row.samples_per_s:,.1f} samples/s, within noise of the recommendation: "
                          "the advice is right here", False))
        elif row.within_noise:
            lines.append((f"{head}: {row.samples_per_s:,.1f} samples/s, within noise of the recommendation (these "
                          "trials cannot tell them apart)", False))
        else:
            lines.append((f"{head}: {row.samples_per_s:,.1f} samples/s; the recommendation is "
                          f"{row.recommended_speedup or 0:.2f}× as fast", True))
    if report.environment.framework == Framework.TORCH and report.environment.simulated_device \
            and any(r.config.pin_memory is False for r in report.rules_of_thumb):
        lines.append(("(the rules also say pin_memory=True, which needs a GPU)", False))
    return lines


def failures(report: Report) -> list[str]:
    """One line per trial that did not finish: what happened, in a sentence."""
    return [f"{t.config.label()}: {t.status}: {explained(t.error)}" for t in report.trials
            if t.status != TrialStatus.OK]


PARTIAL = "Partial result: the sweep did not finish."
NO_RESULT = "No configuration completed: see the reasons above."


SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
"""How every console report colours a severity."""
