"""Server-side printing: `meta.k8s.io/v1 Table` responses, which is what `kubectl get` asks for and prints.

Columns and cell formats follow the real printers (pkg/printers/internalversion) for the resources served here;
any other resource gets the default Name/Created At table, as custom resources do on a real server.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, format


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def age(obj: Obj) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - then).total_seconds())


def _since(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    then = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - then).total_seconds())


# pods --------------------------------------------------------------------------------------------------------


def pod_status_reason(pod: Obj) -> tuple[str, int, int, str]:
    """(STATUS, ready containers, restarts, last restart time) as kubectl's pod printer computes them."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    ready = restarts = 0
    last_restart = ""
    initializing = False
    init_specs = (pod.get("spec") or {}).get("initContainers") or []
    for i, c in enumerate(status.get("initContainerStatuses") or []):
        restarts += c.get("restartCount", 0)
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing:
        restarts = 0
        has_running = False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += c.get("restartCount", 0)
            last = (c.get("lastState") or {}).get("terminated")
            if last and last.get("finishedAt", "") > last_restart:
                last_restart = last["finishedAt"]
            state = c.get("state") or {}
            wait, term = state.get("waiting"), state.get("terminated")
            if wait and wait.get("reason"):
                reason = wait["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                reason = (
                    f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
                )
            elif c.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(
                x.get("type") == "Ready" and x.get("status") == "True" for x in status.get("conditions") or []
            )
            reason = "Running" if ready_cond else "NotReady"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, restarts, last_restart


def _pod_row(pod: Obj) -> list[Any]:
    reason, ready, restarts, last = pod_status_reason(pod)
    total = len((pod.get("spec") or {}).get("containers") or [])
    restarts_cell = f"{restarts} ({_since(last)} ago)" if restarts and last else str(restarts)
    status = pod.get("status") or {}
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return [
        pod["metadata"]["name"], f"{ready}/{total}", reason, restarts_cell, age(pod),
        status.get("podIP") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>" if not gates else f"0/{len(gates)}",
    ]  # fmt: skip


# nodes -------------------------------------------------------------------------------------------------------


