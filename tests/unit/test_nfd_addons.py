"""node-feature-discovery in the add-ons: what turns GFD's features file into Node labels (issue #29 item 2).

Facts from kubernetes-sigs/node-feature-discovery at tag v0.17.3: ``deployment/base`` (master Deployment, worker
DaemonSet, RBAC, ``nfd-crds/nfd-api-crds.yaml``), ``deployment/components/common`` (env, security context, master
affinity and tolerations, worker mounts) and the Helm chart's ``templates/clusterrole.yaml``/``role.yaml`` (whose
``nodefeaturegroups/status`` fixes base's ``nodefeaturegroup/status``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from test_spec import JOIN, problems_of, write_inventory

from gpuready.deploy import addons, nfd_addons, plan
from gpuready.deploy.addons import AddonSettings, gpu_tolerations, render_all, untolerated_taints
from gpuready.spec import load_fleet

REPO = Path(__file__).resolve().parents[2]
EXTRA_TAINT = "dedicated=training:NoExecute"


def _fleet(tmp_path: Path, **group: object):
    """Two pools: one with the default taint, one with an extra taint of its own."""
    (tmp_path / "group_data").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    base = {"gpu_model": "NVIDIA L4", "gpu_count": 1, **JOIN}
    tainted = {**base, "node_taints": ["nvidia.com/gpu=present:NoSchedule", EXTRA_TAINT]}
    path = tmp_path / "inv.py"
    path.write_text(
        f"pool_a = ([('node-a', {base!r})], {group!r})\npool_b = ([('node-b', {tainted!r})], {group!r})\n"
    )
    return load_fleet(path)


@pytest.fixture
def fleet(tmp_path):
    return _fleet(tmp_path)


@pytest.fixture
def manifests(fleet):
    return render_all(fleet, AddonSettings.from_node(next(iter(fleet.nodes.values()))))


def _by(manifests, kind, name):
    (found,) = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def test_the_crds_are_nfds_v1alpha1_kinds_and_valid(fleet, manifests):
    crds = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "CustomResourceDefinition"}
    assert set(crds) == {
        "nodefeatures.nfd.k8s-sigs.io",
        "nodefeaturegroups.nfd.k8s-sigs.io",
        "nodefeaturerules.nfd.k8s-sigs.io",
    }
    scopes = {c["spec"]["names"]["kind"]: c["spec"]["scope"] for c in crds.values()}
    assert scopes == {
        "NodeFeature": "Namespaced",
        "NodeFeatureGroup": "Namespaced",
        "NodeFeatureRule": "Cluster",
    }
    minor = next(iter(fleet.nodes.values())).versions.kubernetes_minor
    for crd in crds.values():
        kubernetes_validate.validate(crd, minor + ".0", strict=True)
        (version,) = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert crd["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuready"}
        _assert_structural(version["schema"]["openAPIV3Schema"], crd["metadata"]["name"])
    group = crds["nodefeaturegroups.nfd.k8s-sigs.io"]["spec"]["versions"][0]
    assert group["subresources"] == {"status": {}}  # nfd-master writes the groups' status
    labels = crds["nodefeatures.nfd.k8s-sigs.io"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert labels["properties"]["spec"]["properties"]["labels"]["additionalProperties"] == {"type": "string"}


def _assert_structural(schema, where):
    """apiextensions v1's structural rule, as far as these schemas go: every node has a type."""
    assert "type" in schema, where
    for name, sub in (schema.get("properties") or {}).items():
        _assert_structural(sub, f"{where}.{name}")
    if "items" in schema:
        _assert_structural(schema["items"], f"{where}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _assert_structural(schema["additionalProperties"], f"{where}{{}}")


def test_rbac_is_upstreams(manifests):
    master = _by(manifests, "ClusterRole", "nfd-master")["rules"]
    assert master == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["watch", "list"]},
        {
            "apiGroups": [""],
            "resources": ["nodes", "nodes/status"],
            "verbs": ["get", "patch", "update", "list"],
        },
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeaturegroups/status"],
            "verbs": ["patch", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["nfd-master.nfd.kubernetes.io"],
        },
    ]
    worker = _by(manifests, "Role", "nfd-worker")
    assert worker["metadata"]["namespace"] == "gpu-system"
    assert worker["rules"] == [
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures"],
            "verbs": ["create", "get", "update", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]
    for kind, name, role in (
        ("ClusterRoleBinding", "nfd-master", "ClusterRole"),
        ("RoleBinding", "nfd-worker", "Role"),
    ):
        binding = _by(manifests, kind, name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "gpu-system"}]
        assert _by(manifests, "ServiceAccount", name)["metadata"]["namespace"] == "gpu-system"
    # RBAC before the workloads that use it, CRDs before anything of NFD
    order = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert (
        order.index(("CustomResourceDefinition", "nodefeatures.nfd.k8s-sigs.io"))
        < order.index(("ClusterRole", "nfd-master"))
        < order.index(("Deployment", "nfd-master"))
    )


