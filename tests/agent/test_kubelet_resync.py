"""A node whose kubelet stops and comes back: the real node lifecycle controller marks its pods not Ready
(MarkPodsNotReady) while the node is NotReady; the kubelet, back, writes the status it computes over that, so a pod
whose containers kept running is Ready again. The agent used to leave the controller's Ready=False in place, and a
device-plugin pod on the lab host whose kubelet a conformance test had stopped stayed Running but not Ready for
the rest of the CI run."""

from __future__ import annotations

from typing import Any

from polling import wait_for

from .conftest import Pods, pause_pod


def _ready(pod: dict[str, Any] | None) -> bool | None:
    if pod is None:
        return None
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_a_pod_that_kept_running_is_ready_again_once_its_kubelet_is_back(
    pods: Pods, virtual_nodes: Any, lab_cluster: Any
) -> None:
    (node,) = virtual_nodes(1)
    pods.create_pod(pause_pod("steady", node))
    wait_for(lambda: _ready(pods.pod("steady")), what="steady Ready")
    lab_cluster.stop_heartbeat(node)
    try:
        wait_for(
            lambda: _ready(pods.pod("steady")) is False,
            timeout=120,
            what="the controller to mark it not Ready",
        )
    finally:
        lab_cluster.resume_heartbeat(node)
    wait_for(
        lambda: _ready(pods.pod("steady")), timeout=60, what="steady Ready again after its kubelet came back"
    )
    assert pods.pod("steady")["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_node_back_in_a_new_boot_restarts_its_pods_containers(pods: Pods, virtual_nodes: Any) -> None:
    """As the real kubelet after a reboot: the pod stays, its container runs again (restart counted, the last run
    terminated with reason Unknown), so its status no longer dates from before the boot: the rolling upgrade
    waits for that (gpuready.deploy.upgrade.maintenance.not_ready_pods)."""
    (node,) = virtual_nodes(1)
    pods.create_pod(pause_pod("survivor", node))
    wait_for(lambda: _ready(pods.pod("survivor")), what="survivor Ready")
    before = pods.pod("survivor")["status"]["containerStatuses"][0]
    info = pods.node(node)["status"]["nodeInfo"]
    pods.core.patch_node_status(node, {"status": {"nodeInfo": {**info, "bootID": "b007-2"}}})

    def restarted() -> dict[str, Any] | None:
        status = (pods.pod("survivor") or {"status": {}})["status"].get("containerStatuses") or [{}]
        return status[0] if status[0].get("restartCount") == 1 and "running" in status[0]["state"] else None

    after = wait_for(restarted, timeout=30, what="survivor's container started again")
    assert after["lastState"]["terminated"]["reason"] == "Unknown"
    assert after["lastState"]["terminated"]["startedAt"] == before["state"]["running"]["startedAt"]
    assert after["state"]["running"]["startedAt"] >= after["lastState"]["terminated"]["finishedAt"]
    assert _ready(pods.pod("survivor"))
