"""A pool with a taint of its own, and an XID 79, on a real-kubelet lab host through NVIDIA's real add-ons (#29).

Its own one-host lab (trixie: containerd 1.7, CDI mode; the L40S profile: 2 GPUs, time-sliced 2 ways (inventory/lab.py),
so 4 allocatable; subnet
10.237.0.0/16, host number 237) on the real kubelet, its pool tainted ``team=ml:NoSchedule`` besides
the default GPU taint (GPUREADY_LAB_EXTRA_TAINTS). The host is the cluster's only node, so every add-on, NFD's
master Deployment included, must tolerate the pool's taints to run at all, and the suite's pods too.

XID 79 (the GPU fell off the bus): NVIDIA's device plugin v0.19.3 reads the XID event from NVML's event set, asks
the event's device (a handle it opened before the loss, which still answers its UUID, as on a real node:
NVIDIA/k8s-device-plugin#2038) for its UUID and marks that GPU's device unhealthy. Its XID watch keeps one device
per GPU (health.go's parentToDeviceMap), so of the lost GPU's 2 time-slicing replicas it takes out one
(NVIDIA/k8s-device-plugin#1929, fixed by #1930 after v0.19.3): allocatable drops by one, 4 -> 3, and the other
replica still takes pods onto a GPU that is gone. The suite names the node, the lost GPU's bus id, and says the
drop is not whole GPUs.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Lab, deployed_real_kubelet_lab
from polling import wait_for
from suite_runs import failed, faulted, gpu_allocatable, run_suite, wait_for_allocatable, wait_until_settled
from test_lab_real_kubelet import _kubectl

pytestmark = pytest.mark.lab

INDEX = 237
NODE = f"gpu-node-{INDEX}"
PROFILE = "l40s-2"
NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
TEAM_TAINT = "team=ml:NoSchedule"


@pytest.fixture(scope="module")
def tainted_lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    env = {"GPUREADY_LAB_EXTRA_TAINTS": TEAM_TAINT}
    with deployed_real_kubelet_lab(tmp_path_factory, "lab-real-taint", INDEX, "trixie", PROFILE, env) as lab:
        yield SimpleNamespace(lab=lab)


def _controllers(lab: Lab) -> dict[str, tuple[int, int]]:
    """Each add-on DaemonSet and Deployment: (wanted, ready) pods."""
    r = _kubectl(lab.state, "get", "daemonsets,deployments", "-n", NAMESPACE, "-o", "json")
    assert r.returncode == 0, r.stderr
    out = {}
    for item in json.loads(r.stdout)["items"]:
        status = item.get("status", {})
        wanted = status.get("desiredNumberScheduled", item.get("spec", {}).get("replicas", 0))
        ready = status.get("numberReady", status.get("readyReplicas", 0)) or 0
        out[f"{item['kind']}/{item['metadata']['name']}"] = (wanted, ready)
    return out


def test_every_addon_runs_on_a_pool_with_a_taint_of_its_own(tainted_lab: Any, tmp_path: Path) -> None:
    lab = tainted_lab.lab
    taints = json.loads(_kubectl(lab.state, "get", "node", NODE, "-o", "jsonpath={.spec.taints}").stdout)
    assert {"key": "team", "value": "ml", "effect": "NoSchedule"} in taints, taints
    wait_for(
        lambda: all(wanted == ready == 1 for wanted, ready in _controllers(lab).values()),
        300,
        f"every add-on's pod Ready on {NODE}",
    )
    assert {"DaemonSet/nvidia-device-plugin", "DaemonSet/gpu-feature-discovery", "DaemonSet/nfd-worker",
            "DaemonSet/nvidia-dcgm-exporter", "Deployment/nfd-master"} <= set(_controllers(lab))  # fmt: skip
    wait_until_settled(tainted_lab)
    wait_for_the_pools_config(tainted_lab)
    verdict = run_suite(tainted_lab, tmp_path)
    assert failed(verdict) == {}, json.dumps(verdict["nodes"], indent=1)[-6000:]


def wait_for_the_pools_config(tainted_lab: Any) -> None:
    """All 4 replicas (2 GPUs x 2) allocatable: the plugin runs the pool's config. NVIDIA's config-manager (v0.19.3)
    applies DEFAULT_CONFIG first at each start and the node's label a moment later (a SIGHUP), so the node can
    advertise its 2 whole GPUs in between: the suite, run in that moment, rightly fails the allocatable check (CI
    at bb4552a: "allocatable nvidia.com/gpu = 2, expected 4"). The open item: one DaemonSet per pool config."""
    seen: list[dict[str, str]] = []

    def all_replicas() -> bool:
        seen.append(gpu_allocatable(tainted_lab, NODE))
        return seen[-1] == {"nvidia.com/gpu": "4"}

    try:
        wait_for_allocatable(tainted_lab, all_replicas, f"{NODE}'s 4 replicas (2 GPUs x 2) allocatable", 240)
    except AssertionError as exc:
        logs = _kubectl(tainted_lab.lab.state, "logs", "-n", NAMESPACE, "-l",
                        "app.kubernetes.io/name=nvidia-device-plugin", "--all-containers", "--tail=30")  # fmt: skip
        raise AssertionError(f"{exc}; allocatable {seen[-1]}\n{logs.stdout}{logs.stderr}") from None


def test_an_xid_79_through_nvidias_plugin_takes_one_device_out_and_the_suite_names_the_gpu(
    tainted_lab: Any, tmp_path: Path
) -> None:
    wait_for_the_pools_config(tainted_lab)
    bus = tainted_lab.lab.ssh(
        NODE, "nvidia-smi -i 1 --query-gpu=pci.bus_id --format=csv,noheader"
    ).stdout.strip()
    with faulted(tainted_lab, NODE, "xid-79", 1):
        wait_for(lambda: gpu_allocatable(tainted_lab, NODE) == {"nvidia.com/gpu": "3"}, 120,
                 f"{NODE}'s allocatable nvidia.com/gpu 3 after an XID 79 on GPU 1")  # fmt: skip
        gpu_layer = failed(run_suite(tainted_lab, tmp_path / "gpu", "-m", "gpu"))
        node_layer = failed(run_suite(tainted_lab, tmp_path / "node", "-m", "node"))
    assert list(gpu_layer) == [NODE] and list(node_layer) == [NODE], (gpu_layer, node_layer)
    named = " ".join(gpu_layer[NODE].values())
    assert "XID 79" in named and bus.lower().removeprefix("0000") in named.lower(), gpu_layer[NODE]
    assert node_layer[NODE] == {
        "node/test_allocatable": f"{NODE}: allocatable nvidia.com/gpu = 3, expected 4 (time-slicing replicas 2 x 2 "
        "GPUs); 1 of 4 in capacity marked unhealthy by the device plugin, not whole GPUs (2 replicas each): the "
        "rest of a broken GPU's replicas still take pods (NVIDIA's plugin up to v0.19.3 takes out one replica per "
        "XID, NVIDIA/k8s-device-plugin#1929)"
    }, node_layer[NODE]
    # the fault cleared and the plugin restarted (faulted's restore_allocatable): both GPUs back
    assert gpu_allocatable(tainted_lab, NODE) == {"nvidia.com/gpu": "4"}
