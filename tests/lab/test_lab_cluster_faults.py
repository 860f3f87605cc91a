"""Faults of the cluster, not of the silicon, on the deployed session lab (three real-kubelet hosts: the H100 x8
NVSwitch on trixie and the MIG A100 (mixed) on sid in CDI mode, the time-sliced L4 x4 on bookworm in runtime-class
mode): each fails exactly the checks that name it, on the node it is on, with the product's own words (and the
real kubelet's, containerd's and scheduler's where a check quotes them); the other nodes pass. The faults of one run
are on different nodes or only in the inventory, so one run of the one layer that judges them proves several at
once, and each test puts the lab back as it found it (revert, then wait until settled) rather than deploying again.

* An inventory that differs from the cluster in one way per node (no change to the cluster): the L4 said to be
  time-sliced 2 ways, the A100's GPU 3 one 1g.10gb instance short, the H100 given a label and a taint it lacks;
  the same run writes its verdict back (condition, label, the taint within its cap, the metrics file).
* Add-ons absent from one node each: dcgm-exporter off the H100, NVIDIA's device plugin off the L4 (their
  DaemonSets made to leave that node out, their pods on the other nodes untouched).
* Pods containerd cannot start: the L4's containerd without its ``nvidia`` runtime (runtime-class mode: the
  sandbox fails), the H100's device plugin's CDI spec gone (CDI mode: the container fails); the pods are hardened
  as gpuready.conformance.workloads says, and the run's namespace is gone after the run timed out.
* ``--connection pod`` with a probe image no registry serves: the connection check names the image; stopped by
  Ctrl-C or SIGTERM while a probe runs: its (privileged, unbound) namespace is gone.
* The policy layer against a GPU quota larger than the inventory's, and a node whose product label is wrong.

These were proven on virtual nodes with the lab's imitation of NVIDIA's add-ons (tests/conformance/test_kube_*.py,
named in each test); here the kubelet, containerd and the add-ons are the real ones.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from interrupts import default_sigint
from kubernetes import client
from polling import wait_for
from suite_runs import (
    ADDONS,
    REPO,
    failed,
    gpu_allocatable,
    lab_cluster,
    node_of,
    run_suite,
    suite_command,
    suite_namespaces,
    wait_for_allocatable,
    wait_until_settled,
)

from gpuready import kube
from gpuready.conformance import policy_runs
from gpuready.conformance import verdict_back as vb
from gpuready.conformance import workloads as wl
from gpuready.deploy.addons import GPU_PRESENT_LABEL
from gpuready.lab.cluster import binaries
from gpuready.nvidia import containerd_config
from gpuready.spec.model import GPU_RESOURCE

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def cluster(deployed_lab: Any) -> kube.Cluster:
    return lab_cluster(deployed_lab)


@pytest.fixture(scope="module")
def nodes(deployed_lab: Any) -> tuple[str, str, str]:
    """The session lab's (H100, A100, L4) node names, once the lab has settled (a module before may have restarted
    add-ons: the tests here compare exact counts with a healthy lab)."""
    wait_until_settled(deployed_lab)
    return tuple(node_of(deployed_lab, p) for p in ("h100-sxm-8", "a100-80gb-4", "l4-1"))  # type: ignore[return-value]


# --- the inventory against the cluster -----------------------------------------------------------------------------

# inventory/lab.py with some hosts' data changed: the suite reads the changed copy, the cluster stays as deployed
CHANGED_INVENTORY = """\
import runpy

