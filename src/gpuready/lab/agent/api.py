"""The agent's view of the real API server: a small REST client and a mirror kept by list + watch.

The agent decides pods' fates from objects (pods, nodes) that change under it, so it
keeps local copies the way client-go informers do: LIST, then WATCH from that resourceVersion, relist on 410 Gone,
rewatch when the stream ends. Subscribers get every change as an `Event` with the previous copy. Writes go to the
API server and the answer replaces the local copy at once (the watch event that follows changes nothing), so the
code deciding the next step never reads a state older than its own last write.

`Mirror` keeps the shape of the old in-process store (get / list / watch / modify / create / pods_on_node) so the
kubelet reads like it did; what is different is said at each method.
"""

from __future__ import annotations

import builtins
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

Obj = dict[str, Any]
log = logging.getLogger(__name__)

# mirror key -> (list/watch path, namespaced): what the agent's kubelet decides from
KINDS: dict[str, tuple[str, bool]] = {
    "pods": ("/api/v1/pods", True),
    "nodes": ("/api/v1/nodes", False),
}
# where single objects of other kinds live (writes only)
PATHS: dict[str, tuple[str, str]] = {
    "pods": ("/api/v1", "pods"),
    "nodes": ("/api/v1", "nodes"),
    "events": ("/api/v1", "events"),
    "leases.coordination.k8s.io": ("/apis/coordination.k8s.io/v1", "leases"),
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


class ApiError(Exception):
    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{what}: {status} {message}")


@dataclass
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    key: str
    obj: Obj
    old: Obj | None
    rv: int = 0


class Client:
    """REST calls with the credentials of a kubeconfig (client certificate, CA checked)."""

    def __init__(self, kubeconfig: str) -> None:
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.server = cfg.host.rstrip("/")
        self.pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=16,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            ca_certs=cfg.ssl_ca_cert,
            cert_reqs="CERT_REQUIRED",
            retries=False,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        resp = self.pool.request(method, url, body=data, headers=headers, timeout=timeout)
        try:
            payload = json.loads(resp.data) if resp.data else None
        except ValueError:
            payload = resp.data.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(resp.status, payload, f"{method} {path}")
        return payload

    def stream(self, path: str, query: dict[str, str]) -> Any:
        return self.pool.request(
            "GET",
            f"{self.server}{path}?{urlencode(query)}",
            preload_content=False,
            headers={"Accept": "application/json"},
            timeout=urllib3.Timeout(connect=10, read=None),
        )


def object_path(key: str, namespace: str, name: str = "", sub: str = "") -> str:
    prefix, plural = PATHS[key]
    path = f"{prefix}/namespaces/{quote(namespace)}/{plural}" if namespace else f"{prefix}/{plural}"
    if name:
        path += f"/{quote(name)}"
    return path + (f"/{sub}" if sub else "")


def _ident(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


class Mirror:
    def __init__(self, api: Client, kinds: tuple[str, ...] = tuple(KINDS)) -> None:
        self.api = api
        self.lock = threading.RLock()
        self._objs: dict[str, dict[tuple[str, str], Obj]] = {k: {} for k in kinds}
        self._subs: dict[str, list[queue.SimpleQueue[Event | None]]] = {k: [] for k in kinds}
        self._synced = {k: threading.Event() for k in kinds}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._reflect, args=(k,), name=f"watch-{k}", daemon=True) for k in kinds
        ]

    # lifecycle --------------------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + timeout
        for key, synced in self._synced.items():
            if not synced.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"could not list {key} from {self.api.server}")

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            for subs in self._subs.values():
                for q in subs:
                    q.put(None)

    # reads ------------------------------------------------------------------------------------------------------

    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self._objs.get(key, {}).get((namespace, name))
            return clone(obj) if obj is not None else None

    def list(self, key: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        with self.lock:
            items = [
                clone(o) for (ns, _), o in self._objs[key].items() if namespace is None or ns == namespace
            ]
            return items, 0

    def pods_on_node(self, node: str) -> builtins.list[Obj]:  # `list` here is the method above
        with self.lock:
            return [
                clone(p) for p in self._objs["pods"].values() if (p.get("spec") or {}).get("nodeName") == node
            ]

    def watch(self, key: str, into: queue.SimpleQueue[Event | None]) -> None:
        """Events of `key` from now on go to `into` (the caller lists first, under `lock`)."""
        with self.lock:
            self._subs[key].append(into)

    # writes -----------------------------------------------------------------------------------------------------

    def _apply(self, key: str, obj: Obj) -> None:
        if key not in self._objs:
            return
        with self.lock:
            ident = _ident(obj)
            old = self._objs[key].get(ident)
            if old is not None and int(old["metadata"].get("resourceVersion") or 0) >= int(
                obj["metadata"].get("resourceVersion") or 0
            ):
                return
            self._objs[key][ident] = obj
            self._publish(Event("MODIFIED" if old else "ADDED", key, clone(obj), old))

    def create(self, key: str, obj: Obj) -> Obj:
        ns = (obj.get("metadata") or {}).get("namespace", "")
        created = self.api.request("POST", object_path(key, ns), obj)
        self._apply(key, created)
        return created

    def delete(self, key: str, namespace: str, name: str, body: Obj | None = None) -> None:
        try:
            self.api.request("DELETE", object_path(key, namespace, name), body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    def modify(self, key: str, namespace: str, name: str, change: Callable[[Obj], bool | None]) -> Obj | None:
        """Read, change, write back; retried on a conflict with the server's newer copy. Pods write their status
        subresource, nodes their labels and status as merge patches (the host's kubelet owns the rest of the
        status); `change` returning False means nothing to write."""
        for _ in range(5):
            current = self.get(key, namespace, name) if key in self._objs else None
            if current is None:
                try:
                    current = self.api.request("GET", object_path(key, namespace, name))
                except ApiError as exc:
                    if exc.status == 404:
                        return None
                    raise
            before = clone(current)
            if change(current) is False:
                return current
            try:
                if key == "nodes":
                    written = self._patch_node(name, before, current)
                elif key == "pods":
                    written = self.api.request("PUT", object_path(key, namespace, name, "status"), current)
                else:
                    written = self.api.request("PUT", object_path(key, namespace, name), current)
            except ApiError as exc:
                if exc.status == 404:
                    return None
                if exc.status != 409:
                    raise
                fresh = self.api.request("GET", object_path(key, namespace, name))
                self._apply(key, fresh)
                continue
            self._apply(key, written)
            return written
        raise RuntimeError(f"{key} {namespace}/{name}: still conflicting after 5 tries")

    def _patch_node(self, name: str, before: Obj, after: Obj) -> Obj:
        written = before
        old_labels = before["metadata"].get("labels") or {}
        new_labels = after["metadata"].get("labels") or {}
        if old_labels != new_labels:
            patch = {k: v for k, v in new_labels.items() if old_labels.get(k) != v}
            patch.update({k: None for k in old_labels if k not in new_labels})
            written = self.api.request(
                "PATCH",
                object_path("nodes", "", name),
                {"metadata": {"labels": patch}},
                "application/merge-patch+json",
            )
        status: Obj = {}
        for field in ("capacity", "allocatable", "conditions"):
            if (before.get("status") or {}).get(field) != (after.get("status") or {}).get(field):
                status[field] = after["status"][field]
        if status:
            written = self.api.request(
                "PATCH",
                object_path("nodes", "", name, "status"),
                {"status": status},
                "application/strategic-merge-patch+json",
            )
        return written

    # reflector --------------------------------------------------------------------------------------------------

    def _publish(self, ev: Event) -> None:
        for q in self._subs[ev.key]:
            q.put(ev)

    def _relist(self, key: str) -> str:
        path, _ = KINDS[key]
        listing = self.api.request("GET", path)
        fresh = {_ident(o): o for o in listing.get("items") or []}
        with self.lock:
            old = self._objs[key]
            self._objs[key] = fresh
            for ident, obj in fresh.items():
                prev = old.get(ident)
                if prev is None or prev["metadata"].get("resourceVersion") != obj["metadata"].get(
                    "resourceVersion"
                ):
                    self._publish(Event("MODIFIED" if prev else "ADDED", key, clone(obj), prev))
            for ident, prev in old.items():
                if ident not in fresh:
                    self._publish(Event("DELETED", key, prev, prev))
        self._synced[key].set()
        return str(listing["metadata"]["resourceVersion"])

    def _reflect(self, key: str) -> None:
        path, _ = KINDS[key]
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist(key)
                resp = self.api.stream(
                    path,
                    {
                        "watch": "1",
                        "resourceVersion": rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": "300",
                    },
                )
                try:
                    if resp.status >= 400:
                        rv = ""
                        continue
                    rv = self._consume(key, resp, rv)
                finally:
                    resp.release_conn()
            except Exception as exc:  # the server restarting or going away: try again, relisting
                if self._stop.is_set():
                    return
                log.warning("watch %s: %s", key, exc)
                rv = ""
                self._stop.wait(1.0)

    def _consume(self, key: str, resp: Any, rv: str) -> str:
        buf = b""
        for chunk in resp.stream(65536, decode_content=True):
            if self._stop.is_set():
                return rv
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    return ""  # 410 Gone and friends: relist
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if ev["type"] == "BOOKMARK":
                    continue
                with self.lock:
                    ident = _ident(obj)
                    prev = self._objs[key].get(ident)
                    if ev["type"] == "DELETED":
                        self._objs[key].pop(ident, None)
                        self._publish(Event("DELETED", key, obj, prev))
                    elif prev is None or int(prev["metadata"].get("resourceVersion") or 0) < int(rv or 0):
                        self._objs[key][ident] = obj
                        self._publish(
                            Event(ev["type"] if prev is None else "MODIFIED", key, clone(obj), prev)
                        )
        return rv
