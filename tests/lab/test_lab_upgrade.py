"""deploys/upgrade_driver.py on a 4-node lab fleet with a GPU pod on every node, in batches of 2.

The fleet is deployed at driver 570 first; the inventory's 580 is then the upgrade. In order (module-scoped, the
tests build on each other): a fault injected while a node is being upgraded leaves it cordoned and stops the run
before the next batch; after the fault is fixed a second run finishes that node and upgrades the rest (pods evicted
and rescheduled, every node uncordoned on 580); an upgrade to the next branch (R595) killed while a node reboots is
finished by a rerun. (A downgrade would now fail its validation: every older driver is below a security fix.)
The lab lives on host numbers 101-104, beside the session lab.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Lab, lab_skip_reason
from pyinfra_runs import PYINFRA, REPO, PyinfraRun, run_pyinfra

from gpuready import kube
from gpuready.deploy.upgrade import maintenance
from gpuready.lab import cuda_images, hosts, ssh
from gpuready.lab.state import LabPaths

pytestmark = pytest.mark.lab

NODES = ["gpu-node-101", "gpu-node-102", "gpu-node-103", "gpu-node-104"]
PROFILES = ["h100-sxm-8", "l4-1", "l40s-2", "l4-1"]  # the H100 runs Fabric Manager, upgraded with the driver
OLD = ("--data", "nvidia_driver_version=570.195.03", "--data", "nvidia_driver_branch=570")
NEXT = ("--data", "nvidia_driver_version=595.91.07", "--data", "nvidia_driver_branch=595")
BATCHES_OF_2 = ("--data", "upgrade_batch_size=2", "--data", "upgrade_max_unavailable=2")
UPGRADE = "deploys/upgrade_driver.py"
WORKLOAD = "gpu-work"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, kube.Cluster]]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("upgrade-lab"))
    try:
        lab = Lab(paths, hosts.up(paths, nodes=4, profiles=PROFILES, first_index=101))
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            run = run_pyinfra(lab, *OLD, deploy=deploy)
            assert run.returncode == 0, run.failure
        cluster = kube.connect(lab.state["apiserver"]["kubeconfig"])
        _start_workload(cluster)
        yield lab, cluster
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def _start_workload(cluster: kube.Cluster) -> None:
    """A ReplicaSet of 4 one-GPU pods, one on each node.

    The lab's nodes share one machine, so they have the same CPU and memory: with a CPU and memory request, the
    scheduler's least-allocated scoring spreads the pods one to a node, once every node advertises its GPUs.
    """
    wait_until(lambda: all(gpus_on(cluster, n) for n in NODES), 120, "every node advertising nvidia.com/gpu")
    labels = {"app": WORKLOAD}
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"nvidia.com/gpu": "1"}}
    container = {
        "name": "train",
        "image": cuda_images.CUDA_BASE_IMAGE,  # one the lab has: a real kubelet would fail to pull any other
        "command": ["sleep", "infinity"],
        "resources": resources,
    }
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": WORKLOAD, "namespace": "default"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # `sleep` as its container's PID 1 ignores SIGTERM: each eviction would wait out the default
                    # 30 s grace period on real kubelets, four times a run; the drain still waits for the exit
                    "terminationGracePeriodSeconds": 3,
                    "runtimeClassName": "nvidia",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                },
            },
        },
    }
    cluster.dynamic.resources.get(api_version="apps/v1", kind="ReplicaSet").create(
        body=rs, namespace="default"
    )
    placed = wait_until(lambda: (p := workload(cluster)) and len(p) == 4 and p, 60, "4 running workload pods")
    assert sorted(placed.values()) == NODES, placed


def gpus_on(cluster: kube.Cluster, node: str) -> int:
    allocatable = cluster.core.read_node(node).status.allocatable or {}
    return int(allocatable.get("nvidia.com/gpu", "0"))


def workload(cluster: kube.Cluster) -> dict[str, str] | None:
    """Running workload pods: uid -> node (None while any is not Running)."""
    pods = cluster.core.list_namespaced_pod("default", label_selector=f"app={WORKLOAD}").items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    if any(p.status.phase != "Running" for p in live):
        return None
    return {p.metadata.uid: p.spec.node_name for p in live}


def wait_until(
    check: Callable[[], Any], timeout: float, what: str, proc: subprocess.Popen | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"pyinfra exited {proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.3)


def views(cluster: kube.Cluster) -> dict[str, maintenance.NodeView]:
    return {n: v for n, v in maintenance.read_nodes(cluster).items() if n in NODES}


def boot_id(lab: Lab, node: str) -> str | None:
    """The host's boot id, None while it does not answer (down, or half-way through going down or up)."""
    host = hosts.host_entry(lab.state, node)
    argv = ssh.ssh_argv(lab.paths, host["address"], host["port"], ["cat /proc/sys/kernel/random/boot_id"])
    try:
        result = subprocess.run(
            [argv[0], "-o", "ConnectTimeout=5", *argv[1:]], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return None
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def driver_on(lab: Lab, node: str) -> tuple[str, str]:
    """(installed nvidia-driver package, driver version nvidia-smi reports)."""
    package = lab.ssh(node, "dpkg-query -W -f '${Version}' nvidia-driver").stdout
    smi = lab.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=False)
    return package, (smi.stdout.splitlines() or [smi.stdout])[0].strip()