_hosts, _data = runpy.run_path({lab!r})["gpu_nodes"]
_changes = {changes!r}
gpu_nodes = ([(name, {{**data, **_changes.get(name, {{}})}}) for name, data in _hosts], _data)
"""
# inventory/lab.py: every GPU of the A100 laid out so (all its 7 compute slices)
LAB_LAYOUT = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
EXTRA_TAINT = "dedicated=gpu:NoSchedule"
POOL_LABEL = ("gpuready.io/pool", "training")


def changed_inventory(tmp_path: Path, changes: dict[str, dict[str, Any]]) -> tuple[str, str]:
    path = tmp_path / "inventory.py"
    path.write_text(CHANGED_INVENTORY.format(lab=str(REPO / "inventory" / "lab.py"), changes=changes))
    return ("--inventory", str(path))


def verdict_back_on(cluster: kube.Cluster, name: str) -> tuple[dict | None, str | None, bool]:
    """What --write-back left on the Node: its GPUConformance condition, its label, whether it carries the taint."""
    node = json.loads(cluster.core.read_node(name, _preload_content=False).data)
    condition = next(
        (c for c in node["status"].get("conditions") or [] if c["type"] == vb.CONDITION_TYPE), None
    )
    tainted = any(t["key"] == vb.TAINT_KEY for t in node["spec"].get("taints") or [])
    return condition, (node["metadata"].get("labels") or {}).get(vb.LABEL), tainted


def clear_verdict_back(cluster: kube.Cluster, name: str) -> None:
    """Take the run's condition, label and taint off the Node again (the lab as the deploys left it)."""
    node = json.loads(cluster.core.read_node(name, _preload_content=False).data)
    taints = node["spec"].get("taints") or []
    if any(t["key"] == vb.TAINT_KEY for t in taints):
        kept = [t for t in taints if t["key"] != vb.TAINT_KEY]
        cluster.core.patch_node(name, {"spec": {"taints": kept or None}})
    if vb.LABEL in (node["metadata"].get("labels") or {}):
        cluster.core.patch_node(name, {"metadata": {"labels": {vb.LABEL: None}}})

    def removed() -> bool:  # by its index, tested first: the kubelet patches the other conditions meanwhile
        conditions = json.loads(cluster.core.read_node(name, _preload_content=False).data)["status"][
            "conditions"
        ]
        at = next((i for i, c in enumerate(conditions) if c["type"] == vb.CONDITION_TYPE), None)
        if at is None:
            return True
        ops = [{"op": "test", "path": f"/status/conditions/{at}/type", "value": vb.CONDITION_TYPE},
               {"op": "remove", "path": f"/status/conditions/{at}"}]  # fmt: skip
        with contextlib.suppress(kube.client.exceptions.ApiException):
            cluster.core.patch_node_status(name, ops)
        return False

    wait_for(removed, timeout=30, what=f"the {vb.CONDITION_TYPE} condition off {name}")


