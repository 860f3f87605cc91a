"""GPU pods for the whole fleet at once: one per-run namespace, pods created together, ONE watch, cleanup.

Why one watch: a fleet of N nodes followed with N sequential waits costs the sum of the pods' times (and N
long-polls on the API server); one watch over the run's namespace costs the slowest pod's time and one
connection. Why one namespace: everything the suite creates is found and deleted with one call, after success,
failure, timeout or Ctrl-C, and an operator sees at once what belongs to a run
(``app.kubernetes.io/managed-by=gpuready``).

Pods are built to pass a restricted Pod Security admission where the image allows: non-root user, no privilege
escalation, all capabilities dropped, RuntimeDefault seccomp, no hostPath, no service account token; on a node in
runtime-class mode they run on the ``nvidia`` RuntimeClass (in CDI mode, the default, they need none: containerd
injects the device plugin's CDI devices), pinned to their node by ``kubernetes.io/hostname`` (the scheduler still runs,
so device-plugin resources are accounted for and an over-subscribed pod shows as Unschedulable).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpuready.conformance.checks import LOG_LINES, PodResult, shown_events  # noqa: F401  (re-exported)
from gpuready.kube import MANAGED_BY, Cluster
from gpuready.spec import Images, NodeSpec
from gpuready.spec.model import CORDON_TOLERATION, GPU_TOLERATION

Obj = dict[str, Any]
NAMESPACE_PREFIX = "gpuready-conformance-"
# The defaults only: the suite runs each node's own (NodeSpec.images, knobs vectoradd_image and cuda_base_image).
VECTOR_ADD_IMAGE = Images.vectoradd
CUDA_BASE_IMAGE = Images.cuda_base
NON_ROOT_UID = 1000
# Waiting reasons after which the kubelet will not start the container without a change to the pod or node.
FATAL_WAITING = frozenset(
    {
        "RunContainerError",
        "CreateContainerError",
        "CreateContainerConfigError",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CrashLoopBackOff",
    }
)
GOALS = ("finished", "running", "settled")
# Progress while pods are awaited: a line at most every PROGRESS_EVERY seconds (none when all reach their goal
# sooner), at INFO on this logger. The pytest plugin shows it on the terminal (not with -q); anyone else can
# attach a handler. The watch is renewed every PROGRESS_EVERY seconds so a fleet that sends no event is reported too.
progress = logging.getLogger("gpuready.conformance.progress")  # gpuready.conformance.progress.LOGGER
PROGRESS_EVERY = 10.0
# seconds a released pod has to stop (`sleep infinity` under sh ignores SIGTERM: it is killed after this)
RELEASE_GRACE_S = 1
# seconds release waits for the kubelets to confirm before it deletes what is left by force
RELEASE_FORCE_AFTER_S = 30.0
# seconds a pod with ResourceClaims may stay bound and Pending before the run nudges its kubelet (ClaimNudges)
NUDGE_AFTER_S = 10.0
NUDGE_ANNOTATION = "gpuready.io/nudge"
CHECK_LABEL_KEY = "gpuready.io/check"


def progress_line(
    namespace: str,
    waiting: dict[str, PodResult],
    goals: dict[str, str],
    checks: dict[str, str],
    total: int,
    left: float,
) -> str:
    """One line: what the suite waits for (checks, goal), how many pods are still pending, in which state, where."""
    verbs = {"finished": "finish", "running": "run", "settled": "run or be refused"}
    what = sorted({f"{checks.get(name) or 'pods'} to {verbs[goals[name]]}" for name in waiting})
    phases: dict[str, int] = {}
    for res in waiting.values():
        key = res.reason or res.phase
        phases[key] = phases.get(key, 0) + 1
    nodes = sorted({res.node for res in waiting.values()})
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    states = ", ".join(f"{n} {k}" for k, n in sorted(phases.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"waiting for {'; '.join(what)} in {namespace}: {len(waiting)} of {total} pods still pending "
        f"({states}) on {shown}; {max(0, int(left))} s left"
    )


def _event_time(ev: Any) -> datetime:
    """When an event last happened, whichever API wrote it: core/v1 recorders (the kubelet) set lastTimestamp,
    events.k8s.io/v1 ones (the scheduler) eventTime and, when repeated, series.lastObservedTime."""
    series = getattr(ev, "series", None)
    when = (
        ev.last_timestamp
        or (series.last_observed_time if series is not None else None)
        or ev.event_time
        or ev.metadata.creation_timestamp
    )
    return when if isinstance(when, datetime) else datetime.min.replace(tzinfo=UTC)


def tolerations(node: NodeSpec) -> list[Obj]:
    """Tolerate the node's own taints (from the inventory), the usual GPU taint, and a cordon: a node is validated
    while cordoned (the rolling upgrade uncordons it only when it passes), as the GPU Operator's validator is."""
    out: list[Obj] = [dict(GPU_TOLERATION), dict(CORDON_TOLERATION)]
    for t in node.taints:
        tol: Obj = {"key": t.key, "effect": t.effect}
        tol.update({"operator": "Equal", "value": t.value} if t.value else {"operator": "Exists"})
        if tol not in out:
            out.append(tol)
    return out