def node_status(node: Obj) -> str:
    parts = []
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            parts.append("Ready" if c.get("status") == "True" else "NotReady")
    if not parts:
        parts.append("Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def node_roles(node: Obj) -> str:
    roles = set()
    for k, v in ((node.get("metadata") or {}).get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            roles.add(k.split("/", 1)[1])
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_row(node: Obj) -> list[Any]:
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    addrs = status.get("addresses") or []
    internal = next((a["address"] for a in addrs if a.get("type") == "InternalIP"), "<none>")
    external = next((a["address"] for a in addrs if a.get("type") == "ExternalIP"), "<none>")
    return [
        node["metadata"]["name"], node_status(node), node_roles(node), age(node), info.get("kubeletVersion", ""),
        internal, external, info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]  # fmt: skip


# the rest ----------------------------------------------------------------------------------------------------


def _selector_string(sel: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((sel or {}).items())) or "<none>"


def _service_ports(svc: Obj) -> str:
    out = []
    for p in (svc.get("spec") or {}).get("ports") or []:
        s = f"{p.get('port')}"
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        out.append(f"{s}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _event_row(ev: Obj) -> list[Any]:
    io = ev.get("involvedObject") or {}
    last = (
        ev.get("lastTimestamp") or ev.get("eventTime") or (ev.get("metadata") or {}).get("creationTimestamp")
    )
    obj_name = f"{(io.get('kind') or '').lower()}/{io.get('name', '')}"
    return [_since(last if isinstance(last, str) else None), ev.get("type", ""), ev.get("reason", ""), obj_name,
            ev.get("message", "")]  # fmt: skip


_NAME = ("Name", "string", 0, "name")
_AGE = ("Age", "string", 0, "")

PRINTERS: dict[str, tuple[list[Column], Callable[[Obj], list[Any]]]] = {
    "pods": (
        [_NAME, ("Ready", "string", 0, ""), ("Status", "string", 0, ""), ("Restarts", "string", 0, ""), _AGE,
         ("IP", "string", 1, ""), ("Node", "string", 1, ""), ("Nominated Node", "string", 1, ""),
         ("Readiness Gates", "string", 1, "")],
        _pod_row,
    ),
    "nodes": (
        [_NAME, ("Status", "string", 0, ""), ("Roles", "string", 0, ""), _AGE, ("Version", "string", 0, ""),
         ("Internal-IP", "string", 1, ""), ("External-IP", "string", 1, ""), ("OS-Image", "string", 1, ""),
         ("Kernel-Version", "string", 1, ""), ("Container-Runtime", "string", 1, "")],
        _node_row,
    ),
    "namespaces": ([_NAME, ("Status", "string", 0, ""), _AGE],
                   lambda o: [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), age(o)]),
    "configmaps": ([_NAME, ("Data", "integer", 0, ""), _AGE],
                   lambda o: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}), age(o)]),
    "secrets": ([_NAME, ("Type", "string", 0, ""), ("Data", "integer", 0, ""), _AGE],
                lambda o: [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}), age(o)]),
    "serviceaccounts": ([_NAME, ("Secrets", "integer", 0, ""), _AGE],
                        lambda o: [o["metadata"]["name"], len(o.get("secrets") or []), age(o)]),
    "services": (
        [_NAME, ("Type", "string", 0, ""), ("Cluster-IP", "string", 0, ""), ("External-IP", "string", 0, ""),
         ("Port(s)", "string", 0, ""), _AGE, ("Selector", "string", 1, "")],
        lambda o: [o["metadata"]["name"], (o.get("spec") or {}).get("type", ""),
                   (o.get("spec") or {}).get("clusterIP") or "<none>", "<none>", _service_ports(o), age(o),
                   _selector_string((o.get("spec") or {}).get("selector"))],
    ),
    "daemonsets.apps": (
        [_NAME, ("Desired", "integer", 0, ""), ("Current", "integer", 0, ""), ("Ready", "integer", 0, ""),
         ("Up-to-date", "integer", 0, ""), ("Available", "integer", 0, ""), ("Node Selector", "string", 0, ""),
         _AGE, ("Containers", "string", 1, ""), ("Images", "string", 1, ""), ("Selector", "string", 1, "")],
        lambda o: [o["metadata"]["name"], *(int((o.get("status") or {}).get(k, 0)) for k in (
            "desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled",
            "numberAvailable")),
            _selector_string(((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector")),
            age(o),
            ",".join(c.get("name", "") for c in o["spec"]["template"]["spec"].get("containers") or []),
            ",".join(c.get("image", "") for c in o["spec"]["template"]["spec"].get("containers") or []),
            _selector_string(((o.get("spec") or {}).get("selector") or {}).get("matchLabels"))],
    ),
    "events": (
        [("Last Seen", "string", 0, ""), ("Type", "string", 0, ""), ("Reason", "string", 0, ""),
         ("Object", "string", 0, ""), ("Message", "string", 0, "")],
        _event_row,
    ),
    "leases.coordination.k8s.io": ([_NAME, ("Holder", "string", 0, ""), _AGE],
                                   lambda o: [o["metadata"]["name"],
                                              (o.get("spec") or {}).get("holderIdentity", ""), age(o)]),
    "runtimeclasses.node.k8s.io": ([_NAME, ("Handler", "string", 0, ""), _AGE],
                                   lambda o: [o["metadata"]["name"], o.get("handler", ""), age(o)]),
    "priorityclasses.scheduling.k8s.io": (
        [_NAME, ("Value", "integer", 0, ""), ("Global-Default", "boolean", 0, ""), _AGE,
         ("PreemptionPolicy", "string", 0, "")],
        lambda o: [o["metadata"]["name"], o.get("value", 0), bool(o.get("globalDefault")), age(o),
                   o.get("preemptionPolicy", "")],
    ),
}  # fmt: skip

_DEFAULT: tuple[list[Column], Callable[[Obj], list[Any]]] = (
    [_NAME, ("Created At", "date", 0, "")],
    lambda o: [o["metadata"]["name"], o["metadata"].get("creationTimestamp", "")],
)


def wants_table(accept: str) -> bool:
    for part in accept.split(","):
        params = {
            p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip() for p in part.split(";")[1:] if "=" in p
        }
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in ("v1", "v1beta1")
        ):
            return True
    return False


def table(key: str, items: list[Obj], list_meta: Obj, include_object: str, api_version: str, kind: str,
          with_columns: bool = True) -> Obj:  # fmt: skip
    columns, row = PRINTERS.get(key, _DEFAULT)
    rows = []
    for obj in items:
        r: Obj = {"cells": row(obj)}
        if include_object == "Object":
            r["object"] = {"apiVersion": api_version, "kind": kind, **obj}
        elif include_object != "None":
            r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": obj.get("metadata", {})}  # fmt: skip
        rows.append(r)
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta}
    if with_columns:
        out["columnDefinitions"] = [
            {"name": n, "type": t, "format": f, "description": "", "priority": p} for n, t, p, f in columns
        ]
    out["rows"] = rows
    return out
