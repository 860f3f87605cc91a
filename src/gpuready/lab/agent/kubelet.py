"""The pod lifecycle half of a kubelet, for every node the agent runs: bound pods through the agent's PodRuntime.

Registration and heartbeats belong to whoever owns the node (the lab host's kubelet service, or the agent's
virtual nodes); this loop turns a pod the real scheduler bound to one of the agent's nodes into container
statuses, phases, logs and kubelet events, and only on nodes that are Ready, so pods on a node whose kubelet
stopped stay as they are, as in a real cluster. A pod being deleted (deletionTimestamp set) has its containers
stopped and is then removed with a zero grace period, which is how a real kubelet confirms the deletion; on a
node whose kubelet is gone it stays Terminating, as it does for real. Pod IPs come from the node's podCIDR, which
the real controller-manager allocates.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .api import Event, Mirror, now_rfc3339
from .events import Recorder
from .runtime import ContainerPlan, normalize_image

if TYPE_CHECKING:
    from .agent import Agent

Obj = dict[str, Any]
COMPONENT = "kubelet"
# The kubelet's crash-loop back-off (pkg/kubelet: flowcontrol.NewBackOff(10s, 300s)): it doubles with each restart up
# to 5 minutes, and starts again at 10 s once the last back-off is older than twice the maximum, so a container that
# crashed long ago and ran well since is not held 5 minutes for its next crash. restartCount itself never resets.
BACKOFF_INITIAL_S, BACKOFF_MAX_S = 10.0, 300.0
log = logging.getLogger(__name__)


@dataclass
class _Container:
    name: str
    plan: ContainerPlan
    started: float = 0.0
    restarts: int = 0
    backoff: float = 0.0  # the last crash-loop back-off, and when it was set (time.monotonic())
    backoff_at: float = 0.0
    logs: str = ""
    previous_logs: str = ""
    state: Obj = field(default_factory=dict)
    last_state: Obj = field(default_factory=dict)
    container_id: str = ""


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    node: str
    containers: dict[str, _Container] = field(default_factory=dict)
    done: bool = False


def next_backoff(last: float, last_at: float, now: float) -> float:
    """The back-off before a crashed container's next start, given the previous one and when it was set."""
    if not last or now - last_at > 2 * BACKOFF_MAX_S:
        return BACKOFF_INITIAL_S
    return min(BACKOFF_MAX_S, 2 * last)


