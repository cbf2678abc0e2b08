"""``dataprof tune`` across nodes: the same command on every node, node 0 deciding each run and telling the others.

Node 0's dataprof serves a key-value store (torch.distributed's ``TCPStore``) at ``--master-addr:--master-port``;
the other nodes' connect to it. Before each run, node 0 says the run's watch settings (its knobs, its window, its
limits) and the run's id under ``run-<n>``; every node then launches its ranks of that one job, which meet at the
port beside it (``--master-port`` + 1, torchrun's static rendezvous, node 0 hosting). After the last run node 0
says ``end``. Nothing is shared but the network.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from dataprof.errors import DataprofError
from dataprof.measure.watch.meeting import ALIVE_EVERY_S, ALIVE_KEY, Silences
from dataprof.measure.watch.settings import WatchSettings
from dataprof.results.environment import NodeJob
from dataprof.results.run import RunChanges

HEARD_S = 180.0
"""How long past a run's own limit a node other than 0 waits for node 0 to say the next (node 0 gone)."""
END = "end"
HEARD_KEY = "heard-end"
"""Where each node other than 0 says it heard the end (``heard-end-<node>``)."""


class TuneNodes:
    """Node 0's word to the other nodes: each run's settings, then the end."""

    def __init__(self, job: NodeJob) -> None:
        from torch.distributed import TCPStore

        self.job = job
        try:
            self.store = TCPStore(job.master_addr, job.master_port, is_master=job.leader,
                                  timeout=timedelta(seconds=job.join_s), wait_for_workers=False)
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
        if not job.leader:
            threading.Thread(target=self._alive, name="dataprof-node-alive", daemon=True).start()

    def _client(self) -> Any:
        from torch.distributed import TCPStore

        return TCPStore(self.job.master_addr, self.job.master_port, is_master=False,
                        timeout=timedelta(seconds=self.job.join_s))

    def _alive(self) -> None:
        """Another node, until it hears the end (or :meth:`close`): count that it is there, on a connection of
        its own."""
        try:
            store = self._client()
            while True:
                store.add(f"{ALIVE_KEY}-{self.job.node_rank}", 1)
                if self._quiet.wait(ALIVE_EVERY_S):
                    return
        except (RuntimeError, ValueError, TimeoutError):  # node 0 gone: the main thread finds it so
            return

    def close(self) -> None:
        """Another node: stop counting that it is there (node 0's store may go at any moment now)."""
        self._quiet.set()

    @contextmanager
    def watched(self, number: int, gone: Callable[[str], None]) -> Iterator[None]:
        """Node 0, while run ``number`` goes: ``gone(why)``, once, when a node that had counted that it is there
        has not for the join timeout (it died, or its network did: its ranks will not end the run). A node that
        never came is the launch's to find (its ranks do not join the run's rendezvous)."""
        if not self.job.leader or self.job.nnodes < 2:
            yield
            return
        stop = threading.Event()

        def watch() -> None:
            try:
                store = self._client()
                silences = Silences(self.job.join_s)
                while not stop.wait(ALIVE_EVERY_S):
                    for node in range(1, self.job.nnodes):
                        silent = silences.silent_for(node, store.add(f"{ALIVE_KEY}-{node}", 0))
                        if silent is not None:
                            self.gone.add(node)
                            gone(f"node {node} stopped answering during run {number} (nothing from its dataprof for "
                                 f"{silent:.0f} s, the join timeout)")
                            return
            except (RuntimeError, ValueError, TimeoutError):  # this node's own store is closing: the run ends
                return

        thread = threading.Thread(target=watch, name="dataprof-nodes-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()

    def say(self, number: int, settings: WatchSettings, run_id: str,
            node_changes: dict[int, RunChanges | None] | None = None) -> None:
        """Node 0: run ``number`` is ``settings`` (the others run their own script, in their own directory), with
        each node's own changes to its loader (``node_changes``, by node) in place of node 0's."""
        nodes = {str(node): None if changes is None else changes.to_dict()
                 for node, changes in (node_changes or {}).items()}
        said = {**dataclasses.asdict(settings), "changes": None if settings.changes is None
                else settings.changes.to_dict()}
        self.store.set(f"run-{number}", json.dumps({"run_id": run_id, "settings": said, "nodes": nodes}))

    def end(self, number: int) -> None:
        """Node 0: no run ``number``; the others stop. It waits (up to the join timeout) until each has heard it
        (its store goes when it exits), each but those found gone."""
        listening = [f"{HEARD_KEY}-{node}" for node in range(1, self.job.nnodes) if node not in self.gone]
        try:
            self.store.set(f"run-{number}", END)
            if listening:
                self.store.wait(listening, timedelta(seconds=self.job.join_s))
        except (RuntimeError, ValueError, TimeoutError):  # a node that no longer listens
            pass

    def hear(self, number: int, wait_s: float) -> tuple[WatchSettings, str] | None:
        """Another node: run ``number``'s settings and id, or None when node 0 said the end. DataprofError when
        it said nothing within ``wait_s``."""
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
        said: dict[str, Any] = json.loads(text)
        fields = said["settings"]
        changes = fields.pop("changes")
        nodes = said.get("nodes") or {}
        if str(self.job.node_rank) in nodes:  # this node's own changes
            changes = nodes[str(self.job.node_rank)]
        return WatchSettings(**{**fields, "args": tuple(fields["args"])},
                             changes=None if changes is None else RunChanges.from_dict(changes)), said["run_id"]
