"""The node agent's kubelet on the real control plane (tests/conftest.py's `lab_cluster`): pods on its virtual nodes,
in the test's own namespace, read as plain dicts (the API's own field names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from polling import wait_for

Obj = dict[str, Any]
PAUSE = "registry.k8s.io/pause:3.10"


def pause_pod(name: str, node: str) -> Obj:
    """A pod that runs until deleted, pinned to `node`, restarted by its kubelet whenever it stops."""
    spec = {
        "restartPolicy": "Always",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "main", "image": PAUSE}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclass
class Pods:
    """The test's namespace on the lab cluster."""

    api: client.ApiClient
    ns: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def node(self, name: str) -> Obj:
        return self.api.sanitize_for_serialization(self.core.read_node(name))

    def pod(self, name: str) -> Obj | None:
        try:
            return self.api.sanitize_for_serialization(self.core.read_namespaced_pod(name, self.ns))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_pod(self, manifest: Obj) -> None:
        self.core.create_namespaced_pod(self.ns, manifest)


@pytest.fixture
def pods(namespace: str, api: client.ApiClient) -> Pods:
    """The test's namespace, once its default ServiceAccount exists (pods are refused before that)."""
    core = client.CoreV1Api(api)
    wait_for(
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(namespace).items
        ),
        what=f"the serviceaccount controller to create {namespace}/default",
    )
    return Pods(api, namespace)
