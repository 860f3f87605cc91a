"""The object store: one lock, a monotonic resourceVersion, indexes, and watch fan-out.

Stored objects are treated as immutable: writers hand in a fresh dict and readers never mutate what they get, so
a list serialises the stored dicts directly without copying. Indexes (by namespace, pods by node, dependents by
owner uid) keep list/scheduling/garbage-collection work proportional to what is asked for, not to the store size.
"""

from __future__ import annotations

import json
import queue
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import errors

Obj = dict[str, Any]
ObjKey = tuple[str, str]  # (namespace or "", name)

HISTORY = 100_000


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(obj: Any) -> Any:
    """Deep copy of JSON data; faster than copy.deepcopy for the plain dicts and lists the store holds."""
    return json.loads(json.dumps(obj))


@dataclass
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    key: str  # resource storage key, e.g. "pods", "daemonsets.apps"
    obj: Obj
    old: Obj | None
    rv: int


@dataclass(eq=False)
class Watcher:
    """A subscription; events land in `queue`, None means the store closed the watch."""

    key: str
    namespace: str | None
    queue: queue.SimpleQueue[Event | None] = field(default_factory=queue.SimpleQueue)
    _store: Store | None = None

    def close(self) -> None:
        if self._store is not None:
            self._store._remove_watcher(self)
            self._store = None


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._rv = 1
        self._objects: dict[str, dict[ObjKey, Obj]] = {}
        self._by_ns: dict[str, dict[str, dict[str, Obj]]] = {}
        self._pods_by_node: dict[str, set[ObjKey]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self._history: deque[Event] = deque(maxlen=HISTORY)
        self._watchers: dict[str, list[Watcher]] = {}

    # reads -----------------------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(key, {}).get((namespace, name))

    def list(self, key: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        with self.lock:
            if namespace is None:
                items = list(self._objects.get(key, {}).values())
            else:
                items = list(self._by_ns.get(key, {}).get(namespace, {}).values())
            return items, self._rv

    def pods_on_node(self, node: str) -> list[Obj]:
        with self.lock:
            pods = self._objects.get("pods", {})
            return [pods[k] for k in self._pods_by_node.get(node, ()) if k in pods]

    def dependents(self, uid: str) -> list[tuple[str, str, str]]:
        with self.lock:
            return sorted(self._dependents.get(uid, ()))

    def namespaces_in_use(self, key: str) -> Iterable[str]:
        return list(self._by_ns.get(key, {}))

    # writes ----------------------------------------------------------------------------------------------------

    def create(self, key: str, obj: Obj, *, group: str = "", plural: str = "") -> Obj:
        meta = obj.setdefault("metadata", {})
        with self.lock:
            ns = meta.get("namespace", "")
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(key, ns, meta["generateName"])
            name = meta["name"]
            table = self._objects.setdefault(key, {})
            if (ns, name) in table:
                raise errors.already_exists(group, plural or key, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            return self._commit("ADDED", key, obj, None)

    def update(
        self, key: str, obj: Obj, *, expected_rv: str | None = None, group: str = "", plural: str = ""
    ) -> Obj:
        """Replace an object; a stale `expected_rv` is a 409 Conflict like optimistic concurrency in etcd."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        with self.lock:
            old = self._objects.get(key, {}).get((ns, name))
            if old is None:
                raise errors.not_found(group, plural or key, name)
            if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(
                    group,
                    plural or key,
                    name,
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                )
            meta["uid"] = old["metadata"]["uid"]
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            return self._commit("MODIFIED", key, obj, old)

    def delete(self, key: str, namespace: str, name: str, *, group: str = "", plural: str = "") -> Obj:
        with self.lock:
            old = self._objects.get(key, {}).get((namespace, name))
            if old is None:
                raise errors.not_found(group, plural or key, name)
            gone = dict(old)
            gone["metadata"] = dict(old["metadata"])
            return self._commit("DELETED", key, gone, old)

    def modify(self, key: str, namespace: str, name: str, change: Callable[[Obj], bool | None]) -> Obj | None:
        """Read-copy-update under the lock; `change` returns False to skip the write. None if the object is gone."""
        with self.lock:
            old = self.get(key, namespace, name)
            if old is None:
                return None
            new = clone(old)
            if change(new) is False:
                return old
            return self._commit("MODIFIED", key, new, old)

    def _generate_name(self, key: str, ns: str, prefix: str) -> str:
        alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the real apiserver's alphabet, no vowels
        table = self._objects.get(key, {})
        while True:
            name = prefix + "".join(random.choice(alphabet) for _ in range(5))
            if (ns, name) not in table:
                return name

    def _commit(self, kind: str, key: str, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        if kind != "DELETED":
            meta["resourceVersion"] = str(self._rv)
        table = self._objects.setdefault(key, {})
        by_ns = self._by_ns.setdefault(key, {})
        if old is not None:
            self._unindex(key, old)
        if kind == "DELETED":
            # The deleted object's resourceVersion is the deletion's, as in a real DELETED watch event.
            meta["resourceVersion"] = str(self._rv)
            table.pop((ns, name), None)
            bucket = by_ns.get(ns)
            if bucket is not None:
                bucket.pop(name, None)
                if not bucket:
                    del by_ns[ns]
        else:
            table[(ns, name)] = obj
            by_ns.setdefault(ns, {})[name] = obj
            self._index(key, obj)
        event = Event(kind, key, obj, old, self._rv)
        self._history.append(event)
        for w in self._watchers.get(key, ()):
            if w.namespace is None or w.namespace == ns:
                w.queue.put(event)
        return obj

    def _index(self, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        ident = (meta.get("namespace", ""), meta["name"])
        if key == "pods":
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                self._pods_by_node.setdefault(node, set()).add(ident)
        for ref in meta.get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), set()).add((key, *ident))

    def _unindex(self, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        ident = (meta.get("namespace", ""), meta["name"])
        if key == "pods":
            node = (obj.get("spec") or {}).get("nodeName")
            if node and node in self._pods_by_node:
                self._pods_by_node[node].discard(ident)
        for ref in meta.get("ownerReferences") or ():
            deps = self._dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard((key, *ident))
                if not deps:
                    del self._dependents[ref.get("uid", "")]

    # watches ---------------------------------------------------------------------------------------------------

    def watch(
        self,
        key: str,
        namespace: str | None = None,
        since: int | None = None,
        into: queue.SimpleQueue[Event | None] | None = None,
    ) -> Watcher:
        """Subscribe; with `since`, replay retained events after that resourceVersion (410 Gone if too old).

        `into` lets one consumer (a controller) multiplex several resources onto a single queue.
        """
        with self.lock:
            w = Watcher(key, namespace, _store=self)
            if into is not None:
                w.queue = into
            if since is not None and since < self._rv:
                oldest = self._history[0].rv if self._history else self._rv + 1
                if since < oldest - 1:
                    raise errors.gone(f"too old resource version: {since} ({oldest - 1})")
                for ev in self._history:
                    in_ns = namespace is None or ev.obj["metadata"].get("namespace", "") == namespace
                    if ev.rv > since and ev.key == key and in_ns:
                        w.queue.put(ev)
            self._watchers.setdefault(key, []).append(w)
            return w

    def list_and_watch(self, key: str, namespace: str | None = None) -> tuple[list[Obj], int, Watcher]:
        """A consistent snapshot plus a watch starting right after it (what informers and controllers need)."""
        with self.lock:
            items, rv = self.list(key, namespace)
            return items, rv, self.watch(key, namespace)

    def _remove_watcher(self, w: Watcher) -> None:
        with self.lock:
            ws = self._watchers.get(w.key, [])
            if w in ws:
                ws.remove(w)

    def close_watchers(self) -> None:
        with self.lock:
            for ws in self._watchers.values():
                for w in ws:
                    w.queue.put(None)
            self._watchers.clear()
