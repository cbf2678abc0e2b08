"""Compare two saved documents of a kind: per config (or loader), the headline rate, whether the machines
match. Pure.

``dataprof compare OLD.json NEW.json`` and ``dataprof sweep --baseline OLD.json``
both use :func:`compare`; a regression is the recommended throughput falling
by more than the threshold. Runs from different environments are compared
all the same, but every verdict says so.
"""

from __future__ import annotations

from dataprof.results.compare import Comparison, ConfigChange, LoaderChange, RunComparison
from dataprof.results.environment import Environment
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.units import fmt_bytes

ENVIRONMENT_FIELDS = (("usable_cpus", "usable CPUs"), ("cpu_count", "CPUs"), ("world_size", "ranks"),
                      ("nodes", "nodes"), ("framework", "framework"),
                      ("framework_version", "framework version"), ("device", "device"), ("gpu_name", "GPU"),
                      ("python", "Python"))


MEMORY_FIELDS = (("ram_bytes", "RAM", 1.1), ("shm_free_bytes", "/dev/shm free", 2.0))
"""Sizes that change what a loader can hold, the factor by which they must differ to count (free /dev/shm moves
from run to run)."""


def machine_changes(old: Environment, new: Environment) -> list[str]:
    """What differs between two machines (CPUs, ranks, framework, device, Python, the workers' start method and
    limits: RAM, free /dev/shm, open files), ``label: before → after``."""
    changes = []
    for name, label in (*ENVIRONMENT_FIELDS, ("cpu_quota", "CPU quota"), ("start_method", "start method"),
                        ("open_files_limit", "open-file limit")):
        if name == "framework_version" and old.framework == new.framework:
            label = new.framework
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            changes.append(f"{label}: {before} → {after}")
    for name, label, factor in MEMORY_FIELDS:
        before, after = getattr(old, name), getattr(new, name)
        if before and after and max(before, after) >= factor * min(before, after):
            changes.append(f"{label}: {fmt_bytes(before)} → {fmt_bytes(after)}")
    return changes


def environment_changes(old: Report, new: Report) -> tuple[str, ...]:
    """What differs between the runs' machines and settings, one ``label: before → after`` each."""
    changes = machine_changes(old.environment, new.environment)
    for key, label in (("batch_size", "batch size"), ("step_ms", "model step ms")):
        before, after = getattr(old.settings, key), getattr(new.settings, key)
        if before != after:
            changes.append(f"{label}: {before} → {after}")
    if old.target != new.target:
        changes.append(f"target: {old.target} → {new.target}")
    return tuple(changes)


def compare(old: Report, new: Report, threshold: float | None = None) -> Comparison:
    """Match the sweeps' trials by config and say what changed (``threshold``: the fall allowed)."""
    old_trials = {t.config: t for t in old.trials}
    new_trials = {t.config: t for t in new.trials}
    common = tuple(ConfigChange(c, old_trials[c], new_trials[c]) for c in sorted(old_trials) if c in new_trials)
    return Comparison(
        old=old, new=new, common=common,
        only_old=tuple(c for c in sorted(old_trials) if c not in new_trials),
        only_new=tuple(c for c in sorted(new_trials) if c not in old_trials),
        environment_changes=environment_changes(old, new), threshold=threshold,
    )


def compare_runs(old: RunReport, new: RunReport, threshold: float | None = None) -> RunComparison:
    """Match the runs' loaders by creation site and say what changed (``threshold``: the fall allowed)."""
    old_by, new_by = {r.site: r for r in old.loaders}, {r.site: r for r in new.loaders}
    changes = machine_changes(old.environment, new.environment)
    if old.command != new.command:
        changes.append(f"command: {' '.join(old.command)} → {' '.join(new.command)}")
    return RunComparison(old=old, new=new,
                         loaders=tuple(LoaderChange(site, old_by[site], new_by[site]) for site in old_by
                                       if site in new_by),
                         only_old=tuple(site for site in old_by if site not in new_by),
                         only_new=tuple(site for site in new_by if site not in old_by),
                         environment_changes=tuple(changes), threshold=threshold)




def compare_documents(old: Report | RunReport, new: Report | RunReport,
                      threshold: float | None = None) -> Comparison | RunComparison:
    """Two sweeps or two runs side by side (``threshold``: the fall allowed); TypeError for two of a kind
    that are not (the caller names the files)."""
    if isinstance(old, Report) and isinstance(new, Report):
        return compare(old, new, threshold)
    if isinstance(old, RunReport) and isinstance(new, RunReport):
        return compare_runs(old, new, threshold)
    raise TypeError(f"cannot compare a {type(old).__name__} with a {type(new).__name__}")
