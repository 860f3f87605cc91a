"""node-feature-discovery on the lab (issue #29 item 2): GFD's labels reach the Nodes only through the NFD the
add-ons deploy runs. Turned off (``addons_nfd = False``, pruned), a relabel does not bring them back and the suite's
GFD-label check fails saying why; deployed again, they come back and the check passes.

Named to sort before test_lab_lifecycle.py, which takes the session lab down (see conftest.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client, config
from polling import wait_for
from pyinfra_runs import REPO, run_pyinfra
from suite_runs import failed, run_suite, wait_until_settled

from gpuready.spec import load_fleet

pytestmark = pytest.mark.lab
NS = "gpu-system"
NFD_CRDS = {
    "nodefeatures.nfd.k8s-sigs.io",
    "nodefeaturegroups.nfd.k8s-sigs.io",
    "nodefeaturerules.nfd.k8s-sigs.io",
}


@pytest.fixture(scope="module")
def api(deployed_lab):
    return config.new_client_from_config(config_file=deployed_lab.lab.state["apiserver"]["kubeconfig"])


@pytest.fixture(scope="module")
def fleet(deployed_lab):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUREADY_LAB_DIR", str(deployed_lab.lab.paths.root))
        return load_fleet(REPO / "inventory" / "lab.py")


def _missing_labels(core, fleet) -> dict[str, dict[str, str]]:
    out = {}
    for name, spec in fleet.nodes.items():
        labels = core.read_node(name).metadata.labels or {}
        missing = {k: v for k, v in spec.expected_labels.items() if labels.get(k) != v}
        if missing:
            out[name] = missing
    return out


def _nfd_pods(core) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith("nfd-")]


def _gfd_pods(core, node: str) -> list:
    """The node's GFD pod, empty while its DaemonSet rolls (more than one, or one terminating)."""
    pods = [
        p
        for p in core.list_namespaced_pod(NS, field_selector=f"spec.nodeName={node}").items
        if p.metadata.name.startswith("gpu-feature-discovery")
    ]
    return pods if len(pods) == 1 and pods[0].metadata.deletion_timestamp is None else []


def test_gfd_labels_come_only_through_nfd(deployed_lab, fleet, api, tmp_path: Path):
    lab = deployed_lab.lab
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ext = client.ApiextensionsV1Api(api)
    # deployed (twice, the second changing nothing: test_lab_deploy): NFD runs and every node has GFD's labels
    assert {d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items} >= {"nfd-worker"}
    assert "nfd-master" in {d.metadata.name for d in apps.list_namespaced_deployment(NS).items}
    wait_until_settled(deployed_lab)
    wait_for(lambda: not _missing_labels(core, fleet), timeout=120, what="GFD's labels on every node")
    node = next(iter(fleet.nodes))
    gfd_keys = sorted(fleet.nodes[node].expected_labels)
    try:
        off = run_pyinfra(
            lab,
            "--data",
            "addons_nfd=False",
            "--data",
            "addons_prune=True",
            deploy="deploys/cluster_addons.py",
        )
        assert off.returncode == 0, off.output[-3000:]
        assert "addons_nfd = False" in off.output  # the deploy says NFD is off
        assert "Prune objects the spec no longer renders" in off.changed_operations()
        assert "nfd-worker" not in {d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items}
        assert "nfd-master" not in {d.metadata.name for d in apps.list_namespaced_deployment(NS).items}
        assert {
            c.metadata.name for c in ext.list_custom_resource_definition().items
        } >= NFD_CRDS  # never pruned
        wait_for(lambda: not _nfd_pods(core), timeout=120, what="the NFD pods to go")

        # A relabel: GFD's labels removed from the node and its GFD pod restarted (GFD writes its features file
        # again). Without NFD nothing carries them to the Node.
        core.patch_node(node, {"metadata": {"labels": dict.fromkeys(gfd_keys)}})
        # turning NFD off rolls GFD (GFD_NFD_ANNOTATION): until the old pod is gone the node lists two (CI at
        # e6d4ba5 found both); the one that stays is restarted
        (gfd,) = wait_for(lambda: _gfd_pods(core, node), what=f"one GFD pod on {node}, none terminating")
        core.delete_namespaced_pod(gfd.metadata.name, NS)
        wait_until_settled(deployed_lab)  # the new GFD pod runs and is Ready
        time.sleep(
            5
        )  # a writer of labels (NFD, GFD) acts on pod and label events: give it more than one chance
        labels = core.read_node(node).metadata.labels or {}
        assert not [k for k in gfd_keys if k in labels], labels

        verdict = run_suite(deployed_lab, tmp_path / "no-nfd", "-m", "node", "--nodes", node)
        message = failed(verdict).get(node, {}).get("node/test_gfd_labels", "")
        assert "no nfd-worker pod on this node" in message, failed(verdict)
    finally:
        back = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
        assert back.returncode == 0, back.output[-3000:]

    # deployed again: NFD runs, the labels come back on every node and the check passes
    wait_until_settled(deployed_lab)
    assert any(p.startswith("nfd-master") for p in _nfd_pods(core))
    wait_for(lambda: not _missing_labels(core, fleet), timeout=120, what="GFD's labels back on every node")
    verdict = run_suite(deployed_lab, tmp_path / "nfd-back", "-m", "node", "--nodes", node)
    assert "node/test_gfd_labels" not in failed(verdict).get(node, {}), failed(verdict)
    again = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
    assert again.returncode == 0 and again.total[0] == 0, again.changed_operations()  # idempotent