def uncoloured(output: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", output)


def says(output: str, node: str, text: str) -> bool:
    """Whether pyinfra printed ``text`` on a line of ``node`` (colours stripped)."""
    plain = uncoloured(output)
    return any(f"[{node}]" in line and text in line for line in plain.splitlines())


def summary(output: str) -> dict[str, str]:
    """node -> status from the summary the deploy prints at the end of the run."""
    plain = uncoloured(output)
    assert plain.count("--> Upgrade summary:") <= 1, "the summary is printed once, at the end"
    rows = (
        plain.split("--> Upgrade summary:", 1)[1].split("-->", 1)[0]
        if "--> Upgrade summary:" in plain
        else ""
    )
    return {cells[0]: cells[1] for line in rows.splitlines() if len(cells := line.split()) >= 2}


def start_upgrade(lab: Lab, log: Path, *data: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(PYINFRA), "-y", *BATCHES_OF_2, *data, "inventory/lab.py", UPGRADE],
            cwd=REPO,
            env=lab.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_fault_during_upgrade_leaves_the_node_cordoned_and_stops_the_run(fleet, tmp_path: Path) -> None:
    lab, cluster = fleet
    before = workload(cluster)
    assert before is not None
    log = tmp_path / "upgrade.log"
    proc = start_upgrade(lab, log)
    try:
        # Fabric Manager of the H100 node fails to start with the new driver, the classic upgrade failure
        wait_until(
            lambda: views(cluster)["gpu-node-101"].upgrade_state == "upgrading",
            300,
            "gpu-node-101 upgrading",
            proc,
        )
        hosts.inject_fault(lab.paths, "gpu-node-101", "fabricmanager-failed")
        assert proc.wait(timeout=900) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text(errors="replace")
    now = views(cluster)
    failed = now["gpu-node-101"]
    assert (failed.unschedulable, failed.upgrade_state) == (True, "failed"), output[-4000:]
    assert "fabric" in failed.annotations[maintenance.FAILURE_ANNOTATION].lower()
    assert says(output, "gpu-node-101", "conformance failed after the upgrade; gpu-node-101 stays cordoned")
    # its batch-mate finished; the next batch was not started and is untouched
    assert (now["gpu-node-102"].unschedulable, now["gpu-node-102"].upgrade_state) == (False, "done")
    assert driver_on(lab, "gpu-node-102") == ("580.178.04-1", "580.178.04")
    for node in ("gpu-node-103", "gpu-node-104"):
        assert (now[node].unschedulable, now[node].upgrade_state) == (False, None)
        assert driver_on(lab, node) == ("570.195.03-1", "570.195.03")
        assert says(output, node, "not started: the upgrade stopped after gpu-node-101 failed")
    assert summary(output) == {
        "gpu-node-101": "failed",
        "gpu-node-102": "upgraded",
        "gpu-node-103": "not-started",
        "gpu-node-104": "not-started",
    }, output[-3000:]
    written = json.loads((REPO / "reports" / "upgrade" / "summary.json").read_text())["nodes"]
    assert written["gpu-node-101"]["cordoned"] and "fabric" in written["gpu-node-101"]["detail"].lower()
    after = workload(cluster)
    assert after is not None and len(after) == 4
    kept = {uid: node for uid, node in before.items() if node in ("gpu-node-103", "gpu-node-104")}
    assert kept.items() <= after.items()  # pods on the untouched nodes were not disturbed


def test_rerun_after_the_fix_finishes_the_failed_node_and_the_fleet(fleet) -> None:
    lab, cluster = fleet
    before = workload(cluster)
    hosts.inject_fault(lab.paths, "gpu-node-101", None)  # the repair
    run: PyinfraRun = run_pyinfra(lab, *BATCHES_OF_2, deploy=UPGRADE)
    assert run.returncode == 0, run.output[-5000:]
    assert says(run.output, "gpu-node-102", "at the pinned driver and toolkit: skipped, not cordoned")
    assert summary(run.output) == {
        "gpu-node-101": "upgraded",
        "gpu-node-102": "skipped",
        "gpu-node-103": "upgraded",
        "gpu-node-104": "upgraded",
    }
    for node, view in views(cluster).items():
        assert (view.unschedulable, view.upgrade_state) == (False, "done"), node
        assert driver_on(lab, node) == ("580.178.04-1", "580.178.04")
    after = workload(cluster)
    assert after is not None and len(after) == 4
    evicted = {uid for uid, node in before.items() if node in ("gpu-node-103", "gpu-node-104")}
    assert evicted and not evicted & after.keys()  # evicted from the upgraded nodes, recreated elsewhere
    assert lab.ssh("gpu-node-101", "systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    again = run_pyinfra(lab, *BATCHES_OF_2, deploy=UPGRADE)
    assert again.returncode == 0, again.output[-3000:]
    assert says(again.output, "gpu-node-101", "nothing to upgrade")
    assert set(summary(again.output).values()) == {"skipped"}
    assert not any(v.unschedulable for v in views(cluster).values())


def test_run_killed_while_a_node_reboots_is_finished_by_the_next(fleet, tmp_path: Path) -> None:
    lab, cluster = fleet
    first_batch = ["gpu-node-101", "gpu-node-102"]
    booted = {node: boot_id(lab, node) for node in first_batch}
    proc = start_upgrade(lab, tmp_path / "killed.log", *NEXT)
    try:
        # killed while gpu-node-101 is down for its reboot (its batch-mate reboots at the same time)
        wait_until(
            lambda: (
                views(cluster)["gpu-node-101"].upgrade_state == "rebooting"
                and boot_id(lab, "gpu-node-101") is None
            ),
            300,
            "gpu-node-101 down for its reboot",
            proc,
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = views(cluster)
    assert left["gpu-node-101"].unschedulable and left["gpu-node-101"].upgrade_state == "rebooting"
    # as an operator would, run it again once the hosts answer (a host still down is refused with the reason)
    for node in first_batch:
        wait_until(lambda n=node: boot_id(lab, n) not in (None, booted[n]), 180, f"{node} back in a new boot")
    run = run_pyinfra(lab, *BATCHES_OF_2, *NEXT, deploy=UPGRADE)
    assert run.returncode == 0, run.output[-5000:]
    assert says(run.output, "gpu-node-101", "an earlier run stopped at gpuready.io/upgrade-state=rebooting")
    assert set(summary(run.output).values()) == {"upgraded"}
    for node, view in views(cluster).items():
        assert (view.unschedulable, view.upgrade_state) == (False, "done"), node
        assert driver_on(lab, node) == ("595.91.07-1", "595.91.07")
