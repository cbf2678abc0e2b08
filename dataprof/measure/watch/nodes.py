"""``dataprof tune`` across nodes: the same command on every node, node 0 deciding each run and telling the others.

Node 0's dataprof serves a key-value store (torch.distributed's ``TCPStore``) at ``--master-addr:--master-port``;
the other nodes' connect to it. Before each run, node 0 says the run's watch settings (its knobs, its window, its
limits) and the run's id under ``run-<n>``; every node then launches its ranks of that one job, which meet at the
port beside it (``--master-port`` + 1, torchrun's static rendezvous, node 0 hosting). After the last run node 0
says ``end``. Nothing is shared but the network.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from dataprof.errors import DataprofError
from dataprof.measure.watch.meeting import ALIVE_EVERY_S, ALIVE_KEY, Silences
from dataprof.measure.watch.settings import WatchSettings
from dataprof.results.codec import decode, encode
from dataprof.results.environment import NodeJob
from dataprof.results.registry import value_fits
from dataprof.results.run import RunChanges
from dataprof.version import __version__

HEARD_S = 180.0
"""How long past a run's own limit a node other than 0 waits for node 0 to say the next (node 0 gone)."""
END = "end"
STOPPED_KEY = "stopped"
"""Where node 0 says why it stopped a run (``stopped-<run>``): the other nodes stop theirs, naming the node."""
HEARD_KEY = "heard-end"
"""Where each node other than 0 says it heard the end (``heard-end-<node>``)."""


def listening_on(addr: str, port: int) -> socket.socket | None:
    """A socket listening at ``port`` on ``addr``'s interface alone, for node 0's store (torch's TCPStore listens
    on every interface unless handed one); None where ``addr`` is no address of this machine's (a name that
    resolves elsewhere, behind a NAT) or its port is taken: the store then binds as torch does, and says why it
    cannot."""
    try:
        family, kind, proto, _, where = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
    except (OSError, IndexError):
        return None
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen()
    except OSError:
        listener.close()
        return None
    return listener


