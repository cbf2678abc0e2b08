"""The options of ``dataprof sweep`` (and TARGET, shared with ``inspect``), with their choices from the
registries of the layers below; ``cli`` attaches them to its commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dataprof.cli.params import CURRENT, KEY_VALUE, SIZE, WORKERS, OutputPath, knob_type, percent
from dataprof.decide.search import STRATEGIES
from dataprof.results.registry import FRAMEWORKS, REGISTRY
from dataprof.results.request import SPLITS
from dataprof.results.settings import CACHE_MODES
from dataprof.results.vocabulary import Severity

FRAMEWORK_CHOICES = ("auto", *FRAMEWORKS)
"""``--framework``: ``auto`` (detected from the dataset) or one of the frameworks dataprof drives."""
STRATEGY_CHOICES = tuple(STRATEGIES)
"""``--strategy``: the search strategies, by name (adaptive first, the default)."""
SPLIT_CHOICES = tuple(SPLITS)
"""``--split``: the DataModule loaders dataprof can sweep."""
FAIL_ON_CHOICES = tuple(level.value for level in Severity if level.rank > Severity.INFO.rank)
"""``--fail-on``: the finding severities that can fail a gate."""


def target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """TARGET and --arg, shared by the commands that load a dataset."""
    fn = click.option("--arg", "args", multiple=True, metavar="KEY=VALUE", type=KEY_VALUE,
                      help="Keyword argument for a class or factory target (Python literal, else string). "
                           "Repeatable.")(fn)
    return click.argument("target")(fn)


def knob_options() -> list[Callable[..., Any]]:
    """The knobs' options, from their records (:data:`~dataprof.results.knobs.REGISTRY`), in ``--help`` order."""
    return [click.option(knob.flag, default=knob.default, show_default=knob.default is not None,
                         type=knob_type(knob), help=knob.help, metavar=knob.metavar)
            for knob in sorted(REGISTRY, key=lambda knob: knob.flag_rank)]


def sweep_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every option of ``dataprof sweep`` (TARGET included), in the order ``--help`` lists them."""
    for option in reversed(SWEEP_OPTIONS):
        fn = option(fn)
    return target_options(fn)


SWEEP_OPTIONS = (
    click.option("--batch-size", type=click.IntRange(min=1), default=None,
                 help="Batch size, as in training [default: a DataLoader target's own, else 64]."),
    click.option("--split", type=click.Choice(SPLIT_CHOICES), default="train", show_default=True,
                 help="A LightningDataModule target: which <split>_dataloader() to sweep (setup('fit') before train "
                      "and val)."),
    click.option("--current", default=None, metavar="KNOBS", type=CURRENT,
                 help="Your settings, e.g. num_workers=8,prefetch_factor=2 (worker_kind=thread: threads of the one "
                      "process): measured like the baseline and shown first against the best (a DataLoader target "
                      "carries its own)."),
    click.option("--workers", default="auto", show_default=True, type=WORKERS,
                  help="num_workers values: a list like 0,2,4,8, or 'auto': adaptive climbs 2,4,8,… (up to "
                       "max(128, 4× usable CPUs)) while throughput rises; grid tries 0,1,2,4,… up to 2× usable "
                       "CPUs."),
    click.option("--framework", type=click.Choice(FRAMEWORK_CHOICES), default="auto", show_default=True,
                  help="Whose DataLoader to sweep; auto: paddle.io.DataLoader for a paddle.io dataset, else "
                       "PyTorch's."),
    *knob_options(),
    click.option("--step-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
                  help="Model step time to simulate per batch; 0 measures the loader's ceiling."),
    click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
    click.option("--strategy", type=click.Choice(STRATEGY_CHOICES), default="adaptive", show_default=True,
                  help="adaptive: climb num_workers while it pays, refine, tune the other knobs at the count the "
                       "recommendation would take; "
                       "grid: every combination."),
    click.option("--trial-seconds", type=click.FloatRange(min=0.1), default=3.0, show_default=True,
                  help="Longest steady-state window of a trial; it ends sooner once the rate is steady, or "
                       "once it settles the search's question (slower than the best so far beyond the noise; "
                       "a climb trial: slower or faster)."),
    click.option("--trial-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
                  help="Kill a trial that delivers no batch for this many seconds."),
    click.option("--memory-limit", default="80%", show_default=True, type=SIZE,
                  help="Kill a trial whose processes' PSS passes this: bytes, 3GB, 512MiB or % of available RAM."),
    click.option("--collate-fn", default=None, metavar="MOD:ATTR", help="Collate function to use."),
    click.option("--shuffle/--no-shuffle", default=False, show_default=True, help="Shuffle indices, as in training."),
    click.option("--rules-of-thumb/--no-rules-of-thumb", default=True, show_default=True,
                  help="Also measure what 0.75 × CPUs and CPUs − 1 workers give (and, for Paddle, what Paddle's own "
                       "dataloader autotune picks), to compare with the recommendation."),
    click.option("--autotune-steps", type=click.IntRange(min=3), default=50, show_default=True,
                  help="Paddle: tuning_steps (batches per tried num_workers) for Paddle's autotune; Paddle's own "
                       "default is 500."),
    click.option("--json", "json_path", type=OutputPath(), default=None,
                  help="Write the result document here (updated after every trial)."),
    click.option("--html", "html_path", type=OutputPath(), default=None,
                  help="Also write a self-contained HTML report with charts (needs the 'html' extra)."),
    click.option("--resume", "resume_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Continue the sweep saved in this --json file, skipping configs already measured."),
    click.option("--min-throughput", type=click.FloatRange(min=0), default=None, metavar="N",
                  help="Gate: exit 1 if the recommended config loads fewer samples/s."),
    click.option("--min-speedup", type=click.FloatRange(min=0), default=None, metavar="X",
                  help="Gate: exit 1 if the recommendation is less than X times as fast as num_workers=0."),
    click.option("--fail-on", type=click.Choice(FAIL_ON_CHOICES), default=None,
                  help="Gate: exit 1 on a diagnosis finding at least this severe."),
    click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Gate: a saved --json run to compare with (see --max-regression)."),
    click.option("--max-regression", default=None, metavar="PCT", type=percent("--max-regression"),
                  help="With --baseline: exit 1 if the recommended throughput falls by more than this (default 10%)."),
    click.option("--cpus", type=int, default=None, metavar="N",
                 help="Run the trials pinned to N of the usable CPUs (affinity): measure as a rank with N CPUs "
                      "would load [default: all of them]."),
    click.option("--cache", type=click.Choice(CACHE_MODES), default="auto", show_default=True,
                 help="Cold trials: evict the data files the trials read from the page cache (no root, nothing "
                      "written) and measure the first pass. auto: when the dataset reads files; cold: the "
                      "recommendation is measured cold whatever fits in RAM; both: every config warm and cold; "
                      "warm: never."),
    click.option("--nproc-per-node", type=click.IntRange(min=1), default=None, metavar="P",
                  help="Run P ranks on this machine, as a DDP job would (torch.distributed's launcher, gloo): each "
                       "loads its DistributedSampler shard with the same config at the same time; rank 0 reports. "
                       "Under torchrun, give the ranks to torchrun instead."),
    click.option("--require-gpu", is_flag=True,
                  help="Usage error (exit 2) unless a CUDA device is used, so a GPU runner cannot pass on the CPU."),
)
"""``dataprof sweep``'s options, in the order ``--help`` lists them."""
