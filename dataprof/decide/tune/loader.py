"""The loader ``dataprof tune`` tunes, once the script ran as it is (pure): its knobs as the script set them, the
start methods and the thread loader it may try there, and the notes saying what is not tried and why; and what a
run over ranks or nodes means for the figures."""

from __future__ import annotations

import dataclasses

from dataprof.decide.tune.runs import loader_of, others_note
from dataprof.results.run import LoaderRun, RunReport
from dataprof.results.tune import TuneReport
from dataprof.results.vocabulary import Framework, StartMethod


def tuning(report: TuneReport, run: RunReport, found: LoaderRun, *, try_fork: bool, start_methods: tuple[str, ...],
           threads: str | None) -> TuneReport:
    """``report`` with the loader ``found`` in the script's first ``run`` to tune, and the notes saying what is not
    tried: the other loaders of the run; a start method the script chose is kept (not tried otherwise, unless
    ``try_fork``) of ``start_methods``, the platform's; threads (``threads``: what can load them here) not where
    the dataset is a stream or a library builds the loader."""
    notes = [note for note in (others_note(run, found),) if note]
    tuned = loader_of(found, run.environment.device)
    if found.framework == Framework.TORCH:
        kept = found.start_method_chosen and not try_fork
        if kept and found.start_method != StartMethod.FORK:
            notes.append(f"your script starts its workers by {found.start_method}, kept: a start method chosen in "
                         "the script is often a library's need (not fork-safe: h5py, LMDB, tokenizers, CUDA in the "
                         "dataset); fork, which starts workers faster, is not tried (--try-fork tries it)")
        tuned = dataclasses.replace(tuned, start_methods=() if kept else start_methods,
                                    threads=None if found.iterable or found.built_by else threads,
                                    shm_free_bytes=run.environment.shm_free_bytes,
                                    available_ram_bytes=run.environment.available_ram_bytes)
        if found.built_by and not found.iterable:
            notes.append(f"threads are not tried: a library builds the loader ({found.built_by[0]}), and a thread "
                         "loader would replace it in your code")
    return dataclasses.replace(report, loader=tuned, notes=report.notes + tuple(notes))


def ranks_notes(nproc_per_node: int, nnodes: int) -> tuple[str, ...]:
    """What a run of ``nproc_per_node`` ranks on each of ``nnodes`` nodes means for its figures (nothing for one
    rank on one node)."""
    if nproc_per_node == 1 and nnodes == 1:
        return ()
    where = "on this machine, every rank with the same knobs" if nnodes == 1 else \
        f"on each of {nnodes} nodes, started together, every rank with the same knobs (but for a node's own, " \
        "tried last on the node whose ranks wait most for data)"
    return (f"each run is one job of {nproc_per_node} rank(s) {where}; its figure is its slowest rank's (every step "
            "waits for it), its CPU and memory every rank's together",
            "no loader-only sweep to compare: the training runs as several ranks, the loader sweep as one")
