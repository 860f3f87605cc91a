"""core/v1 Events as the scheduler, controllers and kubelet record them (aggregated by count like client-go)."""

from __future__ import annotations

import threading
import time
from typing import Any

from .api import Mirror, now_rfc3339

Obj = dict[str, Any]


class Recorder:
    def __init__(self, store: Mirror) -> None:
        self._store = store
        self._seen: dict[tuple[Any, ...], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def event(self, obj: Obj, type_: str, reason: str, message: str, component: str, host: str = "") -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        kind = obj.get("kind", "")
        ident = (namespace, kind, meta.get("name"), meta.get("uid"), reason, message, component, host)
        now = now_rfc3339()
        with self._lock:
            known = self._seen.get(ident)
        if known is not None:

            def bump(ev: Obj) -> None:
                ev["count"] = int(ev.get("count", 1)) + 1
                ev["lastTimestamp"] = now

            if self._store.modify("events", known[0], known[1], bump) is not None:
                return
        name = f"{meta.get('name', '')}.{time.time_ns():x}"[:253]
        source: Obj = {"component": component}
        if host:
            source["host"] = host
        ev: Obj = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "kind": kind,
                "namespace": meta.get("namespace", ""),
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
                "apiVersion": obj.get("apiVersion", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": type_,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        if not meta.get("namespace"):
            ev["involvedObject"].pop("namespace")
        self._store.create("events", ev)
        with self._lock:
            self._seen[ident] = (namespace, name)
            if len(self._seen) > 50_000:
                self._seen.clear()