def test_an_inventory_that_differs_from_the_cluster_fails_exactly_the_checks_that_compare_them(
    deployed_lab, cluster, nodes, tmp_path
):
    """One node-layer run against an inventory that differs from the deployed cluster in one way per node:

    * the L4 (time-sliced 4 ways) said to be time-sliced 2 ways: allocatable and capacity 4 against 2, GFD's
      replicas label, and the device plugin config the node would have joined with;
    * the A100's GPU 3 laid out without one of its two 1g.10gb instances (a full layout has no room for an extra
      one: the spec refuses 8 slices): 8 x 1g.10gb allocatable, in capacity and in GFD's count against 7;
    * the H100 given a label (node_labels) and a taint (node_taints) it did not join with.

    Each node fails exactly those checks, each message naming the key, what the node has and what the inventory
    says, in the inventory's words. The same run writes its verdict back (--write-back --taint-failed
    --taint-max-fraction 0.34 --metrics-file) through the real API server: every node gets GPUConformance=False
    naming its failed checks and the label fail, but the cap (floor(0.34 x 3) = 1) lets only the first failing node
    in the run's order be tainted, and the run says which nodes it refused; the metrics file counts each node's
    failures. (The imitation's versions: test_kube_layers' test_wrong_time_slicing_replicas_fail_allocatable and
    test_missing_mig_instance_fails_allocatable, test_kube_verdict_back's test_verdict_condition_label_taint_and_the_cap.)"""
    h100, a100, l4 = nodes
    changes = {
        l4: {"sharing_replicas": 2},
        a100: {"mig_layout": {0: LAB_LAYOUT, 1: LAB_LAYOUT, 2: LAB_LAYOUT, 3: LAB_LAYOUT[:3]}},
        h100: {
            "node_labels": dict([POOL_LABEL]),
            "node_taints": ["nvidia.com/gpu=present:NoSchedule", EXTRA_TAINT],
        },
    }
    config = cluster.core.read_node(l4).metadata.labels["nvidia.com/device-plugin.config"]
    assert "time-slicing-4" in config, (
        config
    )  # what the L4 joined with: the inventory's 2 replicas name another
    assert all(verdict_back_on(cluster, n) == (None, None, False) for n in nodes)  # as the deploys left them
    prom = tmp_path / "textfile" / "gpuready.prom"
    write_back = (
        "--write-back",
        "--taint-failed",
        "--taint-max-fraction",
        "0.34",
        "--metrics-file",
        str(prom),
    )
    cmd = suite_command(
        deployed_lab,
        tmp_path / "report",
        "-m",
        "node",
        *write_back,
        source=changed_inventory(tmp_path, changes),
    )
    started = time.monotonic()
    try:
        done = subprocess.run(
            cmd, cwd=REPO, env=deployed_lab.lab.env(), capture_output=True, text=True, timeout=300
        )
        print(f"node layer against the changed inventory: {time.monotonic() - started:.1f} s")
        written = {n: verdict_back_on(cluster, n) for n in nodes}
    finally:
        for name in nodes:
            clear_verdict_back(cluster, name)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    verdict = json.loads((tmp_path / "report" / "verdict.json").read_text())
    l4_why, a100_why = "(time-slicing replicas 2 x 1 GPU)", "(MIG mixed: 7 x 1g.10gb in mig_layout)"
    expected = {
        l4: {
            "node/test_allocatable": f"{l4}: allocatable nvidia.com/gpu = 4, expected 2 {l4_why}",
            "node/test_capacity": f"{l4}: capacity nvidia.com/gpu = 4, expected 2 {l4_why}",
            "node/test_gfd_labels": f"{l4}: GFD label nvidia.com/gpu.replicas = '4', expected '2'",
            "node/test_inventory_labels": f"{l4}: label nvidia.com/device-plugin.config = {config!r}, expected "
            f"{config.replace('-4-', '-2-')!r}",
        },
        a100: {
            "node/test_allocatable": f"{a100}: allocatable nvidia.com/mig-1g.10gb = 8, expected 7 {a100_why}",
            "node/test_capacity": f"{a100}: capacity nvidia.com/mig-1g.10gb = 8, expected 7 {a100_why}",
            "node/test_gfd_labels": f"{a100}: GFD label nvidia.com/mig-1g.10gb.count = '8', expected '7'",
        },
        h100: {
            "node/test_inventory_labels": f"{h100}: label {POOL_LABEL[0]} missing, expected {POOL_LABEL[1]!r}",
            "node/test_taints": f"{h100}: taint {EXTRA_TAINT} missing (node_taints in the inventory)",
        },
    }
    assert failed(verdict) == expected

    # the verdict on the Nodes: the cap taints the first failing node of the run and names the two it refused
    for name, (condition, label, tainted) in written.items():
        total = len(verdict["nodes"][name]["layers"]["node"]["checks"])  # skipped ones too
        failing = ", ".join(failed(verdict)[name])  # in the run's order
        assert condition is not None and label == "fail", (name, condition, label)
        assert (condition["status"], condition["reason"]) == ("False", "ChecksFailed"), condition
        assert condition["message"] == f"{len(expected[name])} of {total} checks failed: {failing}", condition
        assert tainted == (name == h100), (name, tainted)
    assert (
        f"--taint-failed: refused to taint 2 failing node(s) ({a100}, {l4}): --taint-max-fraction 0.34 of the "
        "run's 3 nodes allows at most 1 tainted, 1 are"
    ) in done.stdout, done.stdout[-3000:]
    text = prom.read_text()
    for name in nodes:
        sample = (
            f'gpuready_conformance_checks{{node="{name}",layer="node",status="fail"}} {len(expected[name])}'
        )
        assert sample in text, text
    promtool = shutil.which("promtool") or binaries.cached_promtool()
    if promtool:
        linted = subprocess.run(
            [str(promtool), "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr


# --- add-ons absent from a node -------------------------------------------------------------------------------------

HOSTNAME = "kubernetes.io/hostname"


def daemonset_pods(cluster: kube.Cluster, daemonset: str, node: str | None = None) -> list[Any]:
    pods = cluster.core.list_namespaced_pod(ADDONS).items
    return [
        p
        for p in pods
        if any(o.kind == "DaemonSet" and o.name == daemonset for o in p.metadata.owner_references or [])
        and node in (None, p.spec.node_name)
    ]


@contextlib.contextmanager
def kept_off(cluster: kube.Cluster, daemonset: str, node: str) -> Iterator[None]:
    """The DaemonSet leaves ``node`` out for the block, its pods elsewhere untouched; then put back as it was.

    Its update strategy is made OnDelete while its pod template gains a node affinity away from ``node``: the
    controller deletes the pod there (the node no longer fits) and rolls no other. Afterwards the template is the
    original again, whose revision the other pods still carry, so none restarts; the strategy follows."""
    apps = client.AppsV1Api(cluster.api)
    ds = apps.read_namespaced_daemon_set(daemonset, ADDONS)
    affinity = cluster.api.sanitize_for_serialization(ds.spec.template.spec.affinity)
    strategy = cluster.api.sanitize_for_serialization(ds.spec.update_strategy)
    required = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    away = {"key": HOSTNAME, "operator": "NotIn", "values": [node]}
    terms = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), away]}
        for term in (required or {}).get("nodeSelectorTerms") or [{}]
    ]
    others = {p.metadata.uid for p in daemonset_pods(cluster, daemonset) if p.spec.node_name != node}
    apps.patch_namespaced_daemon_set(
        daemonset, ADDONS, {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}
    )
    try:
        excluded = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
        apps.patch_namespaced_daemon_set(
            daemonset, ADDONS, {"spec": {"template": {"spec": {"affinity": excluded}}}}
        )
        wait_for(
            lambda: not daemonset_pods(cluster, daemonset, node),
            timeout=120,
            what=f"no {daemonset} pod on {node}",
        )
        yield
    finally:
        apps.patch_namespaced_daemon_set(
            daemonset, ADDONS, {"spec": {"template": {"spec": {"affinity": affinity}}}}
        )
        apps.patch_namespaced_daemon_set(daemonset, ADDONS, {"spec": {"updateStrategy": strategy}})
    wait_for(
        lambda: daemonset_pods(cluster, daemonset, node),
        timeout=120,
        what=f"a {daemonset} pod on {node} again",
    )
    still = {p.metadata.uid for p in daemonset_pods(cluster, daemonset) if p.spec.node_name != node}
    assert still == others, f"{daemonset}'s pods on the other nodes were replaced"


