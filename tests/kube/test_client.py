"""The official Python client against the real API server: typed API, watch, logs, patches, server-side apply and
error statuses, as gpuready's own code (gpuready.kube, maintenance, the conformance suite) uses them."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException
from polling import wait_for

from .conftest import PAUSE, pod_phase, unique

NO_NODE = {"gpuready.test/no-such-node": "true"}  # a selector no node matches: the object never runs anywhere


def _pod(name: str, image: str = PAUSE, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": image, **spec.pop("container", {})}], **spec},
    }


def _on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def test_list_nodes(api: client.ApiClient, virtual_nodes: Callable[..., list[str]]) -> None:
    mine = virtual_nodes(3)
    nodes = client.CoreV1Api(api).list_node()
    listed = [n.metadata.name for n in nodes.items]
    assert [n for n in listed if n in mine] == mine  # in name order, as etcd keeps them
    by_name = {n.metadata.name: n for n in nodes.items}
    assert all(by_name[n].status.allocatable["nvidia.com/gpu"] == "8" for n in mine)
    assert int(nodes.metadata.resource_version) > 0


def test_watch_nodes_sees_existing_and_new(
    api: client.ApiClient, virtual_nodes: Callable[..., list[str]]
) -> None:
    v1 = client.CoreV1Api(api)
    mine = virtual_nodes(3)
    added: list[str] = []
    seen: list[tuple[str, str]] = []
    for ev in watch.Watch().stream(v1.list_node, timeout_seconds=60):
        name = ev["object"].metadata.name
        if name in mine or name in added:
            seen.append((ev["type"], name))
        if not added and {n for _, n in seen} >= set(mine):
            added = virtual_nodes(1, "cpu")
        if added and ("ADDED", added[0]) in seen:
            break
    assert [e for e in seen if e[0] == "ADDED"] == [("ADDED", n) for n in [*mine, *added]]


def test_watch_from_resource_version_sees_modifications_and_deletes(
    api: client.ApiClient, namespace: str
) -> None:
    v1 = client.CoreV1Api(api)
    cm = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "w"}, "data": {"a": "1"}})
    v1.patch_namespaced_config_map("w", namespace, {"data": {"a": "2"}})
    v1.delete_namespaced_config_map("w", namespace)
    events = []
    for ev in watch.Watch().stream(
        v1.list_namespaced_config_map,
        namespace,
        field_selector="metadata.name=w",
        resource_version=cm.metadata.resource_version,
        timeout_seconds=30,
    ):
        events.append((ev["type"], ev["object"].data))
        if len(events) == 2:
            break
    assert events == [("MODIFIED", {"a": "2"}), ("DELETED", {"a": "2"})]


def test_create_pod_and_see_it_run(
    api: client.ApiClient, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    (node,) = virtual_nodes(1)
    v1 = client.CoreV1Api(api)
    pod = v1.create_namespaced_pod(
        namespace,
        _pod("echo", "busybox:1.36", restartPolicy="Never", nodeSelector=_on(node)),
    )
    assert pod.metadata.uid and pod.metadata.creation_timestamp is not None
    assert pod.status.phase == "Pending"
    assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"
    # bound by the real scheduler, marked Running by KWOK (virtual nodes run no containers)
    wait_for(lambda: pod_phase(api, "echo", namespace) == "Running", what="echo Running")
    running = v1.read_namespaced_pod("echo", namespace)
    assert running.spec.node_name == node
    assert running.status.container_statuses[0].ready and running.status.pod_ip


def test_generate_name_and_resource_version_conflict(api: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    cm = v1.create_namespaced_config_map(
        namespace, {"metadata": {"generateName": "gen-"}, "data": {"k": "v"}}
    )
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == 9
    stale = cm.metadata.resource_version
    cm.data = {"k": "v2"}
    updated = v1.replace_namespaced_config_map(cm.metadata.name, namespace, cm)
    assert int(updated.metadata.resource_version) > int(stale)
    cm.data = {"k": "v3"}
    cm.metadata.resource_version = stale
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map(cm.metadata.name, namespace, cm)
    assert exc.value.status == 409
    body = json.loads(exc.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        f'Operation cannot be fulfilled on configmaps "{cm.metadata.name}": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )


def test_error_statuses(api: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    with pytest.raises(ApiException) as nf:
        v1.read_namespaced_pod("nope", namespace)
    assert nf.value.status == 404
    assert json.loads(nf.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as dup:
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    assert (dup.value.status, json.loads(dup.value.body)["reason"]) == (409, "AlreadyExists")
    assert json.loads(dup.value.body)["message"] == 'configmaps "dup" already exists'
    with pytest.raises(ApiException) as inv:
        v1.create_namespaced_pod(namespace, _pod("Bad_Name"))
    body = json.loads(inv.value.body)
    assert inv.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'
    )
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as gpu:
        v1.create_namespaced_pod(
            namespace,
            _pod(
                "gpu",
                container={
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}
                },
            ),
        )
    assert gpu.value.status == 422
    assert json.loads(gpu.value.body)["message"] == (
        'Pod "gpu" is invalid: spec.containers[0].resources.requests: '
        'Invalid value: "1": must be equal to nvidia.com/gpu limit of 2'
    )
    missing = unique("missing")
    with pytest.raises(ApiException) as ns:
        v1.create_namespaced_config_map(missing, {"metadata": {"name": "x"}})
    assert (ns.value.status, json.loads(ns.value.body)["message"]) == (
        404,
        f'namespaces "{missing}" not found',
    )
    with pytest.raises(ApiException) as bad:
        v1.list_node(label_selector="a in (b")
    assert bad.value.status == 400 and json.loads(bad.value.body)["reason"] == "BadRequest"


def test_strategic_merge_and_json_patches(api: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod(
        namespace, _pod("p", container={"env": [{"name": "A", "value": "1"}]}, nodeSelector=NO_NODE)
    )
    # strategic: containers merge by name, env by name
    patched = v1.patch_namespaced_pod(
        "p",
        namespace,
        {
            "metadata": {"labels": {"l": "1"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]},
        },
    )
    assert patched.spec.containers[0].image == "registry.k8s.io/pause:3.9"
    assert [(e.name, e.value) for e in patched.spec.containers[0].env] == [("A", "1")]
    assert patched.metadata.labels == {"l": "1"}
    apps = client.AppsV1Api(api)
    ds = {
        "metadata": {"name": "ds"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "nodeSelector": NO_NODE,
                    "containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}],
                },
            },
        },
    }
    apps.create_namespaced_daemon_set(namespace, ds)
    out = apps.patch_namespaced_daemon_set(
        "ds",
        namespace,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}]}]}}
            }
        },
    )
    # merged by name; the real strategic merge puts the patch's new items before the ones it kept
    assert [(e.name, e.value) for e in out.spec.template.spec.containers[0].env] == [("B", "2"), ("A", "1")]
    assert out.metadata.generation == 2
    # JSON patch: a list body makes the client send application/json-patch+json
    v1.patch_namespaced_pod("p", namespace, [{"op": "add", "path": "/metadata/labels/j", "value": "2"}])
    assert v1.read_namespaced_pod("p", namespace).metadata.labels == {"l": "1", "j": "2"}


def test_server_side_apply_with_dynamic_client(api: client.ApiClient, namespace: str) -> None:
    dyn = dynamic.DynamicClient(api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa", "namespace": namespace},
        "data": {"a": "1", "b": "2"},
    }
    first = cms.server_side_apply(body=body, field_manager="gpuready-test")
    assert first.to_dict()["data"] == {"a": "1", "b": "2"}
    assert [(m["manager"], m["operation"]) for m in first.to_dict()["metadata"]["managedFields"]] == [
        ("gpuready-test", "Apply")
    ]
    # dropping a field this manager applied removes it
    body["data"] = {"a": "3"}
    second = cms.server_side_apply(body=body, field_manager="gpuready-test")
    out = second.to_dict()
    assert out["data"] == {"a": "3"}
    entry = next(m for m in out["metadata"]["managedFields"] if m["manager"] == "gpuready-test")
    assert entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}}}


def test_list_limit_continue_and_selectors(api: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    for i in range(5):
        v1.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i % 2)}}}
        )
    page = v1.list_namespaced_config_map(namespace, limit=2, label_selector="i")
    assert [c.metadata.name for c in page.items] == ["cm-0", "cm-1"]
    assert page.metadata.remaining_item_count is None  # the server does not count what a selector would keep
    assert page.metadata._continue
    rest = v1.list_namespaced_config_map(
        namespace, limit=10, label_selector="i", _continue=page.metadata._continue
    )
    assert [c.metadata.name for c in rest.items] == ["cm-2", "cm-3", "cm-4"]
    assert not rest.metadata._continue
    # without a selector it does: the namespace's kube-root-ca.crt (the real root-ca-cert-publisher's, published
    # shortly after the namespace) is listed too
    wait_for(
        lambda: any(
            c.metadata.name == "kube-root-ca.crt" for c in v1.list_namespaced_config_map(namespace).items
        ),
        what="kube-root-ca.crt published",
    )
    unfiltered = v1.list_namespaced_config_map(namespace, limit=2)
    assert [c.metadata.name for c in unfiltered.items] == ["cm-0", "cm-1"]
    assert unfiltered.metadata.remaining_item_count == 4
    odd = v1.list_namespaced_config_map(namespace, label_selector="i=1")
    assert [c.metadata.name for c in odd.items] == ["cm-1", "cm-3"]
    v1.delete_collection_namespaced_config_map(namespace, label_selector="i=0")
    left = v1.list_namespaced_config_map(namespace, label_selector="i")
    assert [c.metadata.name for c in left.items] == ["cm-1", "cm-3"]


def test_field_selectors_on_pods(
    api: client.ApiClient, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    node, empty = virtual_nodes(2)
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod(namespace, _pod("a", nodeSelector=_on(node)))
    wait_for(lambda: pod_phase(api, "a", namespace) == "Running", what="a Running")
    on_node = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    assert [p.metadata.name for p in on_node.items] == ["a"]
    assert v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={empty}").items == []
    running = v1.list_namespaced_pod(namespace, field_selector="status.phase=Running,status.phase!=Failed")
    assert [p.metadata.name for p in running.items] == ["a"]
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_pod(namespace, field_selector="spec.bogus=1")
    assert json.loads(exc.value.body)["message"] == "field label not supported: spec.bogus"


def test_node_status_subresource_and_binding(
    api: client.ApiClient, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    node, target = virtual_nodes(2)
    v1 = client.CoreV1Api(api)
    v1.patch_node_status(
        node,
        {"status": {"capacity": {"example.com/widget": "4"}, "allocatable": {"example.com/widget": "4"}}},
    )
    read = v1.read_node(node)
    assert read.status.allocatable["example.com/widget"] == "4"
    assert read.status.allocatable["nvidia.com/gpu"] == "8"
    # the main endpoint ignores status changes
    v1.patch_node(node, {"status": {"allocatable": {"example.com/widget": "9"}}})
    assert v1.read_node(node).status.allocatable["example.com/widget"] == "4"
    # a pod for a scheduler that does not run: only a Binding places it (the real scheduler leaves it alone)
    v1.create_namespaced_pod(namespace, _pod("manual", schedulerName="my-scheduler"))
    v1.create_namespaced_binding(
        namespace,
        {"metadata": {"name": "manual"}, "target": {"kind": "Node", "name": target}},
        _preload_content=False,
    )
    assert v1.read_namespaced_pod("manual", namespace).spec.node_name == target
    wait_for(lambda: pod_phase(api, "manual", namespace) == "Running", what="the bound pod Running")


def test_runtime_class_and_priority_class_admission(api: client.ApiClient, namespace: str) -> None:
    v1, node, scheduling = client.CoreV1Api(api), client.NodeV1Api(api), client.SchedulingV1Api(api)
    handler = unique("nvidia")  # cluster-scoped: a name of this test's own
    gold = unique("gold")
    with pytest.raises(ApiException) as missing:
        v1.create_namespaced_pod(namespace, _pod("gpu", runtimeClassName=handler))
    assert missing.value.status == 403
    assert json.loads(missing.value.body)["message"] == (
        f'pods "gpu" is forbidden: pod rejected: RuntimeClass "{handler}" not found'
    )
    node.create_runtime_class(
        {
            "metadata": {"name": handler},
            "handler": "nvidia",
            "scheduling": {"nodeSelector": {"nvidia.com/gpu.present": "true"}},
        }
    )
    try:
        pod = v1.create_namespaced_pod(namespace, _pod("gpu", runtimeClassName=handler))
        assert pod.spec.node_selector == {"nvidia.com/gpu.present": "true"}
    finally:
        node.delete_runtime_class(handler)
    with pytest.raises(ApiException) as pc:
        v1.create_namespaced_pod(namespace, _pod("vip", priorityClassName=gold))
    assert (
        json.loads(pc.value.body)["message"]
        == f'pods "vip" is forbidden: no PriorityClass with name {gold} was found'
    )
    scheduling.create_priority_class({"metadata": {"name": gold}, "value": 1000})

    def vip() -> Any:
        """The Priority admission plugin reads classes from its informer only (plugin/pkg/admission/priority,
        v1.36.3; the RuntimeClass plugin falls back to a GET), which sees a new class a moment later."""
        try:
            return v1.create_namespaced_pod(namespace, _pod("vip", priorityClassName=gold))
        except ApiException as exc:
            if exc.status == 403 and "no PriorityClass with name" in str(exc.body):
                return None
            raise

    try:
        assert (
            wait_for(vip, 10, f"the Priority admission plugin to see PriorityClass {gold}").spec.priority
            == 1000
        )
    finally:
        scheduling.delete_priority_class(gold)
    crit = v1.create_namespaced_pod(namespace, _pod("crit", priorityClassName="system-node-critical"))
    assert crit.spec.priority == 2000001000


def test_method_not_allowed_and_unknown_resource(api: client.ApiClient, namespace: str) -> None:
    cfg = api.configuration
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    ctx.load_cert_chain(cfg.cert_file, cfg.key_file)  # the admin kubeconfig's client certificate

    def call(method: str, path: str) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(
            cfg.host + path,
            method=method,
            data=b"{}" if method == "POST" else None,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    code, body = call("POST", f"/api/v1/namespaces/{namespace}/configmaps/x")
    assert (code, body["reason"], body["message"]) == (
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
    code, body = call("GET", "/api/v1/widgets")
    assert (code, body["reason"], body["message"]) == (
        404,
        "NotFound",
        "the server could not find the requested resource",
    )


def test_secret_string_data_is_folded_into_data(api: client.ApiClient, namespace: str) -> None:
    v1 = client.CoreV1Api(api)
    s = v1.create_namespaced_secret(namespace, {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    assert (s.data, s.string_data, s.type) == ({"token": "YWJj"}, None, "Opaque")