class TuneNodes:
    """Node 0's word to the other nodes: each run's settings, then the end."""

    def __init__(self, job: NodeJob, said: Callable[[str], None] | None = None) -> None:
        from torch.distributed import TCPStore

        self.job = job
        self.said = said or (lambda line: print(f"warning: {line}", file=sys.stderr))
        """Where another node says, in one line, what it ignored of node 0's word."""
        listener = listening_on(job.master_addr, job.master_port) if job.leader else None
        # the store owns the socket from here and closes it: a Python socket object still holding the descriptor
        # would close it again when collected, by then perhaps another socket's or pipe's
        listen_fd = None if listener is None else listener.detach()
        try:
            self.store = TCPStore(job.master_addr, job.master_port, is_master=job.leader,
                                  timeout=timedelta(seconds=job.join_s), wait_for_workers=False,
                                  master_listen_fd=listen_fd)
        except (RuntimeError, ValueError, TimeoutError) as exc:
            where = f"{job.master_addr}:{job.master_port}"
            raise DataprofError(
                f"node {job.node_rank}: " + (f"could not serve the tune's meeting at {where} ({exc}): another "
                                             "--master-port" if job.leader else
                                             f"node 0's dataprof tune could not be reached at {where} within "
                                             f"{job.join_s:g} s: start it there with the same --master-addr and "
                                             "--master-port")) from None
        self._quiet = threading.Event()
        self.gone: set[int] = set()
        """Node 0: the nodes found silent during a run (:meth:`watched`); the end waits for none of them."""
        self._beating = threading.Thread(target=self._alive, name="dataprof-node-alive", daemon=True)
        self._beating.start()

    def _client(self) -> Any:
        from torch.distributed import TCPStore

        return TCPStore(self.job.master_addr, self.job.master_port, is_master=False,
                        timeout=timedelta(seconds=self.job.join_s))

    def _alive(self) -> None:
        """Every node, until it hears the end (or :meth:`close`): count that it is there, on a connection of its
        own (node 0 too: the others watch it)."""
        try:
            store = self._client()
            while True:
                store.add(f"{ALIVE_KEY}-{self.job.node_rank}", 1)
                if self._quiet.wait(ALIVE_EVERY_S):
                    return
        except (RuntimeError, ValueError, TimeoutError):  # node 0 gone: the main thread finds it so
            return

    def close(self) -> None:
        """Stop counting that this node is there (another node: node 0's store may go at any moment now), and
        wait for the thread that counts to end (a process that exits with it in the store's client aborts)."""
        self._quiet.set()
        if self._beating is not threading.current_thread():
            self._beating.join(timeout=self.job.join_s)

    def leave(self) -> None:
        """Another node, ending before node 0's end (node 0 stopped its run): node 0's end need not wait for it."""
        self.close()
        try:
            self.store.set(f"{HEARD_KEY}-{self.job.node_rank}", "1")
        except (RuntimeError, ValueError, TimeoutError):  # node 0 gone
            pass

    @contextmanager
    def watched(self, number: int, gone: Callable[[str], None]) -> Iterator[None]:
        """While run ``number`` goes, on every node: ``gone(why)``, once, when the run must stop here. Node 0
        watches every other node: one that had counted that it is there and has not for the join timeout (it
        died, or its network did) stops the run, and node 0 says why under ``stopped-<number>`` for the others.
        Another node watches node 0: it stops when node 0 said so, or when node 0 is silent for the join timeout.
        A node that never came is the launch's to find (its ranks do not join the run's rendezvous)."""
        if self.job.nnodes < 2:
            yield
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._watch, args=(number, gone, stop), name="dataprof-nodes-watch",
                                  daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2 * ALIVE_EVERY_S)  # out of the store's client before the process may exit

    def _watch(self, number: int, gone: Callable[[str], None], stop: threading.Event) -> None:
        try:
            store = self._client()
            silences = Silences(self.job.join_s)
            watched = range(1, self.job.nnodes) if self.job.leader else (0,)
            while not stop.wait(ALIVE_EVERY_S):
                if not self.job.leader and store.check([f"{STOPPED_KEY}-{number}"]):
                    gone(f"node 0 stopped run {number}: {store.get(f'{STOPPED_KEY}-{number}').decode()}")
                    return
                for node in watched:
                    silent = silences.silent_for(node, store.add(f"{ALIVE_KEY}-{node}", 0))
                    if silent is not None:
                        why = (f"node {node} stopped answering during run {number} (nothing from its dataprof for "
                               f"{silent:.0f} s, the join timeout)")
                        if self.job.leader:
                            self.gone.add(node)
                            store.set(f"{STOPPED_KEY}-{number}", why)
                        gone(why)
                        return
        except (RuntimeError, ValueError, TimeoutError):  # the store is closing (node 0 ends): the run ends
            return

    def say(self, number: int, settings: WatchSettings, run_id: str,
            node_changes: dict[int, RunChanges | None] | None = None) -> None:
        """Node 0: run ``number`` is ``settings``'s window, limits and changes (the others run their own script, in
        their own directory, with their own environment), with each node's own changes to its loader
        (``node_changes``, by node) in place of node 0's."""
        nodes = {str(node): None if changes is None else encode(changes)
                 for node, changes in (node_changes or {}).items()}
        said = {name: getattr(settings, name) for name in SAID}
        said["changes"] = None if settings.changes is None else encode(settings.changes)
        said["role"] = settings.env.get("DATAPROF_TRIAL_ROLE", "")
        self.store.set(f"run-{number}", json.dumps({"protocol": PROTOCOL, "dataprof": __version__, "run_id": run_id,
                                                     "settings": said, "nodes": nodes}))

    def end(self, number: int) -> None:
        """Node 0: no run ``number``; the others stop. It waits (up to the join timeout) until each has heard it
        (its store goes when it exits), each but those found gone and those that never came (no count of being
        there: a node that never joined is not waited for twice)."""
        self.close()
        try:
            listening = [f"{HEARD_KEY}-{node}" for node in range(1, self.job.nnodes)
                         if node not in self.gone and self.store.add(f"{ALIVE_KEY}-{node}", 0) > 0]
            self.store.set(f"run-{number}", END)
            if listening:
                self.store.wait(listening, timedelta(seconds=self.job.join_s))
        except (RuntimeError, ValueError, TimeoutError):  # a node that no longer listens
            pass

    def hear(self, number: int, wait_s: float) -> tuple[WatchSettings, str] | None:
        """Another node: run ``number``'s settings (:func:`heard`) and id, or None when node 0 said the end.
        DataprofError when it said nothing within ``wait_s``, or what it said is not this dataprof's."""
        key = f"run-{number}"
        try:
            self.store.wait([key], timedelta(seconds=wait_s))
            text = self.store.get(key).decode()
        except (RuntimeError, ValueError, TimeoutError):
            raise DataprofError(f"node {self.job.node_rank}: node 0 said no run {number} within {wait_s:g} s "
                                "(it ended, or cannot be reached)") from None
        if text == END:
            self.close()
            self.store.set(f"{HEARD_KEY}-{self.job.node_rank}", "1")
            return None
        settings, run_id, ignored = heard(text, number, self.job.node_rank)
        if ignored:
            self.said(f"node {self.job.node_rank}: ignored what node 0 said of run {number} that this dataprof does "
                      f"not take: {', '.join(ignored)}")
        return settings, run_id