def gpu_pod(
    name: str,
    node: NodeSpec,
    image: str,
    resource: str,
    *,
    command: list[str] | None = None,
    check: str,
    count: int = 1,
) -> Obj:
    """A pod on ``node`` asking for ``count`` of ``resource``, hardened as the module docstring says."""
    container: Obj = {
        "name": "main",
        "image": image,
        "resources": {"limits": {resource: str(count)}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if command:
        container["command"] = command
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {**MANAGED_BY, "gpuready.io/check": check},
            "annotations": {"gpuready.io/node": node.name},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": tolerations(node),
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }
    if node.runtime_class:  # runtime-class mode; in CDI mode the device plugin's CDI devices need no handler
        pod["spec"]["runtimeClassName"] = node.runtime_class
    return pod


def _result(pod: Obj, node: str) -> PodResult:
    status = pod.get("status") or {}
    res = PodResult(name=pod["metadata"]["name"], node=node, phase=status.get("phase") or "Pending")
    for cond in status.get("conditions") or []:
        scheduled = cond.get("type") == "PodScheduled" and cond.get("status") == "False"
        if scheduled and cond.get("reason") == "Unschedulable":
            res.unschedulable = cond.get("message") or "no node fits"
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        detail = state.get("terminated") or state.get("waiting") or {}
        if detail.get("reason"):
            res.reason, res.message = detail["reason"], detail.get("message") or ""
        if "terminated" in state:
            res.exit_code = state["terminated"].get("exitCode")
    if not res.reason and status.get("reason"):
        res.reason, res.message = status["reason"], status.get("message") or ""
    return res


class ClaimNudges:
    """Which pods of a run to nudge: pods with ResourceClaims that are bound to a node but still Pending.

    The kubelet prepares a pod's claims before it starts the pod, and when that fails it does not try again until
    its next resync of the pod, a minute or more later (kubelet's SyncPod returns no error for it). The first try
    fails on a healthy node when the kubelet asks for the claim before the API server's node authorizer has linked
    the just-bound pod to the node ("no relationship found between node ... and this object"), a race that a busy
    control plane loses often. A change to the pod's annotations makes the kubelet sync the pod at once, so a pod
    bound and Pending for NUDGE_AFTER_S gets ``gpuready.io/nudge: <n>`` (again after each NUDGE_AFTER_S while it
    stays so). A pod that cannot start for a real reason still fails at the run's timeout, with its events."""

    def __init__(self, pods: Iterable[Obj]) -> None:
        self.names = {str(p["metadata"]["name"]) for p in pods if (p.get("spec") or {}).get("resourceClaims")}
        self.since: dict[str, float] = {}  # pod -> when it was seen bound and Pending (or last nudged)
        self.count: dict[str, int] = {}

    def seen(self, pod: Obj, now: float) -> None:
        name = pod["metadata"]["name"]
        if name not in self.names:
            return
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        pending = ((pod.get("status") or {}).get("phase") or "Pending") == "Pending"
        if bound and pending and not pod["metadata"].get("deletionTimestamp"):
            self.since.setdefault(name, now)
        else:
            self.since.pop(name, None)

    def due(self, now: float) -> dict[str, int]:
        """The pods to nudge now, each with its nudge's number; each is due again NUDGE_AFTER_S later."""
        out: dict[str, int] = {}
        for name, since in self.since.items():
            if now - since >= NUDGE_AFTER_S:
                self.since[name] = now
                out[name] = self.count[name] = self.count.get(name, 0) + 1
        return out


def _reached(res: PodResult, goal: str) -> bool:
    finished = res.phase in ("Succeeded", "Failed")
    fatal = res.reason in FATAL_WAITING or finished
    if goal == "finished":
        return fatal
    if goal == "running":
        return res.phase == "Running" or fatal
    return res.phase == "Running" or fatal or res.unschedulable is not None  # settled


RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


class Workloads:
    """One run's namespace and the pods in it. Create it lazily (``ensure_namespace``), delete it with ``delete``."""

    def __init__(
        self, cluster: Cluster, namespace: str | None = None, pod_security: str = "restricted"
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace or NAMESPACE_PREFIX + secrets.token_hex(4)
        # "restricted" but for the probe pods' namespace (gpuready.conformance.probe: --connection pod)
        self.pod_security = {"pod-security.kubernetes.io/enforce": pod_security}
        self.created = False
        self.results: dict[str, PodResult] = {}
        self.requests = 0

    def ensure_namespace(self) -> None:
        if self.created:
            return
        # enforce Pod Security "restricted" on the run's namespace: the API server itself proves every pod the
        # suite runs is hardened as the module docstring says (a regression is refused, not silently run)
        body = {"metadata": {"name": self.namespace, "labels": {**MANAGED_BY, **self.pod_security}}}
        # the client serialises a plain dict body as it does a model; its annotations name only the model
        self.cluster.core.create_namespace(body)  # type: ignore[arg-type]
        self.requests += 1
        self.created = True

    def release(self, checks: Iterable[str], timeout: float) -> None:
        """Delete this run's pods of ``checks`` (their ``gpuready.io/check`` label) and wait until they are gone,
        so their GPUs are free for the layers after this one (the policy layer needs nodes nothing holds). Their
        results stay as they were for the checks; they no longer count as running on their nodes.

        The delete is graceful (RELEASE_GRACE_S), not forced: a forced delete removes a running pod from the API at
        once, while its kubelet has yet to stop it and unprepare its ResourceClaims (kubernetes#131513). The
        scheduler then hands the same device to the next claim, the DRA driver refuses to prepare a device that is
        still prepared, and the kubelet tries again only at its next resync of the pod, a minute later. A graceful
        delete is confirmed by the kubelet after the unprepare, so "gone" here means the devices are free. A
        finished pod is removed at once either way (its kubelet unprepared it before it reported the end). Pods that
        are still there after RELEASE_FORCE_AFTER_S (a node down, a kubelet stuck) are deleted by force."""
        if not self.created:
            return
        core = self.cluster.core
        selector = f"gpuready.io/check in ({','.join(sorted(checks))})"
        listed = core.list_namespaced_pod(self.namespace, label_selector=selector)
        names = {str(p.metadata.name) for p in listed.items if p.metadata}
        if not names:
            return
        core.delete_collection_namespaced_pod(
            self.namespace, label_selector=selector, grace_period_seconds=RELEASE_GRACE_S
        )
        self.requests += 2
        start = time.monotonic()
        forced = False
        while time.monotonic() < start + timeout:  # one LIST a poll, whatever the number of nodes
            self.requests += 1
            if not core.list_namespaced_pod(self.namespace, label_selector=selector, limit=1).items:
                break
            if not forced and time.monotonic() >= start + RELEASE_FORCE_AFTER_S:
                # a kubelet that has not confirmed by now is down or stuck: nothing waits on it for longer
                core.delete_collection_namespaced_pod(
                    self.namespace, label_selector=selector, grace_period_seconds=0
                )
                self.requests += 1
                forced = True
            time.sleep(0.2)
        for name in names & set(self.results):
            self.results[name] = replace(self.results[name], phase="Deleted")

    def delete(self) -> bool:
        """Delete the run's namespace (and so every pod in it); True when there was one to delete."""
        if not self.created:
            return False
        from kubernetes.client.exceptions import ApiException

        try:
            self.cluster.core.delete_namespace(
                self.namespace, propagation_policy="Background", _request_timeout=self.cluster.request_timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.created = False
        return True

    def run(self, pods: Iterable[tuple[Obj, str]], timeout: float) -> dict[str, PodResult]:
        """Create ``(pod, goal)`` pairs at once, follow them with one watch until each reached its goal
        (``finished``, ``running`` or ``settled``: running, finished or Unschedulable) or ``timeout`` passed;
        then read the logs of pods that ran and, for pods that failed or timed out, their events."""
        self.ensure_namespace()
        core = self.cluster.core
        goals: dict[str, str] = {}
        nodes: dict[str, str] = {}
        todo = list(pods)
        for _pod, goal in todo:
            if goal not in GOALS:
                raise ValueError(f"unknown goal {goal!r}; one of {GOALS}")

        def create(pair: tuple[Obj, str]) -> None:
            core.create_namespaced_pod(self.namespace, pair[0])  # type: ignore[arg-type]  # a dict body, as above

        for (pod, goal), _ in zip(todo, _at_once(create, todo), strict=True):  # one request per pod, at once
            self.requests += 1
            name = pod["metadata"]["name"]
            goals[name] = goal
            nodes[name] = pod["metadata"]["annotations"]["gpuready.io/node"]
        deadline = time.monotonic() + timeout
        state: dict[str, PodResult] = {}

        pending = set(goals)  # pods not at their goal yet: one check per event, not one per pod per event

        nudges = ClaimNudges(pod for pod, _ in todo)

        def seen(_type: str, obj: Obj) -> None:
            name = obj["metadata"]["name"]
            if name in goals:
                nudges.seen(obj, time.monotonic())
                state[name] = result = _result(obj, nodes[name])
                if _reached(result, goals[name]):
                    pending.discard(name)
                else:
                    pending.add(name)

        def done() -> bool:
            return not pending

        checks = {str(pod["metadata"]["name"]): (pod["metadata"].get("labels") or {}).get(CHECK_LABEL_KEY, "")
                  for pod, _ in todo}  # fmt: skip
        last_line = time.monotonic()

        def report_progress() -> None:
            nonlocal last_line
            now = time.monotonic()
            if now - last_line < PROGRESS_EVERY or done():
                return
            last_line = now
            if progress.isEnabledFor(logging.INFO):
                waiting = {
                    n: state.get(n) or PodResult(n, nodes[n], phase="not seen yet") for n in sorted(pending)
                }
                progress.info(
                    progress_line(self.namespace, waiting, goals, checks, len(goals), deadline - now)
                )

        def tick() -> None:
            for name, count in nudges.due(time.monotonic()).items():
                self._nudge(name, count)
            report_progress()

        self.follow(seen, done, deadline - time.monotonic(), tick=tick)
        for name in goals:
            res = state.get(name) or PodResult(name=name, node=nodes[name])
            res.timed_out = not _reached(res, goals[name])
            state[name] = res
        self._collect(state, goals, deadline)
        self.results.update(state)
        return state

    def _nudge(self, name: str, count: int) -> None:
        """Change the pod's NUDGE_ANNOTATION, so that its kubelet syncs it now (:class:`ClaimNudges` says why)."""
        from kubernetes.client.exceptions import ApiException

        self.requests += 1
        try:
            self.cluster.core.patch_namespaced_pod(
                name,
                self.namespace,
                {"metadata": {"annotations": {NUDGE_ANNOTATION: str(count)}}},
                _request_timeout=self.cluster.request_timeout,
            )
        except ApiException as exc:
            if exc.status != 404:  # gone meanwhile: nothing to nudge
                raise
        progress.info(
            f"nudged the kubelet of {self.namespace}/{name}: bound, claims not prepared yet (#{count})"
        )

    def follow(
        self,
        seen: Callable[[str, Obj], None],
        done: Callable[[], bool],
        timeout: float,
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Follow the namespace's pods with one LIST and one watch from there (a LIST again after 410 Gone), handing
        ``seen(event type, pod)`` each pod as the API server sent it (a listed pod as ``ADDED``), until ``done()``
        or ``timeout`` seconds passed. ``tick``, when given, is called before each watch and after each event, and
        the watch is renewed every PROGRESS_EVERY seconds so that it is called even when no pod changes. The suite's
        one list/watch loop: :meth:`run` follows its pods with it, :mod:`gpuready.conformance.policy_runs` its own."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        core = self.cluster.core
        deadline = time.monotonic() + timeout

        def listed() -> str | None:
            found = self._list_pods()
            for obj in found["items"]:
                seen("ADDED", obj)
            return found["metadata"].get("resourceVersion")

        version = listed()
        while not done() and time.monotonic() < deadline:
            if tick is not None:
                tick()
            left = deadline - time.monotonic()
            remaining = max(1, int((left if tick is None else min(left, PROGRESS_EVERY)) + 0.999))
            stream = watch.Watch()
            # events as the API server sent them (dicts): the client's model deserialisation of every pod event
            # (then serialised back) was the costliest part of following 1000 probe pods
            stream.get_return_type = lambda func: None  # type: ignore[method-assign]
            self.requests += 1
            try:
                events = stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=remaining,
                    _request_timeout=remaining + 5,
                )
                for event in events:
                    obj = event["raw_object"]
                    version = obj["metadata"].get("resourceVersion") or version
                    seen(event["type"], obj)
                    if done() or time.monotonic() >= deadline:
                        break
                    if tick is not None:
                        tick()
            except ApiException as exc:
                if exc.status != 410:  # 410 Gone: our version is too old; list again and watch from there
                    raise
                version = listed()
            finally:
                stream.stop()

    def _list_pods(self) -> Obj:
        self.requests += 1
        # with _preload_content=False the client returns the raw urllib3 response, not the V1PodList it is annotated with
        raw: Any = self.cluster.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return json.loads(raw.data)

    def _collect(self, state: dict[str, PodResult], goals: dict[str, str], deadline: float) -> None:
        from kubernetes.client.exceptions import ApiException

        core = self.cluster.core

        def read_log(item: tuple[str, PodResult]) -> int:
            name, res = item
            for attempt in range(1, 21):  # a just-started container may not have printed yet
                try:
                    res.log = core.read_namespaced_pod_log(
                        name, self.namespace, _request_timeout=self.cluster.request_timeout
                    )
                except ApiException:
                    res.log = ""
                if res.log or res.phase != "Running" or time.monotonic() >= deadline:
                    return attempt
                time.sleep(0.1)
            return 20

        ran = [(n, r) for n, r in state.items() if r.phase in ("Running", "Succeeded", "Failed")]
        self.requests += sum(
            _at_once(read_log, ran)
        )  # one request per pod (more while it has printed nothing)
        if any(r.timed_out or r.phase == "Failed" or r.reason for r in state.values()):
            self.requests += 1
            events = core.list_namespaced_event(
                self.namespace, _request_timeout=self.cluster.request_timeout
            ).items
            for ev in sorted(events, key=_event_time):
                involved = state.get(ev.involved_object.name or "")
                if involved is not None:
                    involved.events.append(f"{ev.type} {ev.reason}: {ev.message}")

    def running_on(self, node: str) -> list[PodResult]:
        """Pods of this run that were running on ``node`` (they hold GPUs until the namespace goes)."""
        return [r for r in self.results.values() if r.node == node and r.phase == "Running"]


def _at_once(call: Any, items: list[Any], workers: int = 8) -> list[Any]:
    """``call`` on every item, a few requests in flight at once (the client's connection pool holds a few): a
    fleet's pods are created and their logs read in the time of a few round trips each, not one after another."""
    if len(items) <= 1:
        return [call(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(call, items))