def test_addons_absent_from_a_node_fail_their_checks_there(deployed_lab, cluster, nodes, tmp_path):
    """dcgm-exporter kept off the H100 and NVIDIA's device plugin kept off the L4, in one node-layer run: the H100
    fails test_dcgm_exporter_ready with no dcgm-exporter pod on the node; the L4 fails test_device_plugin_ready
    likewise and test_allocatable with its nvidia.com/gpu at 0 (the real kubelet zeroes a resource whose plugin
    went away and keeps it in capacity a while, so test_capacity still passes); the A100 passes. (The imitation's
    versions: test_kube_layers' test_dcgm_exporter_absent_fails_its_check and
    test_device_plugin_absent_fails_resources_and_its_check.)"""
    h100, _a100, l4 = nodes
    before = gpu_allocatable(deployed_lab, l4)
    assert before == {"nvidia.com/gpu": "4"}, before
    try:
        with kept_off(cluster, "nvidia-dcgm-exporter", h100), kept_off(cluster, "nvidia-device-plugin", l4):
            wait_for(
                lambda: gpu_allocatable(deployed_lab, l4).get("nvidia.com/gpu") == "0",
                timeout=120,
                what=f"{l4}'s nvidia.com/gpu allocatable 0 with its device plugin gone",
            )
            started = time.monotonic()
            verdict = run_suite(deployed_lab, tmp_path / "report", "-m", "node")
            print(f"node layer with the add-ons absent: {time.monotonic() - started:.1f} s")
    finally:
        # the new plugin pod registers (and may lose a quick re-registration: wait_for_allocatable heals it)
        wait_for_allocatable(
            deployed_lab, lambda: gpu_allocatable(deployed_lab, l4) == before, what=f"{l4}'s allocatable back"
        )
        wait_until_settled(deployed_lab)
    bad = failed(verdict)
    assert set(bad) == {h100, l4}, bad
    assert bad[h100] == {
        "node/test_dcgm_exporter_ready": f"{h100}: no dcgm-exporter pod on the node (is its DaemonSet deployed and "
        "does it select this node?)"
    }, bad[h100]
    assert set(bad[l4]) == {"node/test_device_plugin_ready", "node/test_allocatable"}, bad[l4]
    assert bad[l4]["node/test_device_plugin_ready"] == (
        f"{l4}: no device plugin pod on the node (is its DaemonSet deployed and does it select this node?)"
    )
    assert bad[l4]["node/test_allocatable"].startswith(
        f"{l4}: allocatable nvidia.com/gpu = 0, expected 4 (time-slicing replicas 4 x 1 GPU); none of the 4 in "
        "capacity is usable"
    ), bad[l4]
    assert "or it is gone (node/test_device_plugin_ready tells which)" in bad[l4]["node/test_allocatable"]


# --- pods containerd cannot start ----------------------------------------------------------------------------------

DROP_IN = f"{containerd_config.DEFAULT_DROP_IN_DIR}/{containerd_config.DEFAULT_DROP_IN_NAME}"
PLUGIN_SPEC = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"  # NVIDIA's plugin writes it when it starts
ASIDE = "/root/cluster-faults-aside"
POD_TIMEOUT = "15"


def set_aside(lab: Any, node: str, path: str, then: str = "true") -> None:
    lab.ssh(node, f"mkdir -p {ASIDE} && mv {path} {ASIDE}/ && {then}")


def put_back(lab: Any, node: str, path: str, then: str = "true") -> None:
    name = Path(path).name
    lab.ssh(node, f"if [ -e {ASIDE}/{name} ]; then mv {ASIDE}/{name} {path}; fi; {then}")


def seen_while_running(cluster: kube.Cluster, before: set[str], pods: set[str]) -> dict[str, Any] | None:
    """The run's namespace and its pods once every one of ``pods`` is in it (None until then)."""
    for name in suite_namespaces(cluster) - before:
        listed = {p.metadata.name: p for p in cluster.core.list_namespaced_pod(name).items}
        if pods <= set(listed):
            return {"namespace": cluster.core.read_namespace(name), "pods": listed}
    return None