PROTOCOL = 2
"""The version of what node 0 says to the others; a node that hears another is told so and stops."""


def _seconds(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e7)


SAID: dict[str, Callable[[Any], bool]] = {
    "max_steps": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0),
    "seconds": _seconds, "limit_s": _seconds, "startup_s": _seconds, "after_window_s": _seconds,
    "seconds_from_first_batch": lambda v: isinstance(v, bool),
    "window_from_replay": lambda v: isinstance(v, bool),
    "training": lambda v: v is None or (isinstance(v, list | tuple) and len(v) == 2
                                        and all(part is None or isinstance(part, str) for part in v)),
}
"""What another node takes of a run's settings from node 0, each with its check: the window and limits as
numbers, the training loader's site. Never an environment, a path to run or import, or anything unpickled: the
script, its arguments, its directory and its environment are the node's own command line's."""
ROLES = ("current", "headspace", "candidate", "sweep")


def heard(text: str, number: int, node: int) -> tuple[WatchSettings, str, list[str]]:
    """Run ``number``'s settings as node 0 said them in ``text``, checked field by field (:data:`SAID`; the loader
    changes through the knob records), the run's id, and the fields ignored (unknown, or failing their check).
    DataprofError, in one line, when the text is not a message of this dataprof's protocol."""
    try:
        said = json.loads(text)
        version = said.get("protocol") if isinstance(said, dict) else None
    except ValueError:
        version = None
    if version != PROTOCOL:
        theirs = said.get("dataprof", "?") if version is not None else "?"
        raise DataprofError(f"node {node}: node 0's dataprof ({theirs}, protocol {version}) is not this one's "
                            f"({__version__}, protocol {PROTOCOL}): install the same dataprof on every node")
    fields, run_id = said.get("settings"), said.get("run_id")
    if not isinstance(fields, dict) or not isinstance(run_id, str) or not run_id.replace("-", "").isalnum():
        raise DataprofError(f"node {node}: node 0's word on run {number} holds no run settings")
    ignored = sorted(name for name, value in fields.items()
                     if name not in (*SAID, "changes", "role") or (name in SAID and not SAID[name](value)))
    taken: dict[str, Any] = {name: value for name, value in fields.items() if name in SAID and name not in ignored}
    if taken.get("training") is not None:
        taken["training"] = tuple(taken["training"])
    role = str(fields["role"]) if fields.get("role") in ROLES else "candidate"
    nodes = said.get("nodes") if isinstance(said.get("nodes"), dict) else {}
    changes = nodes.get(str(node), fields.get("changes")) if str(node) in nodes else fields.get("changes")
    try:
        run_changes = None if changes is None else decode(RunChanges, changes, strict=True)
        wrong = [] if run_changes is None else [name for name, value in run_changes.knobs.items()
                                                 if not value_fits(name, value)]
        if wrong:
            raise ValueError(f"values no loader knob holds: {', '.join(wrong)}")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise DataprofError(f"node {node}: node 0's changes for run {number} are not this dataprof's ({exc})") \
            from None
    env = {"DATAPROF_TRIAL": "1", "DATAPROF_TRIAL_ROLE": role, "DATAPROF_TRIAL_INDEX": str(number)}
    return (WatchSettings(target="", **taken, changes=run_changes, env=env, interactive=False, stop_own_ranks=True,
                          end_with_job=True), run_id, ignored)