def boot_id(node: Obj | None) -> str:
    return (((node or {}).get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""


def node_ready(node: Obj | None) -> bool:
    if node is None:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


class Kubelet:
    def __init__(self, server: Agent) -> None:
        self._server = server
        self._store: Mirror = server.store
        self._events = Recorder(self._store)
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._pods: dict[str, _Pod] = {}
        self._timers: list[tuple[float, int, str, str]] = []
        self._seq = itertools.count()
        self._next_ip: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-kubelet", daemon=True)

    def start(self) -> None:
        with self._store.lock:
            pods, _ = self._store.list("pods")
            self._store.watch("pods", into=self._queue)
            self._store.watch("nodes", into=self._queue)
        for p in pods:
            self._queue.put(Event("ADDED", "pods", p, None, 0))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout=5)

    # public reads ------------------------------------------------------------------------------------------

    def logs(self, pod: Obj, container: str, previous: bool) -> str | None:
        with self._lock:
            state = self._pods.get(pod["metadata"].get("uid", ""))
            if state is None or container not in state.containers:
                return None
            c = state.containers[container]
            if previous:
                # backing off after an exit, the instance that just ended is the previous one (until the restart
                # moves its output to previous_logs)
                return c.logs if "waiting" in c.state and c.last_state else c.previous_logs
            if "running" in c.state:
                return c.plan.logs_at(time.monotonic() - c.started)
            return c.logs

    def running(self, pod: Obj, container: str) -> bool:
        with self._lock:
            state = self._pods.get(pod["metadata"].get("uid", ""))
            return state is not None and "running" in getattr(state.containers.get(container), "state", {})

    # loop ----------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            timeout = 1.0
            if self._timers:
                timeout = max(0.0, min(1.0, self._timers[0][0] - time.monotonic()))
            try:
                ev = self._queue.get(timeout=timeout)
            except queue.Empty:
                ev = None
            else:
                if ev is None and self._stop.is_set():
                    return
            try:
                if ev is not None:
                    self._handle(ev)
                self._fire_timers()
            except Exception:  # a bad pod must not kill the loop; the error is visible in the server log
                log.exception("kubelet loop error")

    def _handle(self, ev: Event) -> None:
        if ev.key == "pods" and not self._server.manages((ev.obj.get("spec") or {}).get("nodeName") or ""):
            return
        if ev.key == "nodes":
            if ev.type == "MODIFIED" and boot_id(ev.old) not in ("", boot_id(ev.obj)):
                self._rebooted(ev.obj["metadata"]["name"])
            if ev.type != "DELETED" and node_ready(ev.obj) and not node_ready(ev.old):
                for pod in self._store.pods_on_node(ev.obj["metadata"]["name"]):
                    self._maybe_start(pod)
                    self._resync(pod)
            return
        pod = ev.obj
        uid = pod["metadata"].get("uid", "")
        if ev.type == "DELETED":
            with self._lock:
                self._pods.pop(uid, None)
            return
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(pod)
            return
        self._maybe_start(pod)

    def _rebooted(self, node_name: str) -> None:
        """The node's host came back in a new boot (its Node's bootID changed): as the real kubelet does, every
        container of the pods it kept starts again, the last run recorded as terminated with reason Unknown and
        the restart counted, so no status from before the boot stands (the rolling upgrade waits for that)."""
        node = self._store.get("nodes", "", node_name)
        with self._lock:
            pods = [p for p in self._pods.values() if p.node == node_name and not p.done]
        for pod in pods:
            live = self._store.get("pods", pod.namespace, pod.name)
            if live is None:
                continue
            specs = {c["name"]: c for c in live["spec"].get("containers") or []}
            now = time.monotonic()
            for c in pod.containers.values():
                if "running" not in c.state or c.name not in specs:
                    continue
                started = c.state["running"].get("startedAt", now_rfc3339())
                c.last_state = {"terminated": {"exitCode": 255, "reason": "Unknown", "startedAt": started,
                                               "finishedAt": now_rfc3339(), "containerID": c.container_id}}  # fmt: skip
                c.restarts += 1
                self._restart(pod, c, live, specs[c.name], node, now)
            self._write(pod)

    def _resync(self, pod: Obj) -> None:
        """Write again the status of a pod this kubelet already runs. While the node was NotReady the node
        lifecycle controller set its Ready condition False (MarkPodsNotReady); the real kubelet's status manager,
        back, writes the status it computes over that, so a pod whose containers kept running is Ready again."""
        with self._lock:
            state = self._pods.get(pod["metadata"].get("uid", ""))
        if state is not None and not state.done:
            self._write(state)

    def _terminate(self, pod: Obj) -> None:
        """Stop the containers of a pod being deleted and confirm the deletion (grace period 0, this uid only)."""
        meta = pod["metadata"]
        node = self._store.get("nodes", "", pod["spec"].get("nodeName", ""))
        if not node_ready(node):
            return
        with self._lock:
            self._pods.pop(meta.get("uid", ""), None)
        self._store.delete(
            "pods",
            meta.get("namespace", ""),
            meta["name"],
            {"gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}},
        )

    def _pod_ip(self, node: Obj) -> str:
        """The next address of the node's podCIDR (a /24 from the controller-manager; .1 is the gateway)."""
        name = node["metadata"]["name"]
        cidr = (node.get("spec") or {}).get("podCIDR") or ""
        base = cidr.split("/")[0].rsplit(".", 1)[0] if cidr else f"10.244.{sum(name.encode()) % 250}"
        n = self._next_ip.get(name, 0)
        self._next_ip[name] = n + 1
        return f"{base}.{n % 250 + 2}"

    def _maybe_start(self, pod: Obj) -> None:
        uid = pod["metadata"].get("uid", "")
        node_name = (pod.get("spec") or {}).get("nodeName")
        if (
            not node_name
            or uid in self._pods
            or not self._server.manages(node_name)
            or (pod.get("status") or {}).get("phase") not in (None, "Pending")
        ):
            return
        node = self._store.get("nodes", "", node_name)
        if node is None or not node_ready(node):
            return
        state = _Pod(pod["metadata"].get("namespace", ""), pod["metadata"]["name"], uid, node_name)
        now = time.monotonic()
        for c in pod["spec"].get("containers") or []:
            plan = self._server.runtime.plan(pod, c, node)
            state.containers[c["name"]] = _Container(c["name"], plan, started=now)
        with self._lock:
            self._pods[uid] = state
        host_ip = next(
            (
                a["address"]
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "",
        )
        ip = host_ip if pod["spec"].get("hostNetwork") else self._pod_ip(node)
        for c in state.containers.values():
            self._begin(state, c, now)
        self._write(state, pod_ip=ip, host_ip=host_ip)
        for c in state.containers.values():
            if not c.plan.waiting:
                spec = next(x for x in pod["spec"]["containers"] if x["name"] == c.name)
                self._events.event(
                    pod,
                    "Normal",
                    "Pulled",
                    f'Container image "{spec["image"]}" already present on machine',
                    COMPONENT,
                    node_name,
                )
                self._events.event(
                    pod, "Normal", "Created", f"Created container: {c.name}", COMPONENT, node_name
                )
                self._events.event(
                    pod, "Normal", "Started", f"Started container {c.name}", COMPONENT, node_name
                )
            else:
                self._events.event(
                    pod,
                    "Warning",
                    "Failed",
                    f'Failed to pull image "{spec_image(pod, c.name)}": {c.plan.waiting[0][2]}',
                    COMPONENT,
                    node_name,
                )

    def _begin(self, pod: _Pod, c: _Container, now: float) -> None:
        c.started = now
        plan = c.plan
        if plan.waiting:
            _, reason, message = plan.waiting[0]
            c.state = {"waiting": {"reason": reason, "message": message}}
            for i, (delay, _, _) in enumerate(plan.waiting[1:], start=1):
                self._timer(now + delay, pod.uid, f"wait:{c.name}:{i}")
            return
        c.container_id = (
            "containerd://" + hashlib.sha256(f"{pod.uid}/{c.name}/{c.restarts}".encode()).hexdigest()
        )
        c.logs = plan.logs
        c.state = {"running": {"startedAt": now_rfc3339()}}
        if plan.exit_code is not None:
            self._timer(now + plan.run_seconds, pod.uid, f"exit:{c.name}")

    def _timer(self, due: float, uid: str, action: str) -> None:
        heapq.heappush(self._timers, (due, next(self._seq), uid, action))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        touched: dict[str, _Pod] = {}
        while self._timers and self._timers[0][0] <= now:
            _, _, uid, action = heapq.heappop(self._timers)
            pod = self._pods.get(uid)
            if pod is None:
                continue
            kind, name, *rest = action.split(":")
            c = pod.containers[name]
            if kind == "wait":
                _, reason, message = c.plan.waiting[int(rest[0])]
                c.state = {"waiting": {"reason": reason, "message": message}}
                live = self._store.get("pods", pod.namespace, pod.name)
                if live is not None and reason == "ImagePullBackOff":
                    self._events.event(
                        live,
                        "Normal",
                        "BackOff",
                        f'Back-off pulling image "{spec_image(live, name)}"',
                        COMPONENT,
                        pod.node,
                    )
            elif kind == "exit":
                self._exit(pod, c)
            elif kind == "restart":
                live = self._store.get("pods", pod.namespace, pod.name)
                spec = next(
                    (x for x in (live or {}).get("spec", {}).get("containers", []) if x["name"] == name), None
                )
                node = self._store.get("nodes", "", pod.node)
                if live is None or spec is None:
                    continue
                self._restart(pod, c, live, spec, node, now)
            touched[uid] = pod
        for pod in touched.values():
            self._write(pod)

    def _restart(self, pod: _Pod, c: _Container, live: Obj, spec: Obj, node: Obj | None, now: float) -> None:
        """Run the container again from its live spec: its output so far becomes `--previous`."""
        c.previous_logs = c.logs
        c.plan = self._server.runtime.plan(live, spec, node)
        self._begin(pod, c, now)

    def _exit(self, pod: _Pod, c: _Container) -> None:
        plan = c.plan
        code = plan.exit_code or 0
        term = {
            "exitCode": code,
            "reason": plan.reason or ("Completed" if code == 0 else "Error"),
            "startedAt": (c.state.get("running") or {}).get("startedAt", now_rfc3339()),
            "finishedAt": now_rfc3339(),
            "containerID": c.container_id,
        }
        if plan.message:
            term["message"] = plan.message
        live = self._store.get("pods", pod.namespace, pod.name)
        policy = ((live or {}).get("spec") or {}).get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            c.restarts += 1
            c.last_state = {"terminated": term}
            backoff = next_backoff(c.backoff, c.backoff_at, time.monotonic())
            c.backoff, c.backoff_at = backoff, time.monotonic()
            uid_name = f"{pod.name}_{pod.namespace}({pod.uid})"
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {int(backoff)}s restarting failed container={c.name} "
                    f"pod={uid_name}",
                }
            }
            self._timer(time.monotonic() + backoff, pod.uid, f"restart:{c.name}")
            if live is not None:
                self._events.event(
                    live,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {c.name} in pod {uid_name}",
                    COMPONENT,
                    pod.node,
                )
        else:
            c.state = {"terminated": term}
        if all("terminated" in x.state for x in pod.containers.values()):
            pod.done = True

    def _write(self, pod: _Pod, pod_ip: str | None = None, host_ip: str | None = None) -> None:
        now = now_rfc3339()

        def change(obj: Obj) -> None:
            spec = obj.get("spec") or {}
            status = obj.setdefault("status", {})
            statuses = []
            for cs in spec.get("containers") or []:
                c = pod.containers.get(cs["name"])
                if c is None:
                    continue
                repo, tag = normalize_image(cs.get("image", ""))
                running = "running" in c.state
                entry: Obj = {
                    "name": c.name,
                    "state": c.state,
                    "lastState": c.last_state,
                    "ready": running,
                    "restartCount": c.restarts,
                    "image": f"{repo}:{tag}" if not tag.startswith("sha256:") else f"{repo}@{tag}",
                    "imageID": c.plan.image_id if c.container_id else "",
                    "started": running,
                }
                if c.container_id:
                    entry["containerID"] = c.container_id
                statuses.append(entry)
            status["containerStatuses"] = statuses
            all_ready = bool(statuses) and all(s["ready"] for s in statuses)
            terminated = [s["state"]["terminated"] for s in statuses if "terminated" in s["state"]]
            if pod.done:
                phase = "Succeeded" if all(t["exitCode"] == 0 for t in terminated) else "Failed"
            elif any("running" in s["state"] or s["restartCount"] for s in statuses):
                phase = "Running"
            else:
                phase = "Pending"
            status["phase"] = phase
            if pod_ip:
                status["podIP"] = pod_ip
                status["podIPs"] = [{"ip": pod_ip}]
                status["hostIP"] = host_ip
                status["hostIPs"] = [{"ip": host_ip}]
                status["startTime"] = now
            unready = [s["name"] for s in statuses if not s["ready"]]
            if pod.done:
                reason, msg = "PodCompleted", ""
            else:
                reason, msg = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
            conds = {c["type"]: c for c in status.get("conditions") or []}
            started = phase != "Pending" or pod_ip is not None
            _cond(conds, "PodReadyToStartContainers", "True" if started and not pod.done else "False", now)
            _cond(conds, "Initialized", "True", now)
            _cond(conds, "Ready", "True" if all_ready else "False", now, None if all_ready else reason, msg)
            _cond(
                conds,
                "ContainersReady",
                "True" if all_ready else "False",
                now,
                None if all_ready else reason,
                msg,
            )
            order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            status["conditions"] = sorted(
                conds.values(), key=lambda c: order.index(c["type"]) if c["type"] in order else 99
            )

        self._store.modify("pods", pod.namespace, pod.name, change)


def _cond(
    conds: dict[str, Obj], type_: str, value: str, now: str, reason: str | None = None, msg: str = ""
) -> None:
    old = conds.get(type_)
    if old is not None and old.get("status") == value and old.get("reason") == reason:
        return
    c: Obj = {"type": type_, "status": value, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        c["reason"] = reason
    if msg and value != "True":
        c["message"] = msg
    conds[type_] = c


def spec_image(pod: Obj, name: str) -> str:
    return next(
        (
            c.get("image", "")
            for c in (pod.get("spec") or {}).get("containers") or []
            if c.get("name") == name
        ),
        "",
    )