def test_pods_containerd_cannot_start_fail_vector_add_with_containerds_reason(
    deployed_lab, cluster, nodes, tmp_path
):
    """One workloads-layer run on two nodes, with a short --pod-timeout:

    * the L4 (runtime-class mode) with the nvidia runtime's containerd drop-in removed and containerd restarted:
      GPU pods name the nvidia RuntimeClass, whose handler containerd no longer has; the kubelet cannot create
      their sandbox, so they stay Pending until the run's timeout, and vectorAdd (and the time-slicing pods) fail
      quoting containerd's reason from the kubelet's FailedCreatePodSandBox event;
    * the H100 (CDI mode) with the device plugin's own CDI spec removed: the plugin hands the pod a CDI device that
      containerd cannot resolve, and vectorAdd fails at once with the container's CreateContainerError.

    While the pods wait, they are seen as the suite builds them: in a namespace of the run's own (managed by
    gpuready, Pod Security restricted enforced), non-root, unprivileged, no hostPath, no token, the nvidia
    RuntimeClass on the runtime-class node only. After the run the namespace is gone, though its pods never
    started. (The imitation's versions: test_kube_layers' test_missing_nvidia_handler_fails_vector_add,
    test_stale_cdi_spec_fails_vector_add_with_the_unresolvable_device, test_namespace_deleted_after_a_timeout,
    test_pods_are_hardened_and_labelled.)"""
    lab = deployed_lab.lab
    h100, _a100, l4 = nodes
    before = suite_namespaces(cluster)
    report = tmp_path / "report"
    cmd = suite_command(
        deployed_lab, report, "-m", "workloads", "--nodes", f"{h100},{l4}", "--pod-timeout", POD_TIMEOUT
    )
    set_aside(lab, h100, PLUGIN_SPEC)
    try:
        set_aside(lab, l4, DROP_IN, then="systemctl restart containerd")
        started = time.monotonic()
        with (tmp_path / "suite.out").open("w") as out:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=lab.env(), stdout=out, stderr=subprocess.STDOUT, text=True
            )
            try:
                seen = wait_for(
                    lambda: seen_while_running(cluster, before, {f"vectoradd-{h100}", f"vectoradd-{l4}"}),
                    timeout=120,
                    what="the run's vectorAdd pods",
                )
                proc.wait(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
        print(f"workloads layer with pods that cannot start: {time.monotonic() - started:.1f} s")
    finally:
        put_back(lab, h100, PLUGIN_SPEC)
        put_back(lab, l4, DROP_IN, then="systemctl restart containerd")
    output = (tmp_path / "suite.out").read_text()
    assert (report / "verdict.json").exists(), output[-4000:]
    bad = failed(json.loads((report / "verdict.json").read_text()))
    assert proc.returncode == 1, output[-4000:]
    assert set(bad) == {h100, l4}, bad

    assert list(bad[h100]) == ["workloads/test_vector_add"], bad[h100]
    message = bad[h100]["workloads/test_vector_add"]
    assert message.startswith(f"{h100}: vectorAdd did not pass: pod vectoradd-{h100}: phase Pending; "), (
        message
    )
    cdi = re.search(
        r"reason CreateContainerError: failed to create containerd container: CDI device injection failed: "
        r"unresolvable CDI devices k8s\.device-plugin\.nvidia\.com/gpu=(GPU-[0-9a-f-]{36})",
        message,
    )
    assert cdi, message
    uuids = lab.ssh(h100, "nvidia-smi --query-gpu=uuid --format=csv,noheader").stdout.split()
    assert cdi[1] in uuids, (cdi[1], uuids)  # a GPU of that node, by the UUID the plugin handed out

    assert set(bad[l4]) == {"workloads/test_vector_add", "workloads/test_time_slicing"}, bad[l4]
    message = bad[l4]["workloads/test_vector_add"]
    assert message.startswith(
        f"{l4}: vectorAdd did not pass: pod vectoradd-{l4}: phase Pending (timed out waiting)"
    )
    assert (
        "Warning FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get "
        'sandbox runtime: no runtime for "nvidia" is configured'
    ) in message, message
    message = bad[l4]["workloads/test_time_slicing"]
    assert message.startswith(f"{l4}: 0 of 4 time-sliced pods running at once, expected 4 "), message
    assert "FailedCreatePodSandBox" in message, message

    namespace, pods = seen["namespace"], seen["pods"]
    assert namespace.metadata.labels["app.kubernetes.io/managed-by"] == "gpuready"
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, pod in pods.items():
        assert pod.metadata.labels["app.kubernetes.io/managed-by"] == "gpuready", name
        # pinned to its node; a pod on the nvidia RuntimeClass also gets the class's scheduling nodeSelector (the
        # API server's RuntimeClass admission), which the node has
        pinned = {HOSTNAME: pod.metadata.annotations["gpuready.io/node"]}
        if pod.spec.runtime_class_name:
            pinned[GPU_PRESENT_LABEL] = "true"
        assert pod.spec.node_selector == pinned, (name, pod.spec.node_selector)
        assert pod.spec.automount_service_account_token is False, name
        assert not any(v.host_path for v in pod.spec.volumes or []), name
        for c in pod.spec.containers:
            ctx = c.security_context
            assert (ctx.run_as_non_root, ctx.privileged, ctx.allow_privilege_escalation) == (
                True,
                False,
                False,
            )
    assert pods[f"vectoradd-{l4}"].spec.runtime_class_name == "nvidia"  # runtime-class mode
    assert pods[f"vectoradd-{h100}"].spec.runtime_class_name is None  # CDI mode: the plugin's CDI devices

    wait_for(
        lambda: not suite_namespaces(cluster) - before, timeout=180, what="the run's namespace to be gone"
    )
    wait_until_settled(deployed_lab)


# --- the probe pods -------------------------------------------------------------------------------------------------

UNPULLABLE = "registry.example.com:5000/library/debian:trixie-slim"


def test_an_unpullable_probe_image_fails_the_connection_naming_the_image(
    deployed_lab, cluster, nodes, tmp_path
):
    """``--connection pod`` with a probe_image no registry serves: the A100's probe pod cannot be pulled, and
    host/test_connection fails saying so with the image's name (the host's other checks are skipped for want of
    a connection); the probe namespace is gone afterwards. (The imitation's version: test_kube_probe's
    test_an_unpullable_probe_image_names_the_image.)"""
    _h100, a100, _l4 = nodes
    before = suite_namespaces(cluster)
    started = time.monotonic()
    verdict = run_suite(
        deployed_lab,
        tmp_path,
        "--connection",
        "pod",
        "-m",
        "host",
        "--nodes",
        a100,
        "--data",
        f"probe_image={UNPULLABLE}",
    )
    print(f"host layer through an unpullable probe image: {time.monotonic() - started:.1f} s")
    bad = failed(verdict)
    assert list(bad) == [a100] and list(bad[a100]) == ["host/test_connection"], bad
    message = bad[a100]["host/test_connection"]
    assert message.startswith(f"{a100}: the probe pod did not answer: pod probe-"), message
    assert f'reason ErrImagePull: failed to pull and unpack image "{UNPULLABLE}"' in message, message
    statuses = {r["status"] for r in verdict["nodes"][a100]["layers"]["host"]["checks"].values()}
    assert statuses == {"fail", "skip"}, statuses
    wait_for(
        lambda: not suite_namespaces(cluster) - before, timeout=120, what="the probe namespace to be gone"
    )


# Slower than any probe waits for: the probe's chrooted `journalctl -k` (the gpu layer's XID check) finds it first on
# the host's PATH (/usr/local/bin before /usr/bin), so the probe pod is surely running when the run is stopped
SLOW_JOURNALCTL = "/usr/local/bin/journalctl"
SLOW_SECONDS = 171  # a figure of its own, to find the sleep among the host's processes


def sleeping(lab: Any, node: str) -> bool:
    return f"sleep {SLOW_SECONDS}" in lab.ssh(node, "ps -eo args", check=False).stdout


@contextlib.contextmanager
def slow_journalctl(lab: Any, node: str) -> Iterator[None]:
    script = f'#!/bin/sh\nsleep {SLOW_SECONDS}\nexec /usr/bin/journalctl "$@"\n'
    lab.ssh(node, f"cat > {SLOW_JOURNALCTL} <<'EOF'\n{script}EOF\nchmod 755 {SLOW_JOURNALCTL}")
    try:
        yield
    finally:
        lab.ssh(node, f"rm -f {SLOW_JOURNALCTL}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_run_stopped_while_a_probe_runs_leaves_no_probe_namespace(
    deployed_lab, cluster, nodes, tmp_path, sig
):
    """``--connection pod`` stopped by Ctrl-C or SIGTERM (a cancelled CI job) while the A100's probe pod runs a
    command on its host: the run ends interrupted, and its probe namespace, the only privileged one (Pod Security
    ``privileged``, managed by gpuready, no RoleBinding in it; the probe pod mounts no token), is gone with the pod.
    (The imitation's versions: test_kube_probe's test_probe_namespace_deleted_after_ctrl_c,
    test_probe_namespace_deleted_after_sigterm_while_a_probe_runs, and the namespace assertions of its healthy
    test; test_lab_interrupt proves the same for the workloads' namespace.)"""
    lab = deployed_lab.lab
    _h100, a100, _l4 = nodes
    before = suite_namespaces(cluster)
    args = (
        "--connection",
        "pod",
        "-m",
        "host or gpu",
        "--nodes",
        a100,
        "--command-timeout",
        str(SLOW_SECONDS + 60),
    )
    with slow_journalctl(lab, a100), (tmp_path / "suite.out").open("w") as out:
        proc = subprocess.Popen(
            suite_command(deployed_lab, tmp_path / "report", *args),
            cwd=REPO, env=lab.env(), stdout=out, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint,
        )  # fmt: skip
        try:
            wait_for(
                lambda: sleeping(lab, a100), timeout=120, what=f"the probe's journalctl waiting on {a100}"
            )
            (probe_namespace,) = suite_namespaces(cluster) - before
            namespace = cluster.core.read_namespace(probe_namespace)
            bindings = client.RbacAuthorizationV1Api(cluster.api).list_namespaced_role_binding(
                probe_namespace
            )
            (pod,) = cluster.core.list_namespaced_pod(probe_namespace).items
            proc.send_signal(sig)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = (tmp_path / "suite.out").read_text()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert probe_namespace.startswith(wl.NAMESPACE_PREFIX + "probe-"), probe_namespace
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace.metadata.labels["app.kubernetes.io/managed-by"] == "gpuready"
    assert bindings.items == [] and pod.spec.automount_service_account_token is False
    assert pod.spec.node_name == a100
    # the suite asked for the namespace's deletion on its way out; the cluster finishes it, the probe's command with it
    assert probe_namespace not in {
        n.metadata.name for n in cluster.core.list_namespace().items if n.status.phase == "Active"
    }
    wait_for(
        lambda: probe_namespace not in suite_namespaces(cluster), timeout=120, what=f"{probe_namespace} gone"
    )
    wait_for(lambda: not sleeping(lab, a100), timeout=60, what=f"the probe's command on {a100} to end")


def test_a_probe_that_outlasts_the_pod_timeout_fails_the_connection_and_leaves_no_namespace(
    deployed_lab, cluster, nodes, tmp_path
):
    """``--connection pod`` with a --pod-timeout shorter than the A100's probe takes (a command on the host hangs):
    host/test_connection fails saying the probe pod did not answer in time, the host's other checks are skipped,
    and the probe namespace is gone after the run, the still-running probe with it. (The imitation's version:
    test_kube_probe's test_probe_namespace_deleted_after_a_timeout.)"""
    lab = deployed_lab.lab
    _h100, a100, _l4 = nodes
    before = suite_namespaces(cluster)
    args = ("--connection", "pod", "-m", "host or gpu", "--nodes", a100, "--pod-timeout", "5")
    with slow_journalctl(lab, a100):
        started = time.monotonic()
        verdict = run_suite(deployed_lab, tmp_path, *args, "--command-timeout", str(SLOW_SECONDS + 60))
        print(
            f"host and gpu layers through a probe that outlasts the pod timeout: {time.monotonic() - started:.1f} s"
        )
    bad = failed(verdict)
    assert list(bad) == [a100] and list(bad[a100]) == ["host/test_connection"], bad
    message = bad[a100]["host/test_connection"]
    assert message.startswith(
        f"{a100}: the probe pod did not answer: pod probe-1-{a100}: phase Running (timed out waiting)"
    ), message
    for layer in ("host", "gpu"):
        statuses = {r["status"] for r in verdict["nodes"][a100]["layers"][layer]["checks"].values()}
        assert statuses <= {"fail", "skip"}, (layer, statuses)
    wait_for(
        lambda: not suite_namespaces(cluster) - before, timeout=120, what="the probe namespace to be gone"
    )
    wait_for(lambda: not sleeping(lab, a100), timeout=60, what=f"the probe's command on {a100} to end")


QUOTA_NAMESPACE, QUOTA = "ml-team", "gpu-quota"  # inventory/lab.py: gpu_resource_quotas {"ml-team": 4}


def test_a_gpu_quota_larger_than_the_inventorys_fails_saying_what_it_allows(
    deployed_lab, cluster, nodes, tmp_path
):
    """The team's GPU quota raised to 8 on the cluster (the inventory says 4): the real API server admits the
    suite's dry-run pod asking for 5, and test_gpu_quota_refuses fails on every node naming the namespace, the
    inventory's figure and what the quota allows. (test_lab_conformance proves the quota deleted; the imitation's
    version of this one: test_kube_policy's test_healthy_policies_pass_and_broken_ones_fail_naming_the_policy.)"""
    hard = cluster.core.read_namespaced_resource_quota(QUOTA, QUOTA_NAMESPACE).spec.hard
    assert hard == {"requests.nvidia.com/gpu": "4"}, hard
    cluster.core.patch_namespaced_resource_quota(
        QUOTA, QUOTA_NAMESPACE, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    )
    try:
        started = time.monotonic()
        verdict = run_suite(deployed_lab, tmp_path, "-m", "policy", "-k", "test_gpu_quota_refuses")
        print(f"policy layer's quota check against a larger quota: {time.monotonic() - started:.1f} s")
    finally:
        cluster.core.patch_namespaced_resource_quota(QUOTA, QUOTA_NAMESPACE, {"spec": {"hard": hard}})
    where = f"namespace {QUOTA_NAMESPACE} (gpu_resource_quotas in the inventory: 4 GPUs)"
    assert failed(verdict) == {
        node: {
            "policy/test_gpu_quota_refuses": f"{node}: {where}: a pod requesting 5 nvidia.com/gpu was admitted, no "
            f"quota refused it ({QUOTA} allows 8)"
        }
        for node in nodes
    }


PRODUCT = "nvidia.com/gpu.product"
HOLD = {"key": "gpuready.test/hold", "effect": "NoSchedule"}


def test_a_wrong_product_label_sends_a_gpu_pod_by_product_to_the_wrong_node(
    deployed_lab, cluster, nodes, tmp_path
):
    """The L4 node labelled as an H100 (NFD's master stopped, so nothing puts GFD's label back) and the H100 taking
    no new pods: the policy layer's GPU pod asking for the H100's product by node affinity lands on the L4, and the
    check names where and why (its product label is wrong by the inventory); the pod asking for the L4's product
    finds no node with it and is left Unschedulable with the scheduler's words; the A100 passes. Restored: the label,
    the taint, NFD's master. (The imitation's version: test_kube_policy's
    test_gpu_pod_by_product_lands_only_on_that_product; test_lab_conformance proves the healthy placement.)"""
    h100, a100, l4 = nodes
    apps = client.AppsV1Api(cluster.api)
    replicas = apps.read_namespaced_deployment("nfd-master", ADDONS).spec.replicas
    taints = cluster.api.sanitize_for_serialization(cluster.core.read_node(h100).spec.taints)
    labels = {n: cluster.core.read_node(n).metadata.labels[PRODUCT] for n in (h100, l4)}
    try:
        apps.patch_namespaced_deployment("nfd-master", ADDONS, {"spec": {"replicas": 0}})
        wait_for(
            lambda: (
                not [
                    p
                    for p in cluster.core.list_namespaced_pod(ADDONS).items
                    if p.metadata.name.startswith("nfd-master-")
                ]
            ),
            timeout=120,
            what="nfd-master's pods gone",
        )
        cluster.core.patch_node(l4, {"metadata": {"labels": {PRODUCT: labels[h100]}}})
        cluster.core.patch_node(h100, {"spec": {"taints": [*taints, HOLD]}})
        # the pod sent by the H100's product must find a GPU free on the L4: with none (the L4's four replicas held,
        # or not yet advertised again), the scheduler says Insufficient and the check is skipped, not failed
        wait_for(
            lambda: (
                int(gpu_allocatable(deployed_lab, l4).get(GPU_RESOURCE, "0"))
                > policy_runs.gpus_held(cluster).get(l4, 0)
            ),
            timeout=120,
            what=f"a free {GPU_RESOURCE} on {l4}",
        )
        started = time.monotonic()
        verdict = run_suite(deployed_lab, tmp_path, "-m", "policy", "-k", "test_gpu_pod_by_product_affinity")
        print(f"policy layer's affinity check with a wrong label: {time.monotonic() - started:.1f} s")
    finally:
        cluster.core.patch_node(h100, {"spec": {"taints": taints}})
        cluster.core.patch_node(l4, {"metadata": {"labels": {PRODUCT: labels[l4]}}})
        apps.patch_namespaced_deployment("nfd-master", ADDONS, {"spec": {"replicas": replicas}})
        wait_until_settled(deployed_lab)
    bad = failed(verdict)
    results = {
        n: verdict["nodes"][n]["layers"]["policy"]["checks"]["test_gpu_pod_by_product_affinity"]
        for n in nodes
    }
    assert set(bad) == {h100, l4}, results
    check = "policy/test_gpu_pod_by_product_affinity"
    asked = f"asking for {PRODUCT} {{}} by node affinity"
    assert list(bad[h100]) == [check] and re.fullmatch(
        rf"{h100}: GPU pod affinity-\d+ {re.escape(asked.format(labels[h100]))} was scheduled on {l4}, whose GPUs "
        rf"are {re.escape(labels[l4])} by the inventory: its {re.escape(PRODUCT)} label is wrong",
        bad[h100][check],
    ), bad[h100]
    assert list(bad[l4]) == [check] and re.match(
        rf"{l4}: GPU pod affinity-\d+ {re.escape(asked.format(labels[l4]))} was left Unschedulable: ",
        bad[l4][check],
    ), bad[l4]
    assert "didn't match Pod's node affinity/selector" in bad[l4][check], bad[l4]
    assert (
        verdict["nodes"][a100]["layers"]["policy"]["checks"]["test_gpu_pod_by_product_affinity"]["status"]
        == "pass"
    )
    assert cluster.core.read_node(l4).metadata.labels[PRODUCT] == labels[l4]
