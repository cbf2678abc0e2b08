"""Building the target (a dataset, or the user's DataLoader): in the probe (forked by :func:`run_probe`: it checks
and describes it), in a trial, or once in the host."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from dataprof.errors import DataprofError
from dataprof.measure.forked import PR_SET_PDEATHSIG, exit_as_a_script, prctl, reap_orphans, status_text
from dataprof.measure.protocol import Channel, LineReader, LoadRequest, Message, error_event
from dataprof.measure.sweep.events import DatasetBuilt, Found, HostError, heard, said
from dataprof.results.codec import encode
from dataprof.results.vocabulary import DatasetKind, Framework, TrialStatus

if TYPE_CHECKING:
    from dataprof.backends.loaders import LoaderTemplate

class Built(NamedTuple):
    """A built target."""

    dataset: Any
    collate: Any
    """The collate function given (``--collate-fn``); None: the loader's own, or the framework's default."""
    build_s: float
    """Seconds importing and constructing the target took."""
    template: LoaderTemplate | None = None
    """A DataLoader target: the user's loader, rebuilt for each trial; None for a Dataset target."""


def build(request: LoadRequest, objects: Mapping[str, Any]) -> Built:
    """Import and construct the target (a Dataset, or a DataLoader, a DataModule's included) and the collate
    function; the seconds construction took.

    ``objects``: what the Python API handed over, by name (in a host forked from the caller, as it was at
    the fork); such a target is taken as it is, not built.
    """
    from dataprof.backends.loaders import LoaderTemplate
    from dataprof.backends.target import (
        build_target,
        checked,
        datamodule_loader,
        is_datamodule,
        load_collate,
        load_object,
        loader_framework,
        parse_kwarg,
    )

    start = time.perf_counter()
    if request.target in objects:
        made = build_target(objects[request.target], {}, request.target)
    else:
        kwargs = dict(parse_kwarg(item) for item in request.args)
        made = build_target(load_object(request.target, request.cwd), kwargs, request.target)
    origin = None
    if is_datamodule(made):
        origin = f"{type(made).__name__}.{request.split}_dataloader()"
        made = datamodule_loader(made, request.split, request.target)
    made = checked(made, request.target)
    template = LoaderTemplate.of(made, origin) if loader_framework(made) is not None else None
    build_s = time.perf_counter() - start
    name = request.collate_fn
    collate = objects[name] if name is not None and name in objects else load_collate(name, request.cwd)
    return Built(made if template is None else template.dataset, collate, build_s, template)


def probe(request: LoadRequest, built: Built, handed_over: bool) -> Message:
    """Check that the target batches and describe it (in a forked probe, never in the host itself).

    ``handed_over``: the target came from the Python API's caller, whose thread pool (if it started one)
    is dead after the fork, so its trials run single-threaded. A probe whose host imported another framework
    than the target's (``LoadRequest.expected_framework``) reports only the one found: the target is checked
    in a host that never imported the wrong one.
    """
    import multiprocessing

    from dataprof.backends import detect_framework, get_backend
    from dataprof.backends.common import check_batchable, dataset_length
    from dataprof.backends.threads import thread_loader

    dataset, collate, build_s, template = built
    framework = template.framework if template is not None else detect_framework(dataset, request.framework)
    if request.expected_framework not in (None, framework):
        return {"framework": framework}  # forked with another framework imported: checked again without it
    backend = get_backend(framework)
    threads = 1 if handed_over else backend.get_threads()
    kind = backend.dataset_kind(dataset)
    if template is None:
        batch = check_batchable(dataset, kind, collate or backend.default_collate(), int(request.batch_size))
    else:
        batch = template.check(request.given_batch_size, collate, backend.default_collate())
    by_threads = thread_loader(backend.loader_arguments()) if backend.name == Framework.TORCH else None
    return {
        "thread_loader": by_threads,
        "gil": sample_gil(dataset) if request.gil and by_threads is not None and kind == DatasetKind.MAP
        and template is None else None,
        "kind": kind,
        "type_name": type(dataset).__name__,
        "length": dataset_length(dataset),
        "has_getitems": hasattr(type(dataset), "__getitems__"),
        "init_s": build_s,
        **batch,
        "start_method": multiprocessing.get_start_method(),
        "start_methods": multiprocessing.get_all_start_methods(),
        "sharing_strategy": backend.sharing_strategy(),
        "framework": backend.name,
        "framework_version": backend.version(),
        "loader_arguments": list(backend.loader_arguments()),
        "intra_op_threads": threads,
        "loader": None if template is None else template.describe(),
    }


GIL_SAMPLES = 64
"""Samples at most the probe times alone and in two threads, within :func:`release_share_apart`'s budget."""


def sample_gil(dataset: Any) -> dict[str, Any] | None:
    """How much of ``dataset[i]`` releases the GIL (a ``GilShare`` as JSON), measured in a process of its own
    (:func:`release_share_apart`); None when a sample raises (the probe's batch check names it)."""
    from dataprof.measure.gil import release_share_apart

    try:
        return encode(release_share_apart(dataset.__getitem__, range(min(GIL_SAMPLES, len(dataset)))))
    except Exception:
        return None


def describe(exc: BaseException) -> str:
    """An error in one line: a dataprof error's own message, else ``Type: message``."""
    return str(exc) if isinstance(exc, DataprofError) else f"{type(exc).__name__}: {exc}"


def build_in_trial(load: LoadRequest, channel: Channel, objects: Mapping[str, Any]) -> Built:
    """Build the target in the trial itself; an error that the probe did not meet ends the trial as failed."""
    try:
        built = build(load, objects)
    except BaseException as exc:
        channel.send(error_event(TrialStatus.FAILED, f"building the dataset: {describe(exc)}",
                                 traceback.format_exc()))
        os._exit(1)
    channel.send(said(DatasetBuilt(built.build_s)))
    return built


def error_from(exc: BaseException) -> Message:
    """The ``host_error`` event of ``exc``, raised while building or probing the dataset."""
    return said(HostError(describe(exc), traceback.format_exc()))


def run_probe(request: LoadRequest, shared: Built | None, events: Channel, objects: Mapping[str, Any]) -> Message:
    """Fork the probe (it builds the dataset unless ``shared`` holds it) and return its last event.

    ``built`` (the dataset is built; its first batch comes next) is passed on to ``events`` at once.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            channel = Channel(write_fd)
            try:
                built = shared or build(request, objects)
                channel.send(said(DatasetBuilt(built.build_s)))
                event = said(Found("host_ready", probe(request, built, request.target in objects)))
            except BaseException as exc:
                event, code = error_from(exc), 3
            channel.send(event)
            if shared is None:
                exit_as_a_script(code)
        finally:
            os._exit(code)
    os.close(write_fd)
    reader = LineReader(read_fd)
    last: Message | None = None
    while (messages := reader.read()) is not None:
        for event in messages:
            if isinstance(heard(event), DatasetBuilt):
                events.send(event)
            else:
                last = event
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    reap_orphans()
    if last is not None:
        return last
    return said(HostError(f"the process building the dataset died ({status_text(status)})"))
