"""gpu_allocation = "dra" on real lab hosts: a fleet with one dra pool (the MIG A100 on sid, MIG on GPU 0 only) and
one device-plugin pool (the time-sliced L4 on trixie), both CDI hosts, converged by the real deploys (pyinfra
deploys/gpu_node.py then deploys/cluster_addons.py, with GPUREADY_LAB_DRA naming the A100's pool; inventory/lab.py)
and joined to the lab's real control plane. Healthy, the whole suite passes, the DRA checks on the dra node and the
device-plugin checks on the other; a GPU off the bus (once the kubelet plugin restarts), the kubelet plugin gone
and a driver/library mismatch each fail exactly the node layer's checks that should fail, on the dra node only.
The add-ons' DRA settings are proved by turning each off: the kubelet plugin without its TimeSlicingSettings gate
refuses the shared claim, dcgm-exporter without its DRA mapping names no claim. The rolling driver upgrade's
cluster-side steps run on the dra node (the drain evicts a claim holder, the validation runs the DRA checks and
keeps the node cordoned when one fails); its driver install and reboot, the same on every node, are
test_lab_upgrade.py's.

A lab of its own (hosts gpu-node-61 and 62, its own state dir), brought up and down by the module."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Lab, lab_skip_reason
from polling import wait_for
from pyinfra_runs import run_pyinfra
from suite_runs import REPO, failed, run_suite, wait_until_settled

from gpuready import kube
from gpuready.deploy import dra_addons
from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

pytestmark = pytest.mark.lab

FIRST_INDEX = 61
PROFILES, RELEASES = ["a100-80gb-4", "l4-1"], ["sid", "trixie"]
DRA_NODE, PLUGIN_NODE = f"gpu-node-{FIRST_INDEX}", f"gpu-node-{FIRST_INDEX + 1}"
DRA_ENV = {"GPUREADY_LAB_DRA": "a100-80gb-4"}
ADDONS_NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
# the A100 in DRA mode: 4 MIG devices on GPU 0 (named gpu-0-mig-<profile id>-<start>-<size>), GPUs 1-3 whole
WHOLE = ["gpu-1", "gpu-2", "gpu-3"]


@pytest.fixture(scope="module")
def dra_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, kube.Cluster]]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("dra-lab"))
    try:
        lab = Lab(
            paths,
            hosts.up(
                paths,
                nodes=2,
                profiles=PROFILES,
                releases=RELEASES,
                first_index=FIRST_INDEX,
            ),
            extra_env=DRA_ENV,
        )
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            done = run_pyinfra(lab, deploy=deploy)
            assert done.returncode == 0, done.failure
        yield lab, kube.connect(lab.state["apiserver"]["kubeconfig"])
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def slices(cluster: kube.Cluster, node: str) -> list[dict[str, Any]]:
    from kubernetes import client

    raw = client.ResourceV1Api(cluster.api).list_resource_slice(
        field_selector=f"spec.nodeName={node}", _preload_content=False
    )
    return list(json.loads(raw.data)["items"])


def devices(cluster: kube.Cluster, node: str) -> list[str]:
    return sorted(d["name"] for s in slices(cluster, node) for d in s["spec"].get("devices") or [])


def published(cluster: kube.Cluster) -> list[str] | None:
    """The dra node's devices once its slice holds all 7 (None before)."""
    names = devices(cluster, DRA_NODE)
    mig = [n for n in names if n.startswith("gpu-0-mig-")]
    return names if len(mig) == 4 and [n for n in names if n not in mig] == WHOLE else None


