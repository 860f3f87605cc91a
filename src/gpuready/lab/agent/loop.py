"""A control loop thread: collects the mirror's events for `keys`, then calls `reconcile()` once the queue drains.

The same shape as a client-go controller with a work queue, small enough for the agent's few loops.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

from .api import Event, Mirror

if TYPE_CHECKING:
    from .agent import Agent

log = logging.getLogger(__name__)


class Loop:
    keys: tuple[str, ...] = ()
    period = 1.0

    def __init__(self, server: Agent) -> None:
        self.server = server
        self.store: Mirror = server.store
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"agent-{type(self).__name__}", daemon=True)

    def start(self) -> None:
        initial: list[Event] = []
        with self.store.lock:
            for key in self.keys:
                items, _ = self.store.list(key)
                initial.extend(Event("ADDED", key, o, None) for o in items)
                self.store.watch(key, into=self._queue)
        for ev in initial:
            self._queue.put(ev)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ev = self._queue.get(timeout=self.period)
                if ev is None:
                    return
                self.observe(ev)
                while True:
                    ev = self._queue.get_nowait()
                    if ev is None:
                        return
                    self.observe(ev)
            except queue.Empty:
                pass
            try:
                self.reconcile()
            except Exception:
                log.exception("%s reconcile error", type(self).__name__)

    def observe(self, ev: Event) -> None:
        """Note what an event changes (overridden)."""

    def reconcile(self) -> None:
        """Act on what was noted (overridden)."""