def test_worker_runs_on_every_gpu_pools_nodes_where_gfd_does(fleet, manifests):
    worker = _by(manifests, "DaemonSet", "nfd-worker")["spec"]["template"]["spec"]
    gfd = _by(manifests, "DaemonSet", "gpu-feature-discovery")["spec"]["template"]["spec"]
    assert worker["nodeSelector"] == gfd["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert worker["tolerations"] == gfd["tolerations"] == gpu_tolerations(fleet)
    assert {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute"} in worker[
        "tolerations"
    ]
    assert untolerated_taints(fleet, worker["tolerations"]) == {}
    assert "runtimeClassName" not in worker  # no driver needed: containerd's default runtime
    (container,) = worker["containers"]
    assert container["command"] == ["nfd-worker"]
    assert container["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.17.3"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    assert worker["serviceAccountName"] == "nfd-worker"
    assert worker["dnsPolicy"] == "ClusterFirstWithHostNet"
    # the features.d GFD writes on the host is what the worker reads, read-only
    volumes = {v["name"]: v for v in worker["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    gfd_out = next(v for v in gfd["volumes"] if v["name"] == "output-dir")["hostPath"]["path"]
    assert volumes["features-d"]["hostPath"]["path"].rstrip("/") == gfd_out
    assert mounts["features-d"]["mountPath"].rstrip("/") == nfd_addons.FEATURES_D
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert volumes["nfd-worker-conf"]["configMap"]["name"] == "nfd-worker-conf"
    assert mounts["nfd-worker-conf"]["mountPath"] == "/etc/kubernetes/node-feature-discovery"


def test_worker_config_enables_the_local_source(manifests):
    cm = _by(manifests, "ConfigMap", "nfd-worker-conf")
    config = yaml.safe_load(cm["data"]["nfd-worker.conf"])
    assert config["core"]["featureSources"] == ["all"] and config["core"]["labelSources"] == ["all"]
    assert config["sources"]["pci"]["deviceLabelFields"] == ["vendor"]
    master = yaml.safe_load(_by(manifests, "ConfigMap", "nfd-master-conf")["data"]["nfd-master.conf"])
    assert master["extraLabelNs"] == ["nvidia.com"]


def test_master_is_one_replica_that_finds_a_node_in_a_gpu_only_fleet(fleet, manifests):
    deployment = _by(manifests, "Deployment", "nfd-master")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["nfd-master"]
    assert "-enable-leader-election" in container["args"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]
    assert pod["serviceAccountName"] == "nfd-master" and pod["enableServiceLinks"] is False
    # upstream's control-plane tolerations, plus every GPU pool's taints: nothing else may exist to run it on
    assert pod["tolerations"][:2] == nfd_addons.CONTROL_PLANE_TOLERATIONS
    assert untolerated_taints(fleet, pod["tolerations"]) == {}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_knob_off_renders_no_nfd(tmp_path):
    fleet = _fleet(tmp_path, addons_nfd=False)
    node = next(iter(fleet.nodes.values()))
    assert node.knobs["addons_nfd"] is False
    manifests = render_all(fleet, AddonSettings.from_node(node))
    assert not [
        m
        for m in manifests
        if m["metadata"]["name"].startswith("nfd-") or "nfd.k8s-sigs.io" in m["metadata"]["name"]
    ]
    assert _by(manifests, "DaemonSet", "gpu-feature-discovery")  # GFD still runs: the cluster's NFD reads it
    # plan and the add-ons deploy say so
    assert "addons_nfd = False" in plan.render_text(fleet)
    assert plan.nfd_note(fleet) and "addons_nfd = False" in plan.render_json(fleet)
    assert plan.nfd_note(_fleet(tmp_path / "on")) is None


def test_knob_off_prunes_the_kinds_only_nfd_renders():
    # pruning looks at every kind rendered; nfd-master's Deployment and nfd-worker's Role/RoleBinding are NFD's
    # alone, so they are named explicitly; CRDs never are (deleting one deletes every object of it)
    kinds = {kind for _, kind in addons.PRUNED_KINDS}
    assert kinds == {"Deployment", "Role", "RoleBinding"}


@pytest.mark.parametrize("value", ["no", "false", 0, None])
def test_a_bad_addons_nfd_is_refused(tmp_path, value):
    problems = problems_of(write_inventory(tmp_path, addons_nfd=value))
    assert any(f"host node-1: addons_nfd = {value!r}: must be True or False" in p for p in problems), problems


def test_nfd_image_follows_its_knob(tmp_path):
    image = "mirror.local/nfd/node-feature-discovery:v0.17.3"
    fleet = _fleet(tmp_path, nfd_image=image)
    manifests = render_all(fleet, AddonSettings.from_node(next(iter(fleet.nodes.values()))))
    for kind, name in (("Deployment", "nfd-master"), ("DaemonSet", "nfd-worker")):
        (container,) = _by(manifests, kind, name)["spec"]["template"]["spec"]["containers"]
        assert container["image"] == image


# --- the suite: why GFD's labels are all missing ------------------------------------------------------------------


def _nfd_pod(
    name: str,
    program: str,
    ready: bool = True,
    image: str = "registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
):
    return {
        "metadata": {"name": name, "namespace": "gpu-system"},
        "spec": {"containers": [{"name": program, "image": image, "command": [program]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def test_all_gfd_labels_missing_says_whether_nfd_runs(tmp_path):
    from gpuready.conformance.checks import node as node_checks

    (node,) = load_fleet(write_inventory(tmp_path)).nodes.values()
    bare = {"metadata": {"name": "node-1", "labels": {}}}
    worker, master = _nfd_pod("nfd-worker-x", "nfd-worker"), _nfd_pod("nfd-master-y", "nfd-master")
    missing = node_checks._diff_labels({}, node.expected_labels, "GFD label")

    def said(pods, masters):
        problems = node_checks.gfd_labels(node, bare, pods, masters)
        assert problems[:-1] == missing
        return problems[-1]

    assert said([], [master]).startswith(
        "no nfd-worker pod on this node: GFD's labels reach the Node only through node-feature-discovery"
    )
    assert "nfd-worker pod gpu-system/nfd-worker-x (Running) not Ready" in said(
        [_nfd_pod("nfd-worker-x", "nfd-worker", False)], [master]
    )
    assert said([worker], []).startswith("no Ready nfd-master pod in the cluster:")
    assert "(gpu-system/nfd-master-y (Running))" in said(
        [worker], [_nfd_pod("nfd-master-y", "nfd-master", False)]
    )
    assert said([worker], [master]).startswith(
        "node-feature-discovery runs (nfd-worker gpu-system/nfd-worker-x"
    )
    # a pod of another image, or another program of NFD's, is not a worker
    assert said(
        [_nfd_pod("w", "nfd-worker", image="docker.io/library/busybox"), _nfd_pod("g", "nfd-gc")], [master]
    ).startswith("no nfd-worker")
    # some labels there: the usual differences only; without the pods (older callers): the same
    partial = {"metadata": {"name": "node-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}}
    assert not any("nfd" in p for p in node_checks.gfd_labels(node, partial, [], []))
    assert node_checks.gfd_labels(node, bare) == missing


def test_a_mirrored_nfd_image_is_recognised(tmp_path):
    from gpuready.conformance.checks import node as node_checks

    image = "registry.example.com:5000/mirror/nfd:v0.17.3"
    (node,) = load_fleet(write_inventory(tmp_path, nfd_image=image)).nodes.values()
    assert node_checks.is_nfd(_nfd_pod("w", "nfd-worker", image=image), "nfd-worker", node)
    assert not node_checks.is_nfd(_nfd_pod("w", "nfd-worker", image=image), "nfd-worker")


def test_gfd_may_publish_its_nodefeature(manifests):
    """GFD v0.19.3 publishes its labels as the NodeFeature ``nvidia-features-for-<node>`` in its namespace (its
    ``--use-node-feature-api`` defaults to true), reading its own pod for the owner reference: the chart's
    templates/role.yml grants both. Without them the real GFD exits 'nodefeatures ... is forbidden' (found on a
    real-kubelet lab host, tests/lab/test_lab_real_nfd.py) and no GFD label reaches a Node."""
    gfd = _by(manifests, "DaemonSet", "gpu-feature-discovery")["spec"]["template"]["spec"]
    rules = _by(manifests, "ClusterRole", gfd["serviceAccountName"])["rules"]
    binding = _by(manifests, "ClusterRoleBinding", gfd["serviceAccountName"])
    assert binding["subjects"][0]["name"] == gfd["serviceAccountName"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"]
            and resource in r["resources"]
            and verb in r["verbs"]
            and not r.get("resourceNames")
            for r in rules
        )

    for verb in ("get", "list", "watch", "create", "update"):
        assert allowed(nfd_addons.GROUP, "nodefeatures", verb), (verb, rules)
    assert allowed("", "pods", "get"), rules
    assert allowed("", "nodes", "watch"), rules  # config-manager follows its node's label


def test_turning_nfd_on_or_off_rolls_gfd_and_nothing_else_of_it():
    # GFD crash-loops without NFD's API; a changed pod template restarts it now, not at its next back-off
    with_nfd, without = (addons.gpu_feature_discovery(AddonSettings(nfd=on)) for on in (True, False))
    annotations = [ds["spec"]["template"]["metadata"]["annotations"] for ds in (with_nfd, without)]
    assert annotations == [{addons.GFD_NFD_ANNOTATION: "gpuready"}, {addons.GFD_NFD_ANNOTATION: "external"}]
    for ds in (with_nfd, without):
        del ds["spec"]["template"]["metadata"]["annotations"]
    assert with_nfd == without
    assert addons.gpu_feature_discovery(AddonSettings(nfd=True)) == addons.gpu_feature_discovery(
        AddonSettings()
    )
