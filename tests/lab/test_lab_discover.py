"""``--discover`` on real lab hosts: no inventory at all, the expectations from the cluster itself.

A lab of its own: three time-sliced L4 hosts on trixie (gpu-node-171..173, one pool: NVIDIA-L4-SHARED time-slicing
x4, CDI mode), converged by the real deploys (pyinfra deploys/gpu_node.py then deploys/cluster_addons.py,
inventory/lab.py) and joined to the lab's real control plane. Proven, in order (module-scoped, the last test
breaks the lab):

* healthy, ``pytest conformance --discover --connection pod`` with no ``--inventory`` finds the three GPU nodes from
  GFD's labels, the device plugin's config and a probe pod per node, and passes every node on every layer it runs;
* ``gpuready discover`` writes an inventory that, fed back with ``--inventory <it> --connection pod``, passes;
* with NVIDIA's device plugin laid out as the GPU Operator lays it out (namespace gpu-operator,
  nvidia-device-plugin-daemonset, its config in time-slicing-config), discovery finds the same pool and passes;
* a node whose allocatable disagrees with its labels (GFD's DaemonSet deleted, so its labels stay at 4 replicas,
  then the node relabelled to a device-plugin config of 2 replicas the plugin takes) and a node whose driver
  differs from its pool (upgraded alone by the real rolling upgrade, deploys/upgrade_driver.py ``--limit``, to
  595.91.07 while the other two run the pinned 580.178.04) each fail, exactly those two nodes, with messages
  naming the label or version and what was expected; pinned with ``--expect-driver`` to the odd one's driver, the
  other two fail instead. GFD runs through the upgrade, so the upgraded node's driver label follows nvidia-smi
  (unlike the retired stand-ins of the virtual-node tests): it fails on its pool and the pin only.

"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from conftest import Lab, lab_skip_reason
from polling import wait_for
from pyinfra_runs import REPO, run_pyinfra
from suite_runs import failed, wait_for_allocatable, wait_until_settled

from gpuready import kube
from gpuready.deploy.addons import DEVICE_PLUGIN_CONFIGMAP
from gpuready.lab import hosts
from gpuready.lab.state import LabPaths
from gpuready.spec import DEVICE_PLUGIN_CONFIG_LABEL

pytestmark = pytest.mark.lab

FIRST_INDEX = 171
NODES = [f"gpu-node-{FIRST_INDEX + i}" for i in range(3)]
STALE, FINE, ODD = NODES
PROFILES = ["l4-1"] * 3  # trixie, the default release: CDI mode
DRIVER, OTHER_DRIVER = "580.178.04", "595.91.07"  # the pin (group_data/all.py), and one the lab's repo serves
POOL = "NVIDIA-L4-SHARED time-slicing x4"
ADDONS_NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
TIMEOUTS = ("--command-timeout", "30", "--pod-timeout", "120")


@pytest.fixture(scope="module")
def discover_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, kube.Cluster]]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("discover-lab"))
    try:
        started = time.monotonic()
        lab = Lab(paths, hosts.up(paths, nodes=3, profiles=PROFILES, first_index=FIRST_INDEX))
        print(f"discover lab up: {time.monotonic() - started:.1f} s")
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            started = time.monotonic()
            done = run_pyinfra(lab, deploy=deploy)
            assert done.returncode == 0, done.failure
            print(f"{deploy}: {time.monotonic() - started:.1f} s")
        cluster = kube.connect(lab.state["apiserver"]["kubeconfig"])
        wait_for_allocatable(
            SimpleNamespace(lab=lab),
            lambda: all(allocatable(cluster, n) == "4" for n in NODES),
            what="4 time-sliced GPUs per node",
        )
        # the add-ons roll out and become Ready after the deploy returns
        wait_until_settled(SimpleNamespace(lab=lab))
        yield lab, cluster
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def allocatable(cluster: kube.Cluster, node: str) -> str | None:
    return (cluster.core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")


def suite(lab: Lab, report_dir: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    """``pytest conformance --connection pod`` against the lab's cluster, with only the given inventory options
    (suite_runs.run_suite always passes --inventory inventory/lab.py); the run and its verdict."""
    cmd = [sys.executable, "-m", "gpuready.cli", "check", "--connection", "pod", "--kubeconfig",
           lab.state["apiserver"]["kubeconfig"], "--report-dir", str(report_dir), "-p", "no:cacheprovider", "-rs",
           *TIMEOUTS, *args]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=lab.env(), capture_output=True, text=True, timeout=600)
    print(f"conformance {' '.join(args)}: {time.monotonic() - started:.1f} s")
    verdict_path = report_dir / "verdict.json"
    assert verdict_path.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    return done, json.loads(verdict_path.read_text())


def statuses(verdict: dict, node: str) -> dict[str, str]:
    return {
        f"{layer}/{check}": r["status"]
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def settled(discover_lab: tuple[Lab, kube.Cluster]) -> tuple[Lab, kube.Cluster]:
    """The discover lab once every node has its allocatable and every add-on is Ready: a late SIGHUP of a device
    plugin (config-manager's second one) can lose the kubelet's re-registration race after the fixture's waits
    (CI at e0092f3: a node's nvidia.com/gpu absent in the first test), and the healer must see it first."""
    wait_until_settled(SimpleNamespace(lab=discover_lab[0]))
    return discover_lab


def test_discover_with_no_inventory_passes_the_healthy_lab(discover_lab, tmp_path):
    lab, _cluster = settled(discover_lab)
    done, verdict = suite(lab, tmp_path / "report", "--discover")
    assert failed(verdict) == {}, done.stdout[-4000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert sorted(verdict["nodes"]) == NODES  # the GPU nodes, found by their capacity and labels
    assert f"--discover: pools (product + sharing): {POOL}: 3 node(s)" in done.stdout, done.stdout[-3000:]
    for node in NODES:
        got = statuses(verdict, node)
        for check in ("host/test_labels_agree", "host/test_labels_match_nvidia_smi", "host/test_versions_match_pool",
                      "host/test_driver_version", "gpu/test_gpus_match_spec", "node/test_allocatable",
                      "node/test_gfd_labels", "node/test_device_plugin_ready", "workloads/test_vector_add",
                      "workloads/test_time_slicing"):  # fmt: skip
            assert got[check] == "pass", (node, check, got)
        for layer, data in verdict["nodes"][node]["layers"].items():
            if layer != "diag":  # the node deploy installs no DCGM
                assert "pass" in {r["status"] for r in data["checks"].values()}, (node, layer, data)
    inventory = (tmp_path / "report" / "discovered-inventory.py").read_text()
    assert all(f"({node!r}, {{" in inventory for node in NODES), inventory


def discover_inventory(lab: Lab) -> str:
    """``gpuready discover``'s inventory of the lab's one pool (time-sliced x4, the pinned driver), checked."""
    out = subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "discover", "--kubeconfig", lab.state["apiserver"]["kubeconfig"],
         *TIMEOUTS],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "3 GPU node(s) in 1 pool(s), 0 problem(s)" in out.stderr, out.stderr
    assert "'kube_join': False" in out.stdout and "ssh_" not in out.stdout, out.stdout
    for knob in (
        "'sharing_replicas': 4",  # from the device plugin's config, in the ConfigMap its pods mount
        "'gpu_sharing': 'time-slicing'",
        f"'nvidia_driver_version': {DRIVER!r}",
    ):
        assert knob in out.stdout, (knob, out.stdout)
    return out.stdout


def test_gpuready_discover_writes_an_inventory_that_fed_back_passes(discover_lab, tmp_path):
    lab, _cluster = settled(discover_lab)
    text = discover_inventory(lab)
    assert "'nvidia_cdi': False" not in text  # the lab's trixie hosts run CDI mode
    inventory = tmp_path / "discovered.py"
    inventory.write_text(text)
    done, verdict = suite(lab, tmp_path / "report", "--inventory", str(inventory))
    assert failed(verdict) == {}, done.stdout[-4000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert sorted(verdict["nodes"]) == NODES
    for node in NODES:
        got = statuses(verdict, node)
        for check in ("host/test_driver_version", "gpu/test_gpus_match_spec", "node/test_allocatable",
                      "node/test_device_plugin_ready", "workloads/test_vector_add"):  # fmt: skip
            assert got[check] == "pass", (node, check, got)
        assert "host/test_labels_agree" not in got  # discovery checks only run with --discover


OPERATOR = SimpleNamespace(  # the names the GPU Operator gives what gpuready's add-ons deploy names otherwise
    namespace="gpu-operator",
    daemonset="nvidia-device-plugin-daemonset",
    # the operator's docs' name for the map that ClusterPolicy's devicePlugin.config names
    configmap="time-slicing-config",
    binding="gpuready-test-gpu-operator-device-plugin",
)
# gpuready's DaemonSet, ServiceAccount and ClusterRole (deploy/addons.py)
DEVICE_PLUGIN = "nvidia-device-plugin"


def _fresh(obj: Any) -> dict[str, Any]:
    """An object read from the API as a body to create again: no server-set metadata, no status."""
    from kubernetes import client

    body = client.ApiClient().sanitize_for_serialization(obj)
    body.pop("status", None)
    meta = body["metadata"]
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    return body


@contextlib.contextmanager
def gpu_operator_layout(lab: Lab, cluster: kube.Cluster) -> Iterator[None]:
    """The device plugin moved to the GPU Operator's layout: its DaemonSet and ConfigMap re-created under the
    operator's names in its namespace (same pods, same config), gpuready's deleted; put back after."""
    from kubernetes import client

    apps, rbac = client.AppsV1Api(cluster.api), client.RbacAuthorizationV1Api(cluster.api)
    daemonset = _fresh(apps.read_namespaced_daemon_set(DEVICE_PLUGIN, ADDONS_NAMESPACE))
    configmap = _fresh(cluster.core.read_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, ADDONS_NAMESPACE))
    labels = cluster.core.read_namespace(ADDONS_NAMESPACE).metadata.labels or {}  # Pod Security's among them
    moved = json.loads(json.dumps(daemonset).replace(DEVICE_PLUGIN_CONFIGMAP, OPERATOR.configmap))
    moved["metadata"] = {"name": OPERATOR.daemonset, "namespace": OPERATOR.namespace}
    psa = {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/")}
    deleted = False
    try:
        cluster.core.create_namespace({"metadata": {"name": OPERATOR.namespace, "labels": psa}})
        account = {"metadata": {"name": DEVICE_PLUGIN}}
        cluster.core.create_namespaced_service_account(OPERATOR.namespace, account)
        rbac.create_cluster_role_binding({
            "metadata": {"name": OPERATOR.binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DEVICE_PLUGIN},
            "subjects": [{"kind": "ServiceAccount", "name": DEVICE_PLUGIN, "namespace": OPERATOR.namespace}],
        })  # fmt: skip
        cluster.core.create_namespaced_config_map(
            OPERATOR.namespace, {"metadata": {"name": OPERATOR.configmap}, "data": configmap["data"]}
        )
        apps.delete_namespaced_daemon_set(DEVICE_PLUGIN, ADDONS_NAMESPACE)
        deleted = True
        gone = f"{ADDONS_NAMESPACE}'s device plugin pods gone"
        wait_for(lambda: not pods_of(cluster, DEVICE_PLUGIN), what=gone)
        apps.create_namespaced_daemon_set(OPERATOR.namespace, moved)
        wait_until_settled(SimpleNamespace(lab=lab), plugin_namespace=OPERATOR.namespace)
        # settled counts any nvidia.com/* allocatable, but the moved plugin first registers its GPU unshared and
        # re-registers the 4 replicas only after config-manager's SIGHUP (CI at 2c3c54e: discover ran between)
        wait_for(lambda: not unshared(cluster), timeout=180, what="the moved plugin's 4 replicas allocatable")
        yield
    finally:
        with contextlib.suppress(client.ApiException):
            cluster.core.delete_namespace(OPERATOR.namespace)
        with contextlib.suppress(client.ApiException):
            rbac.delete_cluster_role_binding(OPERATOR.binding)
        wait_for(lambda: OPERATOR.namespace not in {n.metadata.name for n in cluster.core.list_namespace().items},
                 timeout=180, what=f"namespace {OPERATOR.namespace} gone")  # fmt: skip
        if deleted:
            apps.create_namespaced_daemon_set(ADDONS_NAMESPACE, daemonset)
        wait_until_settled(SimpleNamespace(lab=lab))


def unshared(cluster: kube.Cluster) -> list[str]:
    """The lab's nodes whose allocatable nvidia.com/gpu is not what their labels say (count x replicas)."""
    out = []
    for node in cluster.core.list_node().items:
        if node.metadata.name not in NODES:
            continue
        labels, allocatable = node.metadata.labels or {}, node.status.allocatable or {}
        want = int(labels.get("nvidia.com/gpu.count", "0")) * int(labels.get("nvidia.com/gpu.replicas", "1"))
        if int(allocatable.get("nvidia.com/gpu", "0")) != want:
            out.append(node.metadata.name)
    return out


def test_the_gpu_operators_layout_is_discovered_and_passes(discover_lab, tmp_path):
    """The device plugin as the GPU Operator lays it out (namespace gpu-operator, nvidia-device-plugin-daemonset,
    its config in time-slicing-config): discovery finds the plugin by its image in any namespace and its config in
    the ConfigMap its pod mounts, so ``gpuready discover`` writes the same pool and ``--discover`` passes."""
    lab, cluster = settled(discover_lab)
    with gpu_operator_layout(lab, cluster):
        plugins = [p for p in cluster.core.list_namespaced_pod(OPERATOR.namespace).items
                   if p.metadata.name.startswith(f"{OPERATOR.daemonset}-")]  # fmt: skip
        assert sorted(p.spec.node_name for p in plugins) == NODES and not pods_of(cluster, DEVICE_PLUGIN)
        discover_inventory(lab)  # the same pool, its replicas read from time-slicing-config
        done, verdict = suite(lab, tmp_path / "report", "--discover", "-m", "host or node")
        assert failed(verdict) == {}, done.stdout[-4000:]
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        for node in NODES:
            got = statuses(verdict, node)
            for check in ("host/test_labels_agree", "node/test_allocatable", "node/test_device_plugin_ready"):
                assert got[check] == "pass", (node, check, got)
            # no inventory names the labels to join with: test_labels_agree judges them instead
            assert got["node/test_inventory_labels"] == "skip"
    assert sorted(p.spec.node_name for p in pods_of(cluster, DEVICE_PLUGIN)) == NODES  # put back


def two_replicas(cluster: kube.Cluster, node: str) -> str:
    """Add to the device plugin's ConfigMap a copy of the node's config with 2 replicas instead of 4; its key."""
    key = cluster.core.read_node(node).metadata.labels[DEVICE_PLUGIN_CONFIG_LABEL]
    data = cluster.core.read_namespaced_config_map(DEVICE_PLUGIN_CONFIGMAP, ADDONS_NAMESPACE).data
    config = yaml.safe_load(data[key])
    (resource,) = config["sharing"]["timeSlicing"]["resources"]
    assert resource["replicas"] == 4, config
    resource["replicas"] = 2
    new = f"{key}-2"
    cluster.core.patch_namespaced_config_map(
        DEVICE_PLUGIN_CONFIGMAP, ADDONS_NAMESPACE, {"data": {new: yaml.safe_dump(config)}}
    )
    return new


def pods_of(cluster: kube.Cluster, daemonset: str) -> list[Any]:
    pods = cluster.core.list_namespaced_pod(ADDONS_NAMESPACE).items
    return [p for p in pods if p.metadata.name.startswith(f"{daemonset}-")]


def freeze_gfd_labels(lab: Lab, cluster: kube.Cluster) -> None:
    """Leave the Nodes' GFD labels as they are while the nodes change.

    By stopping NFD's master, which alone writes Node labels: GFD publishes its labels as a NodeFeature owned by
    its pod, so stopping GFD would have the garbage collector delete that NodeFeature and nfd-master drop the
    labels."""
    from kubernetes import client

    client.AppsV1Api(cluster.api).delete_namespaced_deployment("nfd-master", ADDONS_NAMESPACE)
    wait_for(lambda: not pods_of(cluster, "nfd-master"), what="nfd-master pods gone")


def driver_of(lab: Lab, node: str) -> str:
    smi = lab.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    return smi.stdout.strip()


def test_discover_catches_allocatable_against_labels_and_a_driver_against_its_pool(discover_lab, tmp_path):
    lab, cluster = settled(discover_lab)
    # one L4 of the pool upgraded alone by the real rolling upgrade (drain, packages, reboot, its checks, uncordon)
    started = time.monotonic()
    upgrade = run_pyinfra(
        lab, "--limit", ODD, "--data", f"nvidia_driver_version={OTHER_DRIVER}", "--data", "nvidia_driver_branch=595",
        deploy="deploys/upgrade_driver.py",
    )  # fmt: skip
    print(f"upgrade of {ODD}: {time.monotonic() - started:.1f} s")
    assert upgrade.returncode == 0, upgrade.failure
    plain = re.sub(r"\x1b\[[0-9;]*m", "", upgrade.output)
    assert re.search(
        rf"{ODD}\s+upgraded\s+validated and uncordoned \(nvidia-driver {DRIVER}-1 -> {OTHER_DRIVER}-1", plain
    ), plain[-3000:]
    assert [driver_of(lab, n) for n in NODES] == [DRIVER, DRIVER, OTHER_DRIVER]
    assert not cluster.core.read_node(ODD).spec.unschedulable

    # GFD starts again with the node and labels the new driver; nfd-master writes that to the Node a little later.
    # Freeze only once it has: frozen earlier, the label is the old driver's (CI: '580.178.04' against 595)
    wait_for(
        lambda: (
            cluster.core.read_node(ODD).metadata.labels.get("nvidia.com/cuda.driver-version.full")
            == OTHER_DRIVER
        ),
        timeout=180,
        what=f"GFD's driver label on {ODD} to follow its upgrade to {OTHER_DRIVER}",
    )
    # the labels stop following the nodes; the device plugin then takes another config (2 replicas)
    freeze_gfd_labels(lab, cluster)
    key = two_replicas(cluster, STALE)
    cluster.core.patch_node(STALE, {"metadata": {"labels": {DEVICE_PLUGIN_CONFIG_LABEL: key}}})
    # the label's change SIGHUPs the plugin: a quick re-registration the kubelet may drop (PluginHealer)
    wait_for_allocatable(
        SimpleNamespace(lab=lab), lambda: allocatable(cluster, STALE) == "2", what=f"2 replicas on {STALE}"
    )
    assert cluster.core.read_node(STALE).metadata.labels["nvidia.com/gpu.replicas"] == "4"  # stale

    done, verdict = suite(lab, tmp_path / "faults", "--discover", "-m", "host or gpu or node")
    bad = {
        f"{node}:{check}": message
        for node, checks in failed(verdict).items()
        for check, message in checks.items()
    }
    assert {key.split(":")[0] for key in bad} == {STALE, ODD}, bad
    assert bad[f"{STALE}:host/test_labels_agree"].startswith(
        f"{STALE}: allocatable nvidia.com/gpu = 2, but the labels say 4 (nvidia.com/gpu.count = 1 x "
        "nvidia.com/gpu.replicas = 4)"
    ), bad
    assert "has replicas 2" in bad[f"{STALE}:host/test_labels_agree"], bad
    assert bad[f"{ODD}:host/test_versions_match_pool"] == (
        f"{ODD}: NVIDIA driver is {OTHER_DRIVER}, but 2 of 3 nodes of pool {POOL!r} run {DRIVER}"
    ), bad
    # GFD still ran through the upgrade: its driver label followed nvidia-smi, so only the pool and the pin disagree
    assert set(bad) - {f"{STALE}:host/test_labels_agree"} == {
        f"{ODD}:host/test_versions_match_pool",
        f"{ODD}:host/test_driver_version",
    }, bad
    assert f"the inventory pins {DRIVER}" in bad[f"{ODD}:host/test_driver_version"], bad
    assert statuses(verdict, ODD)["node/test_allocatable"] == "skip"  # gated: the host layer failed
    assert not any(k.startswith(FINE) for k in bad)
    assert done.returncode == 1

    # pinned to the odd one out's driver: the other two differ from the pin
    _done, verdict = suite(
        lab, tmp_path / "pinned", "--discover", "-m", "host", "--expect-driver", OTHER_DRIVER
    )
    pinned = {node for node, checks in failed(verdict).items() if "host/test_versions_match_pool" in checks}
    assert pinned == {STALE, FINE}, failed(verdict)