def plugin_pods(cluster: kube.Cluster) -> list[dict[str, Any]]:
    raw = cluster.core.list_namespaced_pod(
        ADDONS_NAMESPACE, field_selector=f"spec.nodeName={DRA_NODE}", _preload_content=False
    )
    return [
        p
        for p in json.loads(raw.data)["items"]
        if p["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN)
    ]


def daemonset_nodes(cluster: kube.Cluster) -> dict[str, list[str]]:
    """Each add-on DaemonSet (by name) -> the nodes its pods run on."""
    raw = cluster.core.list_namespaced_pod(ADDONS_NAMESPACE, _preload_content=False)
    placed: dict[str, list[str]] = {}
    for pod in json.loads(raw.data)["items"]:
        for owner in pod["metadata"].get("ownerReferences") or []:
            if owner["kind"] == "DaemonSet":
                placed.setdefault(owner["name"], []).append(pod["spec"].get("nodeName", ""))
    return {name: sorted(nodes) for name, nodes in placed.items()}


def delete_plugin_pods(cluster: kube.Cluster) -> None:
    for pod in plugin_pods(cluster):
        cluster.core.delete_namespaced_pod(pod["metadata"]["name"], ADDONS_NAMESPACE)


def suite(lab: Lab, tmp_path: Any, *args: str) -> dict:
    return run_suite(SimpleNamespace(lab=lab), tmp_path, *args)


def statuses(verdict: dict, node: str) -> dict[str, tuple[str, str]]:
    return {
        f"{layer}/{check}": (r["status"], r["message"])
        for layer, data in verdict["nodes"][node]["layers"].items()
        for check, r in data["checks"].items()
    }


def test_a_mixed_dra_and_device_plugin_fleet_converges_and_passes_the_whole_suite(dra_lab, tmp_path):
    lab, cluster = dra_lab
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")
    wait_until_settled(
        SimpleNamespace(lab=lab)
    )  # the add-ons roll out and become Ready after the deploy returns
    assert slices(cluster, PLUGIN_NODE) == []
    (dra_slice,) = slices(cluster, DRA_NODE)  # one pool, the node's own, of NVIDIA's driver
    assert (dra_slice["spec"]["driver"], dra_slice["spec"]["pool"]["name"]) == ("gpu.nvidia.com", DRA_NODE)
    placed = daemonset_nodes(cluster)
    assert placed[dra_addons.KUBELET_PLUGIN] == [DRA_NODE]  # the DRA driver only on the dra node ...
    assert placed["nvidia-device-plugin"] == [PLUGIN_NODE]  # ... the device plugin only on the other
    assert placed["gpu-feature-discovery"] == sorted([DRA_NODE, PLUGIN_NODE])  # GFD on both
    labels = cluster.core.read_node(DRA_NODE).metadata.labels
    assert (
        labels["gpuready.io/gpu-allocation"] == "dra"
    )  # the join labelled it: the DRA driver runs there only
    verdict = suite(lab, tmp_path)
    assert failed(verdict) == {}
    dra_node, plugin_node = statuses(verdict, DRA_NODE), statuses(verdict, PLUGIN_NODE)
    for check in ("node/test_resource_slices", "node/test_device_classes", "node/test_dra_kubelet_plugin_ready",
                  "workloads/test_vector_add", "workloads/test_mig_devices", "workloads/test_dra_shared_claim_same_gpu",
                  "workloads/test_dra_unsatisfiable_claim_pending", "workloads/test_dra_driver_version_matches_smi",
                  "metrics/test_claim_in_labels", "metrics/test_running_pod_in_labels"):  # fmt: skip
        assert dra_node[check][0] == "pass", (check, dra_node[check])
    for check in (
        "node/test_device_plugin_ready",
        "workloads/test_vector_add",
        "workloads/test_time_slicing",
    ):
        assert plugin_node[check][0] == "pass", (check, plugin_node[check])
    assert plugin_node["node/test_resource_slices"] == (
        "skip", f"{PLUGIN_NODE}: not applicable: gpu_allocation is 'device-plugin'"
    )  # fmt: skip
    assert plugin_node["workloads/test_dra_shared_claim_same_gpu"][0] == "skip"
    assert dra_node["node/test_device_plugin_ready"] == (
        "skip", f"{DRA_NODE}: not applicable: gpu_allocation is 'dra' (the DRA driver serves this node's GPUs); "
        "test_dra_kubelet_plugin_ready checks its plugin",
    )  # fmt: skip
    for node in (DRA_NODE, PLUGIN_NODE):
        for layer in ("host", "gpu", "node", "workloads", "metrics", "policy"):
            assert "pass" in {
                r["status"] for r in verdict["nodes"][node]["layers"][layer]["checks"].values()
            }, (
                node,
                layer,
            )


def test_a_gpu_off_the_bus_the_kubelet_plugin_gone_and_a_driver_mismatch_fail_the_dra_checks(
    dra_lab, tmp_path
):
    lab, cluster = dra_lab
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")

    # a GPU off the bus, then the kubelet plugin restarted (NVIDIA's DRA driver v0.4.1 enumerates the GPUs when its
    # plugin starts and keeps publishing them while it runs): NVIDIA's container runtime cannot start the plugin's
    # container at all ("failed to generate CDI spec for mode "auto": ... error getting device handle for index
    # '2': GPU is lost"), so the kubelet wipes the node's slice; the slice and plugin checks fail (and GFD's
    # gpu.count once GFD has relabelled, on its own cycle), on the dra node only
    hosts.inject_fault(lab.paths, DRA_NODE, "off-bus", 2)
    delete_plugin_pods(cluster)
    wait_for(lambda: slices(cluster, DRA_NODE) == [], what="no slice from a plugin that cannot start")
    bad = failed(suite(lab, tmp_path / "off-bus", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    plugin_checks = {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}
    assert plugin_checks <= set(bad[DRA_NODE]) <= plugin_checks | {"node/test_gfd_labels"}, bad
    assert "not Ready" in bad[DRA_NODE]["node/test_dra_kubelet_plugin_ready"], bad
    hosts.inject_fault(lab.paths, DRA_NODE, None)
    delete_plugin_pods(
        cluster
    )  # as an operator does after the repair: no waiting out the crash-loop back-off
    wait_for(lambda: published(cluster), what="gpu-2 back in the slice")

    # the DaemonSet deleted: no plugin, no slice; exactly the slice and plugin checks fail, on the dra node
    from kubernetes import client

    client.AppsV1Api(cluster.api).delete_namespaced_daemon_set(dra_addons.KUBELET_PLUGIN, ADDONS_NAMESPACE)
    wait_for(
        lambda: slices(cluster, DRA_NODE) == [] and plugin_pods(cluster) == [],
        what="the plugin and its slice gone",
    )
    bad = failed(suite(lab, tmp_path / "no-plugin", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    assert set(bad[DRA_NODE]) == {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}, bad
    assert bad[DRA_NODE]["node/test_resource_slices"].startswith(
        f"{DRA_NODE}: no ResourceSlice of driver gpu.nvidia.com for this node, expected 7 device(s): "
    )
    back = run_pyinfra(lab, deploy="deploys/cluster_addons.py")  # the add-ons deploy puts the DaemonSet back
    assert back.returncode == 0, back.output[-3000:]
    wait_for(lambda: published(cluster), what="the slice published again")

    # a driver/library mismatch (upgraded, not rebooted): the restarted plugin cannot load NVML and publishes nothing
    hosts.inject_fault(lab.paths, DRA_NODE, "driver-mismatch")
    delete_plugin_pods(cluster)
    wait_for(lambda: slices(cluster, DRA_NODE) == [], what="no slice from a plugin that cannot load NVML")
    bad = failed(suite(lab, tmp_path / "mismatch", "-m", "node"))
    assert set(bad) == {DRA_NODE}, bad
    assert set(bad[DRA_NODE]) == {"node/test_resource_slices", "node/test_dra_kubelet_plugin_ready"}, bad
    assert "not Ready" in bad[DRA_NODE]["node/test_dra_kubelet_plugin_ready"]
    hosts.inject_fault(lab.paths, DRA_NODE, None)
    delete_plugin_pods(cluster)
    wait_for(lambda: published(cluster), what="the slice back once the driver matches")


# --- the add-ons' settings the DRA node depends on, and the rolling upgrade's steps on it -------------------------


def daemonset(cluster: kube.Cluster, name: str) -> dict[str, Any]:
    from kubernetes import client

    raw = client.AppsV1Api(cluster.api).read_namespaced_daemon_set(
        name, ADDONS_NAMESPACE, _preload_content=False
    )
    return dict(json.loads(raw.data))


def patch_container(cluster: kube.Cluster, name: str, field: str, value: Any) -> None:
    """Replace ``field`` (args, env) of the DaemonSet's only container: the DaemonSet rolls its pods."""
    from kubernetes import client

    patch = [{"op": "replace", "path": f"/spec/template/spec/containers/0/{field}", "value": value}]
    client.AppsV1Api(cluster.api).patch_namespaced_daemon_set(name, ADDONS_NAMESPACE, patch)


def rolled_out(cluster: kube.Cluster, name: str) -> bool:
    """The DaemonSet's current template runs Ready on every node it selects, and no pod of an older one is left."""
    ds = daemonset(cluster, name)
    status, want = ds.get("status", {}), ds.get("status", {}).get("desiredNumberScheduled", -1)
    template = ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"]
    raw = cluster.core.list_namespaced_pod(ADDONS_NAMESPACE, _preload_content=False)
    pods = [p for p in json.loads(raw.data)["items"] if p["metadata"]["name"].startswith(name + "-")]
    return (
        status.get("observedGeneration", 0) >= ds["metadata"]["generation"]
        and status.get("updatedNumberScheduled") == want == status.get("numberReady")
        and not status.get("numberUnavailable")
        and len(pods) == want
        and all(p["metadata"].get("labels", {}).get("pod-template-generation") == template for p in pods)
    )


@contextlib.contextmanager
def container_changed(lab: Lab, cluster: kube.Cluster, name: str, field: str, value: Any) -> Iterator[None]:
    """The DaemonSet's container with ``field`` set to ``value`` for the block, rolled out; then set back, rolled
    out, the dra node's slice published and the lab settled again (also when the block fails)."""
    (container,) = daemonset(cluster, name)["spec"]["template"]["spec"]["containers"]
    patch_container(cluster, name, field, value)
    try:
        wait_for(
            lambda: rolled_out(cluster, name), timeout=180, what=f"{name} rolled out with {field}={value}"
        )
        yield
    finally:
        patch_container(cluster, name, field, container[field])
        wait_for(lambda: rolled_out(cluster, name), timeout=180, what=f"{name} rolled back")
        wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")
        wait_until_settled(SimpleNamespace(lab=lab))


class UpgradeHost:
    """What the upgrade's operations use of a pyinfra host (its name, print prefix, logged errors and the BootId
    and BootTime facts), the facts read from the real lab host by their own commands."""

    def __init__(self, lab: Lab, node: str) -> None:
        self.lab, self.name, self.print_prefix = lab, node, f"[{node}] "
        self.errors: list[str] = []

    def log_styled(self, message: str, **_kw: Any) -> None:
        self.errors.append(message)

    def get_fact(self, fact: type) -> Any:
        from gpuready.deploy.facts.host import BootId, BootTime

        assert fact in (BootId, BootTime), fact
        return fact().process(self.lab.ssh(self.name, fact().command()).stdout.splitlines())


def upgrade_step(operation: Any, host: UpgradeHost, **kwargs: Any) -> bool:
    """One of the upgrade's operations (gpuready.deploy.upgrade.operations) run as pyinfra runs it on ``host``."""
    (command,) = list(operation._inner(**kwargs))
    return bool(command.function(None, host))


def validate(
    lab: Lab, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, **data: str
) -> tuple[bool, UpgradeHost, dict]:
    """The upgrade's validation of the dra node (operations.validated) with the conformance command the upgrade
    builds for it (host, gpu, node and workloads layers of the packaged suite, inventory/lab.py, ``data`` as the
    operator's --data): (its outcome, the host with what it logged, the verdict)."""
    from gpuready.conformance import SUITE_DIR
    from gpuready.deploy.upgrade import operations
    from gpuready.spec import UpgradePolicy

    for key, value in lab.env().items():  # what inventory/lab.py reads, as in the pyinfra run
        monkeypatch.setenv(key, value)
    kubeconfig, report_dir = lab.state["apiserver"]["kubeconfig"], tmp_path / "reports" / DRA_NODE
    inventory = str(REPO / "inventory" / "lab.py")
    command = operations.conformance_command(SUITE_DIR, inventory, DRA_NODE, report_dir, kubeconfig, data)
    host, started = UpgradeHost(lab, DRA_NODE), time.monotonic()
    ok = upgrade_step(
        operations.validated, host, node=DRA_NODE, policy=UpgradePolicy(node_ready_timeout=60),
        conformance=command, report_dir=str(report_dir), kubeconfig=kubeconfig,
    )  # fmt: skip
    print(f"the upgrade's validation of {DRA_NODE}: {time.monotonic() - started:.1f} s")
    return ok, host, json.loads((report_dir / "verdict.json").read_text())


@contextlib.contextmanager
def upgrade_namespace(cluster: kube.Cluster, name: str) -> Iterator[str]:
    """A namespace for the test's own pods; afterwards deleted (and waited for: its claims free their GPUs), then
    the dra node uncordoned with no upgrade state, as the lab was (also when the block fails)."""
    from gpuready.deploy.upgrade import maintenance

    cluster.core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        cluster.core.delete_namespace(name)

        def gone() -> bool:
            return not [n for n in cluster.core.list_namespace().items if n.metadata.name == name]

        try:
            wait_for(gone, timeout=120, what=f"namespace {name} deleted")
        finally:
            maintenance.set_state(cluster, DRA_NODE, None, unschedulable=None)


def sleeper(cluster: kube.Cluster, namespace: str, app: str, template: str | None = None) -> None:
    """A ReplicaSet of one pod on the dra node that sleeps until evicted; with ``template``, holding its GPU only
    through a ResourceClaim from that ResourceClaimTemplate (no nvidia.com/* resource anywhere in the pod)."""
    from kubernetes import client

    from gpuready.lab import cuda_images

    container: dict[str, Any] = {
        "name": "c",
        "image": cuda_images.CUDA_BASE_IMAGE,  # one the lab has: a real kubelet fails to pull any other
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
    }
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": DRA_NODE},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 2,
        "containers": [container],
    }
    if template:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    labels = {"app": app}
    body = {"metadata": {"name": app}, "spec": {"replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec}}}  # fmt: skip
    client.AppsV1Api(cluster.api).create_namespaced_replica_set(namespace, body)


def app_pods(cluster: kube.Cluster, namespace: str, app: str) -> list[dict[str, Any]]:
    """The app's pods that are not being deleted (raw JSON)."""
    raw = cluster.core.list_namespaced_pod(namespace, label_selector=f"app={app}", _preload_content=False)
    return [p for p in json.loads(raw.data)["items"] if not p["metadata"].get("deletionTimestamp")]


def running_on_dra_node(cluster: kube.Cluster, namespace: str, app: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in app_pods(cluster, namespace, app)
        if p["spec"].get("nodeName") == DRA_NODE and p["status"].get("phase") == "Running"
    ]


def test_the_upgrade_drains_a_claim_holder_and_its_validation_keeps_the_node_cordoned_on_a_failed_dra_check(
    dra_lab, tmp_path, monkeypatch
):
    """The rolling driver upgrade's cluster-side steps on the real dra node, from the upgrade's own operations
    (gpuready.deploy.upgrade.operations; its driver install and reboot between them, the same on every node, and
    its uncordon after a passing validation are test_lab_upgrade.py's, on real hosts too).

    The drain (GPU pods only) evicts a pod that holds its GPU only through a ResourceClaim and leaves a pod with no
    GPU. Then NVIDIA's kubelet plugin comes back without its TimeSlicingSettings feature gate (the chart's default;
    the add-ons turn it on): it still publishes the node's devices but refuses to prepare a claim whose config asks
    for time-slicing, so the pods sharing it never start. The validation runs the suite's DRA checks for the node
    (host, gpu, node and workloads layers): exactly the shared-claim check fails, with the kubelet's event and the
    plugin's own words, every other DRA check passes, and the node stays cordoned, upgrade-state failed, the
    failure naming the check."""
    from kubernetes import client

    from gpuready.conformance.dra_workloads import claim_template
    from gpuready.deploy import upgrade
    from gpuready.deploy.upgrade import maintenance, operations
    from gpuready.spec import UpgradePolicy

    lab, cluster = dra_lab
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")
    wait_until_settled(SimpleNamespace(lab=lab))
    (plugin,) = daemonset(cluster, dra_addons.KUBELET_PLUGIN)["spec"]["template"]["spec"]["containers"]
    assert plugin["args"] == ["--feature-gates=TimeSlicingSettings=true"]  # the add-ons turned it on
    with upgrade_namespace(cluster, "upgrade-dra") as namespace:
        template = claim_template()  # one whole GPU of gpu.nvidia.com
        client.ResourceV1Api(cluster.api).create_namespaced_resource_claim_template(namespace, template)
        sleeper(cluster, namespace, "train", template["metadata"]["name"])
        sleeper(cluster, namespace, "web")
        wait_for(
            lambda: (
                running_on_dra_node(cluster, namespace, "train")
                and running_on_dra_node(cluster, namespace, "web")
            ),
            timeout=120,
            what=f"the claim holder and the plain pod Running on {DRA_NODE}",
        )
        (holder,), (plain,) = (
            running_on_dra_node(cluster, namespace, "train"),
            app_pods(cluster, namespace, "web"),
        )
        (held,) = app_pods(cluster, namespace, "train")
        assert "nvidia.com" not in json.dumps(held["spec"]["containers"])  # its GPU through the claim only
        assert held["status"].get("resourceClaimStatuses"), held["status"]

        maintenance.cordon(cluster, DRA_NODE, upgrade.CORDONED)
        host = UpgradeHost(lab, DRA_NODE)
        policy = UpgradePolicy(drain_gpu_pods_only=True, drain_timeout=90)
        assert upgrade_step(
            operations.drained,
            host,
            node=DRA_NODE,
            policy=policy,
            kubeconfig=str(lab.state["apiserver"]["kubeconfig"]),
        )
        assert host.errors == []
        assert maintenance.read_node(cluster, DRA_NODE).upgrade_state == upgrade.DRAINED
        assert holder not in {p["metadata"]["name"] for p in app_pods(cluster, namespace, "train")}  # evicted
        assert running_on_dra_node(cluster, namespace, "web") == [plain["metadata"]["name"]]  # never touched

        with container_changed(lab, cluster, dra_addons.KUBELET_PLUGIN, "args", []):
            wait_for(
                lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s slice from the gateless plugin"
            )
            maintenance.set_state(cluster, DRA_NODE, upgrade.REBOOTING)  # where the upgrade validates from
            # the shared pods wait out the pod timeout (their kubelet, nudged every 10 s, fails their prepare
            # each time: workloads.ClaimNudges)
            ok, host, verdict = validate(lab, tmp_path, monkeypatch, pod_timeout="90")
        bad = failed(verdict)
        assert set(bad) == {DRA_NODE} and set(bad[DRA_NODE]) == {
            "workloads/test_dra_shared_claim_same_gpu"
        }, bad
        message = bad[DRA_NODE]["workloads/test_dra_shared_claim_same_gpu"]
        assert message.startswith(
            f"{DRA_NODE}: pod shared-{DRA_NODE}-0 sharing ResourceClaim shared-{DRA_NODE} (TimeSlicing) on device "
            f"{DRA_NODE}/gpu-"
        ), message
        assert "FailedPrepareDynamicResources" in message, message
        assert (
            'error validating GPU config: "TimeSlicing" is selected as the GPU sharing strategy, but the '
            '"TimeSlicingSettings" feature gate is not enabled' in message
        ), message
        checks = statuses(verdict, DRA_NODE)
        for check in ("node/test_resource_slices", "node/test_device_classes", "node/test_dra_kubelet_plugin_ready",
                      "workloads/test_vector_add", "workloads/test_mig_devices",
                      "workloads/test_dra_unsatisfiable_claim_pending", "workloads/test_dra_driver_version_matches_smi"):  # fmt: skip
            assert checks[check][0] == "pass", (check, checks[check])
        assert (
            checks["node/test_device_plugin_ready"][0] == "skip"
        )  # the device plugin's check is not this node's
        assert set(verdict["nodes"][DRA_NODE]["layers"]) == set(operations.CONFORMANCE_LAYERS)
        view = maintenance.read_node(cluster, DRA_NODE)
        assert not ok and view.unschedulable and view.upgrade_state == upgrade.FAILED
        assert (
            "workloads::test_dra_shared_claim_same_gpu:" in view.annotations[maintenance.FAILURE_ANNOTATION]
        )
        assert host.errors and f"{DRA_NODE} stays cordoned" in host.errors[0], host.errors
        assert running_on_dra_node(cluster, namespace, "web") == [plain["metadata"]["name"]]


def test_dcgm_exporter_without_its_dra_mapping_names_no_claim(dra_lab, tmp_path):
    """dcgm-exporter without DCGM_EXPORTER_KUBERNETES_ENABLE_DRA (off by default upstream; the add-ons turn it on
    for a fleet with a dra pool) maps only the device-plugin devices the kubelet's pod-resources API lists: a GPU held
    through a ResourceClaim carries neither its pod nor its claim, so the metrics layer's label checks fail on the
    dra node only, saying what to turn on."""
    lab, cluster = dra_lab
    name = "nvidia-dcgm-exporter"
    wait_for(lambda: published(cluster), timeout=120, what=f"{DRA_NODE}'s ResourceSlice")
    wait_until_settled(SimpleNamespace(lab=lab))
    (container,) = daemonset(cluster, name)["spec"]["template"]["spec"]["containers"]
    env = [e for e in container["env"] if e["name"] != "DCGM_EXPORTER_KUBERNETES_ENABLE_DRA"]
    assert len(env) == len(container["env"]) - 1  # the add-ons turned it on: the fleet has a dra pool
    with container_changed(lab, cluster, name, "env", env):
        verdict = suite(lab, tmp_path, "-m", "metrics")
    bad = failed(verdict)
    assert set(bad) == {DRA_NODE}, bad
    assert set(bad[DRA_NODE]) == {"metrics/test_claim_in_labels", "metrics/test_running_pod_in_labels"}, bad
    message = bad[DRA_NODE]["metrics/test_claim_in_labels"]
    assert message.startswith(f"{DRA_NODE}: no series carries ResourceClaim gpuready-"), message
    assert (
        f"/holder-{DRA_NODE} (no series has a dra_claim_name label: is dcgm-exporter's DRA mapping on"
        in message
    ), message
    assert statuses(verdict, PLUGIN_NODE)["metrics/test_running_pod_in_labels"][0] == "pass"
