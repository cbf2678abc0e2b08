"""Building the target's dataset: in the probe (which checks and describes it), in a trial, or once in the host."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping
from typing import Any

from dataprof.errors import DataprofError
from dataprof.measure.protocol import Channel, LoadRequest, Message

Built = tuple[Any, Any, float]
"""A built dataset, its collate function (None: the framework's default) and the seconds building took."""


def build(request: LoadRequest, objects: Mapping[str, Any]) -> Built:
    """Import and construct the target's dataset and collate function; the seconds construction took.

    ``objects``: what the Python API handed over, by name (in a host forked from the caller, as it was at
    the fork); such a target is taken as it is, not built.
    """
    from dataprof.target import build_dataset, load_collate, load_object, parse_kwarg

    start = time.perf_counter()
    if request.target in objects:
        dataset = objects[request.target]
    else:
        kwargs = dict(parse_kwarg(item) for item in request.args)
        dataset = build_dataset(load_object(request.target, request.cwd), kwargs, request.target)
    build_s = time.perf_counter() - start
    name = request.collate_fn
    collate = objects[name] if name is not None and name in objects else load_collate(name, request.cwd)
    return dataset, collate, build_s


def probe(request: LoadRequest, built: Built, handed_over: bool) -> Message:
    """Check that the dataset batches and describe it (in a forked probe, never in the host itself).

    ``handed_over``: the dataset came from the Python API's caller, whose thread pool (if it started one)
    is dead after the fork, so its trials run single-threaded.
    """
    import multiprocessing

    from dataprof.backends import detect_framework, get_backend
    from dataprof.backends.common import check_batchable, dataset_length

    dataset, collate, build_s = built
    backend = get_backend(detect_framework(dataset, request.framework))
    threads = 1 if handed_over else backend.get_threads()
    kind = backend.dataset_kind(dataset)
    batch = check_batchable(dataset, kind, collate or backend.default_collate(), int(request.batch_size))
    return {
        "kind": kind,
        "type_name": type(dataset).__name__,
        "length": dataset_length(dataset),
        "has_getitems": hasattr(type(dataset), "__getitems__"),
        "init_s": build_s,
        **batch,
        "start_method": multiprocessing.get_start_method(),
        "sharing_strategy": backend.sharing_strategy(),
        "framework": backend.name,
        "framework_version": backend.version(),
        "loader_arguments": list(backend.loader_arguments()),
        "intra_op_threads": threads,
    }


def describe(exc: BaseException) -> str:
    """An error in one line: a dataprof error's own message, else ``Type: message``."""
    return str(exc) if isinstance(exc, DataprofError) else f"{type(exc).__name__}: {exc}"


def build_in_trial(load: LoadRequest, channel: Channel, objects: Mapping[str, Any]) -> tuple[Any, Any]:
    """Build the dataset in the trial itself; an error that the probe did not meet ends the trial as failed."""
    try:
        dataset, collate, build_s = build(load, objects)
    except BaseException as exc:
        channel.send({"ev": "error", "status": "failed", "message": f"building the dataset: {describe(exc)}",
                      "traceback": traceback.format_exc()})
        os._exit(1)
    channel.send({"ev": "built", "build_s": build_s})
    return dataset, collate
