"""Running the conformance suite against the lab as a user does (the pytest CLI), and reading its verdict."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuready.conformance import workloads as wl
from gpuready.deploy.upgrade import registration
from gpuready.lab import faults, hosts
from gpuready.lab.state import load_state
from gpuready.spec import knobs
from gpuready.spec.dra import ALLOCATION_LABEL

REPO = Path(__file__).resolve().parents[2]


INVENTORY = ("--inventory", "inventory/lab.py")
DISCOVER = ("--discover",)  # no inventory: the expectations from the cluster itself
ADDONS = knobs.KNOBS["addons_namespace"].default  # inventory/lab.py leaves the knob at its default


def suite_command(
    deployed_lab: Any, report_dir: Path, *args: str, source: tuple[str, ...] = INVENTORY
) -> list[str]:
    """The `gpuready check` command line :func:`run_suite` runs (cwd REPO, env ``lab.env()``), for a test that
    starts the suite itself to look at the cluster while it runs."""
    state = load_state(deployed_lab.lab.paths) or {}
    kubeconfig = (state.get("apiserver") or {}).get("kubeconfig")
    assert kubeconfig, "the lab records no API server kubeconfig"
    return [sys.executable, "-m", "gpuready.cli", "check", *source, "--kubeconfig",
            kubeconfig, "--report-dir", str(report_dir), "-p", "no:cacheprovider", "-q", *args]  # fmt: skip


def run_suite(deployed_lab: Any, report_dir: Path, *args: str, source: tuple[str, ...] = INVENTORY) -> dict:
    lab = deployed_lab.lab
    cmd = suite_command(deployed_lab, report_dir, *args, source=source)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=lab.env(), capture_output=True, text=True, timeout=600)
    print(
        f"conformance suite on the lab: {time.monotonic() - started:.1f} s"
    )  # a number for the closing note
    verdict_path = report_dir / "verdict.json"
    assert verdict_path.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads(verdict_path.read_text())


def failed(verdict: dict) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for node, data in verdict["nodes"].items():
        for layer, checks in data["layers"].items():
            for check, result in checks["checks"].items():
                if result["status"] == "fail":
                    out.setdefault(node, {})[f"{layer}/{check}"] = result["message"]
    return out


def node_of(deployed_lab: Any, profile: str) -> str:
    state = load_state(deployed_lab.lab.paths) or {}
    return next(name for name, host in state["hosts"].items() if host["profile"] == profile)


def wait_until_settled(deployed_lab: Any, timeout: float = 300.0, plugin_namespace: str = ADDONS) -> None:
    """Every Node Ready with GPUs allocatable, every add-on DaemonSet (gpu-system, and ``plugin_namespace`` where a
    test moved the device plugin) with a Ready pod on each node it selects, and every add-on pod Running and Ready:
    the healthy lab a test compares with. (Pods alone do not say it: right after a DaemonSet is created or a node is
    let back in, its pod there may not exist yet.)
    A test before may have restarted a node's add-ons (a pool change, a reboot); the suite reports a pod that is
    Running but not yet Ready as a failure, rightly, so a test that expects a pass waits for this first. A device
    plugin the kubelet dropped is restarted (:class:`PluginHealer`)."""
    from kubernetes import client
    from polling import wait_for

    cluster = lab_cluster(deployed_lab)
    core, apps = cluster.core, client.AppsV1Api(cluster.api)
    healer = PluginHealer(core, plugin_namespace)
    namespaces = dict.fromkeys([ADDONS, plugin_namespace])

    def unsettled() -> list[str]:
        nodes = core.list_node().items
        healer.heal(nodes)
        waiting = [f"node {n.metadata.name}" for n in nodes
                   if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]  # fmt: skip
        # every lab node is a GPU node: its device plugin has registered once some nvidia.com/* is allocatable (a
        # DRA node has none: its driver publishes ResourceSlices, and its plugin pod is Ready once it has)
        waiting += [f"node {n.metadata.name}'s nvidia.com/* allocatable" for n in nodes
                    if (n.metadata.labels or {}).get(ALLOCATION_LABEL) != "dra"
                    and not any(k.startswith("nvidia.com/") and v != "0"
                                for k, v in (n.status.allocatable or {}).items())]  # fmt: skip
        pods = [p for ns in namespaces for p in core.list_namespaced_pod(ns).items]
        for pod in pods:
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            if pod.status.phase != "Running" or not ready:
                waiting.append(f"pod {pod.metadata.name} ({pod.status.phase})")
        for ds in [d for ns in namespaces for d in apps.list_namespaced_daemon_set(ns).items]:
            st = ds.status
            if (st.observed_generation or 0) < (ds.metadata.generation or 0) or not (
                st.desired_number_scheduled == st.current_number_scheduled == st.number_ready
            ):
                waiting.append(
                    f"DaemonSet {ds.metadata.name} ({st.number_ready} of {st.desired_number_scheduled} Ready)"
                )
        return waiting

    last: list[str] = []

    def settled() -> bool:
        last[:] = unsettled()
        return not last

    try:
        wait_for(settled, timeout=timeout, what="the lab to settle (nodes, add-on DaemonSets and pods Ready)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still waiting for: {', '.join(last)}") from None


@dataclass
class PluginHealer:
    """Restarts a device plugin the real kubelet dropped, as an operator does and as the rolling upgrade does
    (:class:`gpuready.deploy.upgrade.registration.PluginRestarts`, which says why), printing each restart.

    A node counts as dropped when it has nothing of ``expected[node]`` allocatable or, for a node not in
    ``expected``, no ``nvidia.com/*`` allocatable at all (a DRA node has none by design). The suite reports such a
    node (node/test_allocatable names the cause); a test waiting for a node's allocatable calls :meth:`heal` between
    its polls (:func:`wait_until_settled`, :func:`wait_for_allocatable`, :func:`restore_allocatable`)."""

    core: Any
    namespace: str = ADDONS  # where the device plugin runs
    restarts: registration.PluginRestarts = field(init=False)

    def __post_init__(self) -> None:
        self.restarts = registration.PluginRestarts(self.core, self.namespace, print, max_restarts=3)

    def heal(self, nodes: list[Any] | None = None, expected: dict[str, list[str]] | None = None) -> None:
        nodes = self.core.list_node().items if nodes is None else nodes
        missing = {}
        for n in nodes:
            name, expected_here = n.metadata.name, (expected or {}).get(n.metadata.name)
            if expected_here is not None:
                missing[name] = registration.unregistered(n, expected_here)
            elif (n.metadata.labels or {}).get(ALLOCATION_LABEL) != "dra" and not any(
                k.startswith("nvidia.com/") and v != "0" for k, v in (n.status.allocatable or {}).items()
            ):
                held = [k for k in n.status.capacity or {} if k.startswith("nvidia.com/")]
                missing[name] = held or ["nvidia.com/*"]
        self.restarts.observe(missing)


def wait_for_allocatable(
    deployed_lab: Any, check: Callable[[], Any], what: str, timeout: float = 180.0
) -> Any:
    """wait_for(check) for a test that waits for a node's nvidia.com/* allocatable after a change that restarts
    or re-signals its device plugin, healing a plugin the kubelet dropped meanwhile (:class:`PluginHealer`)."""
    from polling import wait_for

    healer = PluginHealer(_core(deployed_lab))

    def healed() -> Any:
        healer.heal()
        return check()

    return wait_for(healed, timeout=timeout, what=what)


def lab_cluster(deployed_lab: Any) -> Any:
    """The session lab's cluster (gpuready.kube.Cluster) through the kubeconfig its state records."""
    from gpuready import kube

    state = load_state(deployed_lab.lab.paths) or {}
    return kube.connect(state["apiserver"]["kubeconfig"])


def _core(deployed_lab: Any) -> Any:
    return lab_cluster(deployed_lab).core


def suite_namespaces(cluster: Any, phase: str | None = None, prefix: str = wl.NAMESPACE_PREFIX) -> set[str]:
    """The suite's namespaces (``prefix``: the probe's only, say) still there; in ``phase`` only, e.g. Active (a
    Terminating one is not gone yet)."""
    return {
        n.metadata.name
        for n in cluster.core.list_namespace().items
        if n.metadata.name.startswith(prefix) and phase in (None, n.status.phase)
    }


def gpu_allocatable(deployed_lab: Any, node: str) -> dict[str, str]:
    """The node's nvidia.com/* allocatable."""
    alloc = _core(deployed_lab).read_node(node).status.allocatable or {}
    return {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")}


def restore_allocatable(deployed_lab: Any, node: str, fault: str, before: dict[str, str]) -> None:
    """After a cleared fault, give the node back the allocatable it had before it (`before`).

    On real kubelets NVIDIA's device plugin keeps a GPU it saw a critical XID on unhealthy until the plugin
    restarts (v0.19.3 internal/rm/health.go has no way back; a real node is the same), so its allocatable stays
    short after the fault is cleared. After such a fault the node's plugin pod is deleted, as an operator does
    after the repair, and the DaemonSet's new pod is waited for until the allocatable is what it was."""
    from polling import wait_for

    if not faults.FAULTS[fault].effects.xid:
        return
    core = _core(deployed_lab)
    healer = PluginHealer(core)
    wanted = {node: [k for k, v in before.items() if v != "0"]}

    def plugin_pods() -> list[Any]:
        pods = core.list_namespaced_pod(ADDONS, label_selector=registration.DEVICE_PLUGIN_SELECTOR).items
        return [pod for pod in pods if pod.spec.node_name == node]

    gone = set()
    for pod in plugin_pods():
        core.delete_namespaced_pod(pod.metadata.name, ADDONS)
        gone.add(pod.metadata.uid)
    seen: list[dict[str, str]] = []

    def back() -> bool:
        # the allocatable from before the fault, served by a new plugin pod: while the old pod terminates, the
        # kubelet may still show the old allocatable, and drops it to 0 once that plugin is gone; the new one can
        # lose its registration to the old one's end (PluginHealer)
        healer.heal([core.read_node(node)], expected=wanted)
        seen.append(gpu_allocatable(deployed_lab, node))
        fresh = [p for p in plugin_pods() if p.metadata.uid not in gone]
        statuses = [p.status.container_statuses or [] for p in fresh]
        ready = any(s and all(c.ready for c in s) for s in statuses)
        return bool(ready) and seen[-1] == before

    try:
        wait_for(
            back, timeout=180, what=f"{node}'s allocatable back to {before} after its device plugin restarted"
        )
    except AssertionError as exc:  # say what the plugin is doing, not only that it did not come back
        pods = [(p.metadata.name, p.status.phase, [(c.name, c.ready, c.restart_count)
                 for c in p.status.container_statuses or []]) for p in plugin_pods()]  # fmt: skip
        logs = "".join(
            core.read_namespaced_pod_log(name, ADDONS, container="nvidia-device-plugin", tail_lines=15)
            for name, phase, _ in pods
            if phase == "Running"
        )
        raise AssertionError(f"{exc}; allocatable {seen[-1]}; plugin pods {pods}\n{logs}") from None


@contextlib.contextmanager
def faulted(deployed_lab: Any, node: str, fault: str, gpu: int | None = None) -> Iterator[None]:
    """One fault on one lab host for the block; then cleared, and the node's allocatable restored
    (:func:`restore_allocatable`)."""
    before = gpu_allocatable(deployed_lab, node)
    hosts.inject_fault(deployed_lab.lab.paths, node, fault, gpu)
    try:
        yield
    finally:
        hosts.inject_fault(deployed_lab.lab.paths, node, None)
        restore_allocatable(deployed_lab, node, fault, before)
