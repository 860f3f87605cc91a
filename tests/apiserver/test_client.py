"""The official Python client: typed API, watch, logs, patches, server-side apply and error statuses."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException

from .conftest import pod_phase, wait_for


def _pod(name: str, image: str = "registry.k8s.io/pause:3.10", **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": image, **spec.pop("container", {})}], **spec}}  # fmt: skip


def test_list_nodes(api) -> None:
    nodes = client.CoreV1Api(api).list_node()
    assert [n.metadata.name for n in nodes.items] == ["virt-node-0000", "virt-node-0001", "virt-node-0002"]
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "8"
    assert int(nodes.metadata.resource_version) > 0


def test_watch_nodes_sees_existing_and_new(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    seen = []
    for ev in watch.Watch().stream(v1.list_node, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        if len(seen) == 3:
            sim.add_virtual_nodes(1, "cpu")
        if len(seen) == 4:
            break
    assert seen == [("ADDED", "virt-node-0000"), ("ADDED", "virt-node-0001"), ("ADDED", "virt-node-0002"),
                    ("ADDED", "virt-node-0003")]  # fmt: skip


def test_watch_from_resource_version_sees_modifications_and_deletes(api) -> None:
    v1 = client.CoreV1Api(api)
    cm = v1.create_namespaced_config_map("default", {"metadata": {"name": "w"}, "data": {"a": "1"}})
    v1.patch_namespaced_config_map("w", "default", {"data": {"a": "2"}})
    v1.delete_namespaced_config_map("w", "default")
    events = []
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, "default", field_selector="metadata.name=w",
                                   resource_version=cm.metadata.resource_version, timeout_seconds=2):  # fmt: skip
        events.append((ev["type"], ev["object"].data))
        if len(events) == 2:
            break
    assert events == [("MODIFIED", {"a": "2"}), ("DELETED", {"a": "2"})]


def test_create_pod_run_and_read_log(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    pod = v1.create_namespaced_pod("default", _pod("echo", "busybox:1.36", restartPolicy="Never",
                                                   container={"command": ["echo", "from", "python"]}))  # fmt: skip
    assert pod.metadata.uid and pod.metadata.creation_timestamp is not None
    assert pod.status.phase == "Pending"
    assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"
    wait_for(lambda: pod_phase(sim, "echo") == "Succeeded", what="echo Succeeded")
    assert v1.read_namespaced_pod_log("echo", "default") == "from python\n"
    done = v1.read_namespaced_pod("echo", "default")
    term = done.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (0, "Completed")
    assert done.spec.node_name.startswith("virt-node-")
    assert done.status.pod_ip.startswith("10.244.")


def test_generate_name_and_resource_version_conflict(api) -> None:
    v1 = client.CoreV1Api(api)
    cm = v1.create_namespaced_config_map(
        "default", {"metadata": {"generateName": "gen-"}, "data": {"k": "v"}}
    )
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == 9
    stale = cm.metadata.resource_version
    cm.data = {"k": "v2"}
    updated = v1.replace_namespaced_config_map(cm.metadata.name, "default", cm)
    assert int(updated.metadata.resource_version) > int(stale)
    cm.data = {"k": "v3"}
    cm.metadata.resource_version = stale
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map(cm.metadata.name, "default", cm)
    assert exc.value.status == 409
    body = json.loads(exc.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (f'Operation cannot be fulfilled on configmaps "{cm.metadata.name}": the object has '
                               "been modified; please apply your changes to the latest version and try again")  # fmt: skip


def test_error_statuses(api) -> None:
    v1 = client.CoreV1Api(api)
    with pytest.raises(ApiException) as nf:
        v1.read_namespaced_pod("nope", "default")
    assert nf.value.status == 404
    assert json.loads(nf.value.body) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                         "message": 'pods "nope" not found', "reason": "NotFound",
                                         "details": {"name": "nope", "kind": "pods"}, "code": 404}  # fmt: skip
    v1.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as dup:
        v1.create_namespaced_config_map("default", {"metadata": {"name": "dup"}})
    assert (dup.value.status, json.loads(dup.value.body)["reason"]) == (409, "AlreadyExists")
    assert json.loads(dup.value.body)["message"] == 'configmaps "dup" already exists'
    with pytest.raises(ApiException) as inv:
        v1.create_namespaced_pod("default", _pod("Bad_Name"))
    body = json.loads(inv.value.body)
    assert inv.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a '
                                      "lowercase RFC 1123 subdomain")  # fmt: skip
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as gpu:
        v1.create_namespaced_pod("default", _pod("gpu", container={"resources": {
            "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}}))  # fmt: skip
    assert gpu.value.status == 422
    assert json.loads(gpu.value.body)["message"] == ('Pod "gpu" is invalid: spec.containers[0].resources.requests'
                                                     '[nvidia.com/gpu]: Invalid value: "1": must be equal to '
                                                     "nvidia.com/gpu limit of 2")  # fmt: skip
    with pytest.raises(ApiException) as ns:
        v1.create_namespaced_config_map("missing", {"metadata": {"name": "x"}})
    assert (ns.value.status, json.loads(ns.value.body)["message"]) == (404, 'namespaces "missing" not found')
    with pytest.raises(ApiException) as bad:
        v1.list_node(label_selector="a in (b")
    assert bad.value.status == 400 and json.loads(bad.value.body)["reason"] == "BadRequest"


def test_strategic_merge_and_json_patches(api) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod("default", _pod("p", container={"env": [{"name": "A", "value": "1"}]},
                                              nodeSelector={"x": "y"}))  # fmt: skip
    # strategic: containers merge by name, env by name
    patched = v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"l": "1"}}, "spec": {"containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.9"}]}})  # fmt: skip
    assert patched.spec.containers[0].image == "registry.k8s.io/pause:3.9"
    assert [(e.name, e.value) for e in patched.spec.containers[0].env] == [("A", "1")]
    assert patched.metadata.labels == {"l": "1"}
    apps = client.AppsV1Api(api)
    ds = {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
        "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox",
                                                                      "env": [{"name": "A", "value": "1"}]}]}}}}  # fmt: skip
    apps.create_namespaced_daemon_set("default", ds)
    out = apps.patch_namespaced_daemon_set("ds", "default", {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "env": [{"name": "B", "value": "2"}]}]}}}})  # fmt: skip
    assert [(e.name, e.value) for e in out.spec.template.spec.containers[0].env] == [("A", "1"), ("B", "2")]
    assert out.metadata.generation == 2
    # JSON patch
    # a list body makes the client send application/json-patch+json
    v1.patch_namespaced_pod("p", "default", [{"op": "add", "path": "/metadata/labels/j", "value": "2"}])
    assert v1.read_namespaced_pod("p", "default").metadata.labels == {"l": "1", "j": "2"}


def test_server_side_apply_with_dynamic_client(api) -> None:
    dyn = dynamic.DynamicClient(api)
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "namespace": "default"},
            "data": {"a": "1", "b": "2"}}  # fmt: skip
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


def test_list_limit_continue_and_selectors(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    for i in range(5):
        v1.create_namespaced_config_map(
            "default", {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i % 2)}}}
        )
    page = v1.list_namespaced_config_map("default", limit=2, label_selector="i")
    assert [c.metadata.name for c in page.items] == ["cm-0", "cm-1"]
    assert page.metadata.remaining_item_count == 3
    rest = v1.list_namespaced_config_map(
        "default", limit=10, label_selector="i", _continue=page.metadata._continue
    )
    assert [c.metadata.name for c in rest.items] == ["cm-2", "cm-3", "cm-4"]
    odd = v1.list_namespaced_config_map("default", label_selector="i=1")
    assert [c.metadata.name for c in odd.items] == ["cm-1", "cm-3"]
    v1.delete_collection_namespaced_config_map("default", label_selector="i=0")
    left = v1.list_namespaced_config_map("default", label_selector="i")
    assert [c.metadata.name for c in left.items] == ["cm-1", "cm-3"]


def test_field_selectors_on_pods(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod("default", _pod("a", nodeSelector={"kubernetes.io/hostname": "virt-node-0001"}))
    wait_for(lambda: pod_phase(sim, "a") == "Running", what="a Running")
    on_node = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=virt-node-0001")
    assert [p.metadata.name for p in on_node.items] == ["a"]
    assert v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=virt-node-0000").items == []
    running = v1.list_namespaced_pod("default", field_selector="status.phase=Running,status.phase!=Failed")
    assert [p.metadata.name for p in running.items] == ["a"]
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert json.loads(exc.value.body)["message"] == "field label not supported: spec.bogus"


def test_node_status_subresource_and_binding(api, sim) -> None:
    v1 = client.CoreV1Api(api)
    v1.patch_node_status("virt-node-0000", {"status": {"capacity": {"example.com/widget": "4"},
                                                       "allocatable": {"example.com/widget": "4"}}})  # fmt: skip
    node = v1.read_node("virt-node-0000")
    assert node.status.allocatable["example.com/widget"] == "4"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    # the main endpoint ignores status changes, as on a real server
    v1.patch_node("virt-node-0000", {"status": {"allocatable": {"example.com/widget": "9"}}})
    assert v1.read_node("virt-node-0000").status.allocatable["example.com/widget"] == "4"
    v1.create_namespaced_pod("default", _pod("manual", schedulerName="my-scheduler"))
    v1.create_namespaced_binding("default", {"metadata": {"name": "manual"},
                                             "target": {"kind": "Node", "name": "virt-node-0002"}},
                                 _preload_content=False)  # fmt: skip
    assert v1.read_namespaced_pod("manual", "default").spec.node_name == "virt-node-0002"


def test_runtime_class_and_priority_class_admission(api, sim) -> None:
    v1, node = client.CoreV1Api(api), client.NodeV1Api(api)
    with pytest.raises(ApiException) as missing:
        v1.create_namespaced_pod("default", _pod("gpu", runtimeClassName="nvidia"))
    assert missing.value.status == 403
    assert json.loads(missing.value.body)["message"] == ('pods "gpu" is forbidden: pod rejected: RuntimeClass '
                                                         '"nvidia" not found')  # fmt: skip
    node.create_runtime_class({"metadata": {"name": "nvidia"}, "handler": "nvidia", "scheduling": {
        "nodeSelector": {"nvidia.com/gpu.present": "true"}}})  # fmt: skip
    pod = v1.create_namespaced_pod("default", _pod("gpu", runtimeClassName="nvidia"))
    assert pod.spec.node_selector == {"nvidia.com/gpu.present": "true"}
    with pytest.raises(ApiException) as pc:
        v1.create_namespaced_pod("default", _pod("vip", priorityClassName="gold"))
    assert (
        json.loads(pc.value.body)["message"]
        == 'pods "vip" is forbidden: no PriorityClass with name gold was found'
    )
    crit = v1.create_namespaced_pod("default", _pod("crit", priorityClassName="system-node-critical"))
    assert crit.spec.priority == 2000001000


def test_method_not_allowed_and_unknown_resource(sim) -> None:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(sim.ca_path))

    def call(method: str, path: str) -> tuple[int, dict]:
        req = urllib.request.Request(sim.url + path, method=method, data=b"{}" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {sim.admin_token}",
                                              "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    code, body = call("POST", "/api/v1/namespaces/default/configmaps/x")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, body = call("GET", "/api/v1/widgets")
    assert (code, body["reason"], body["message"]) == (
        404,
        "NotFound",
        "the server could not find the requested resource",
    )


def test_secret_string_data_is_folded_into_data(api) -> None:
    v1 = client.CoreV1Api(api)
    s = v1.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    assert (s.data, s.string_data, s.type) == ({"token": "YWJj"}, None, "Opaque")
