"""The real API server's pod and service proxy, dialling the pods the lab's node agent runs.

The agent answers on the pods' own addresses (the pod network is routed to it inside the lab's namespace), so
`.../pods/NAME:PORT/proxy/PATH` and `.../services/NAME:PORT/proxy/PATH` take the real path: the API server resolves
the pod IP (and, for a service, the Endpoints the real endpoints controller keeps) and connects to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from polling import wait_for

from .conftest import PAUSE, pod_phase, unique

EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"


def _pod(name: str, node: str, image: str = PAUSE, port: int = 9400, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            **spec,
            "containers": [
                {"name": "c", "image": image, "ports": [{"name": "metrics", "containerPort": port}]}
            ],
        },
    }


@pytest.fixture
def nvidia_runtime_class(api: client.ApiClient) -> Any:
    """A RuntimeClass for the `nvidia` handler (cluster-scoped: a name of this test's own, deleted after it)."""
    name = unique("nvidia")
    node = client.NodeV1Api(api)
    node.create_runtime_class({"metadata": {"name": name}, "handler": "nvidia"})
    yield name
    node.delete_runtime_class(name)


def test_pod_proxy_without_listener_is_503(
    api: client.ApiClient, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    (node,) = virtual_nodes(1)
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod(namespace, _pod("web", node, port=8080))
    wait_for(lambda: pod_phase(api, "web", namespace) == "Running", what="web Running")
    ip = v1.read_namespaced_pod("web", namespace).status.pod_ip
    with pytest.raises(ApiException) as exc:
        v1.connect_get_namespaced_pod_proxy_with_path("web:8080", namespace, "metrics")
    body = json.loads(exc.value.body)
    assert (exc.value.status, body["reason"]) == (503, "ServiceUnavailable")
    assert (
        body["message"] == f"error trying to reach service: dial tcp {ip}:8080: connect: connection refused"
    )
    # 9400 is the port the agent serves for every pod address (an exporter may run in any pod): a pod with no
    # exporter in it must not answer there either
    v1.create_namespaced_pod(namespace, _pod("quiet", node))
    wait_for(lambda: pod_phase(api, "quiet", namespace) == "Running", what="quiet Running")
    ip = v1.read_namespaced_pod("quiet", namespace).status.pod_ip
    with pytest.raises(ApiException) as quiet:
        v1.connect_get_namespaced_pod_proxy_with_path("quiet:9400", namespace, "metrics")
    body = json.loads(quiet.value.body)
    assert (quiet.value.status, body["reason"]) == (503, "ServiceUnavailable")
    assert body["message"].startswith("error trying to reach service: read tcp ") and body[
        "message"
    ].endswith(f"->{ip}:9400: read: connection reset by peer")


def test_pod_and_service_proxy_reach_the_exporter(
    api: client.ApiClient,
    namespace: str,
    virtual_nodes: Callable[..., list[str]],
    nvidia_runtime_class: str,
    kubectl: Any,
) -> None:
    (node,) = virtual_nodes(1)
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod(namespace, _pod("exp", node, EXPORTER, runtimeClassName=nvidia_runtime_class))
    wait_for(lambda: pod_phase(api, "exp", namespace) == "Running", what="the exporter Running")
    out = v1.connect_get_namespaced_pod_proxy_with_path("exp:9400", namespace, "metrics")
    assert "DCGM_FI_DEV_GPU_UTIL{" in out
    assert 'Hostname="exp"' in out  # the exporter's os.Hostname(): the pod's name, not the node's
    gpus = {
        line.split('gpu="')[1].split('"')[0]
        for line in out.splitlines()
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
    }
    assert gpus == {str(i) for i in range(8)}  # a DGX H100: eight GPUs
    raw = kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods/exp:9400/proxy/metrics?x=1").stdout
    assert "DCGM_FI_DEV_GPU_UTIL{" in raw
    assert v1.connect_get_namespaced_pod_proxy_with_path("exp:9400", namespace, "health") == "OK"
    with pytest.raises(ApiException) as missing:
        v1.connect_get_namespaced_pod_proxy_with_path("exp:9400", namespace, "nope")
    assert (missing.value.status, missing.value.body) == (404, "404 page not found\n")
    # service port name -> targetPort name -> containerPort, through the Endpoints of the real controller
    v1.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "dcgm"},
            "spec": {
                "selector": {"app": "exp"},
                "ports": [{"name": "metrics", "port": 80, "targetPort": "metrics"}],
            },
        },
    )

    def listed() -> bool:  # the API server's service proxy picks an address from the service's Endpoints
        try:
            return any(s.addresses for s in v1.read_namespaced_endpoints("dcgm", namespace).subsets or [])
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    wait_for(listed, what="the endpoints controller to list the exporter")
    via_service = v1.connect_get_namespaced_service_proxy_with_path("dcgm:metrics", namespace, "metrics")
    assert "DCGM_FI_DEV_GPU_UTIL{" in via_service
