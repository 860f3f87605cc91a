"""Unit tests of the pure pieces: selectors, patches, quantities, printers, the catalogue runtime, the store."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuready.lab.apiserver import errors
from gpuready.lab.apiserver.patch import (
    field_set,
    json_patch,
    merge_patch,
    server_side_apply,
    strategic_merge,
)
from gpuready.lab.apiserver.quantity import milli_value, parse_quantity
from gpuready.lab.apiserver.runtime import CatalogueRuntime, normalize_image
from gpuready.lab.apiserver.scheduler import num_feasible_to_find, pod_requests, tolerates
from gpuready.lab.apiserver.selectors import (
    match_node_selector_terms,
    parse_field_selector,
    parse_label_selector,
)
from gpuready.lab.apiserver.store import Store
from gpuready.lab.apiserver.tables import human_duration, pod_status_reason


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a in (x, y),b", {"a": "y", "b": ""}, True),
        ("a notin (x)", {"a": "x"}, False),
        ("!a", {"a": "1"}, False),
        ("!a,b=c", {"b": "c"}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict, expected: bool) -> None:
    matcher = parse_label_selector(selector)
    assert matcher is not None and matcher(labels) is expected


def test_label_selector_parse_error_is_400() -> None:
    with pytest.raises(errors.ApiError) as exc:
        parse_label_selector("a in (b")
    assert exc.value.code == 400


def test_field_selectors() -> None:
    m = parse_field_selector("spec.nodeName=n1,status.phase!=Failed", "pods")
    assert m is not None
    assert m({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not m({"spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}})
    with pytest.raises(errors.ApiError):
        parse_field_selector("spec.nodeName=x", "configmaps")


def test_node_selector_terms_or_and_match_fields() -> None:
    node = {"metadata": {"name": "n1", "labels": {"zone": "a", "gpus": "8"}}}
    gt = [{"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}]
    assert match_node_selector_terms(gt, node)
    terms = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]  # fmt: skip
    assert match_node_selector_terms(terms, node)
    assert not match_node_selector_terms(terms[:1], node)


def test_merge_and_strategic_patches() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}]},
                                   {"name": "b", "image": "y"}], "tolerations": [{"key": "t"}]},
           "metadata": {"finalizers": ["f1"], "labels": {"k": "v"}}}  # fmt: skip
    out = strategic_merge(pod, {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}],
                                         "tolerations": [{"key": "u"}], "$setElementOrder/containers": [{"name": "a"}]},
                                "metadata": {"finalizers": ["f2"], "labels": {"k": None}}})  # fmt: skip
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("a", "x"),
        ("b", "z"),
        ("c", "w"),
    ]
    assert out["spec"]["containers"][0]["env"] == [{"name": "E", "value": "1"}]
    assert out["spec"]["tolerations"] == [{"key": "u"}]  # atomic list: replaced
    assert out["metadata"] == {"finalizers": ["f1", "f2"], "labels": {}}
    deleted = strategic_merge(pod, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b"]
    merged = merge_patch(pod, {"spec": {"containers": [{"name": "only"}]}})
    assert merged["spec"]["containers"] == [{"name": "only"}]
    assert pod["spec"]["containers"][1]["image"] == "y"  # inputs untouched


def test_json_patch_ops_and_errors() -> None:
    doc = {"a": {"b": [1, 2]}}
    out = json_patch(doc, [{"op": "add", "path": "/a/b/-", "value": 3}, {"op": "replace", "path": "/a/b/0", "value": 0},
                           {"op": "remove", "path": "/a/b/1"}, {"op": "test", "path": "/a/b", "value": [0, 3]},
                           {"op": "copy", "from": "/a/b", "path": "/c"}])  # fmt: skip
    assert out == {"a": {"b": [0, 3]}, "c": [0, 3]}
    with pytest.raises(errors.ApiError) as exc:
        json_patch(doc, [{"op": "remove", "path": "/nope"}])
    assert exc.value.code == 422


def test_server_side_apply_field_ownership() -> None:
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "1"}},
               "data": {"k1": "v", "k2": "v"}}  # fmt: skip
    assert field_set(applied) == {"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:k1": {}, "f:k2": {}}}
    live = server_side_apply(None, applied, "m", "t")
    live["data"]["other"] = "kept"  # written by someone else
    again = server_side_apply(live, {**applied, "data": {"k1": "w"}}, "m", "t2")
    assert again["data"] == {"k1": "w", "other": "kept"}
    assert [(e["manager"], e["time"]) for e in again["metadata"]["managedFields"]] == [("m", "t2")]


def test_quantities() -> None:
    assert parse_quantity("100m") == Fraction(1, 10)
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1.5") == Fraction(3, 2)
    assert parse_quantity("2k") == 2000
    assert (milli_value("100m"), milli_value("1"), milli_value("1n")) == (100, 1000, 1)
    with pytest.raises(ValueError):
        parse_quantity("abc")


def test_pod_requests_and_tolerations() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}},
                           {"resources": {"requests": {"cpu": "250m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}  # fmt: skip
    assert pod_requests(spec) == {"cpu": 2000, "nvidia.com/gpu": 1000}  # milli-units
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "value": "absent"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert (num_feasible_to_find(50), num_feasible_to_find(1000), num_feasible_to_find(5000)) == (
        50,
        420,
        500,
    )


def test_human_duration_like_kubectl() -> None:
    assert [human_duration(s) for s in (5, 119, 125, 600, 7200, 30000, 200000, 3e7)] == [
        "5s", "119s", "2m5s", "10m", "120m", "8h", "2d7h", "347d"]  # fmt: skip


def test_pod_status_column() -> None:
    crash = {"status": {"phase": "Running", "containerStatuses": [{"restartCount": 2, "state": {
        "waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"finishedAt": "2026-01-01T00:00:00Z"}}}]}}  # fmt: skip
    assert pod_status_reason(crash)[:3] == ("CrashLoopBackOff", 0, 2)
    done = {
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}],
        }
    }
    assert pod_status_reason(done)[0] == "Completed"
    terminating = {"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}}
    assert pod_status_reason(terminating)[0] == "Terminating"


def test_catalogue_runtime() -> None:
    rt = CatalogueRuntime()
    plan = rt.plan({}, {"image": "busybox", "args": ["sh", "-c", "echo a; sleep 2; echo $X; exit 4"],
                        "env": [{"name": "X", "value": "b"}]}, None)  # fmt: skip
    assert (plan.logs, plan.exit_code, plan.run_seconds) == ("a\nb\n", 4, 2.0)
    assert rt.plan({}, {"image": "registry.k8s.io/pause:3.10"}, None).exit_code is None
    missing = rt.plan({}, {"image": "busybox", "command": ["nvidia-smi"]}, None)
    assert (missing.exit_code, missing.reason) == (128, "StartError")
    pull = rt.plan({}, {"image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}, None)
    assert [w[1] for w in pull.waiting] == ["ErrImagePull", "ImagePullBackOff"]
    assert "lookup nvcr.io: no such host" in pull.waiting[0][2]
    assert normalize_image("library/busybox") == ("docker.io/library/busybox", "latest")
    assert normalize_image("localhost:5000/x:1") == ("localhost:5000/x", "1")


def test_store_resource_versions_and_watch_replay() -> None:
    store = Store()
    a = store.create("configmaps", {"metadata": {"name": "a", "namespace": "n"}})
    rv = int(a["metadata"]["resourceVersion"])
    b = store.update("configmaps", {"metadata": {"name": "a", "namespace": "n"}, "data": {"x": "1"}},
                     expected_rv=str(rv))  # fmt: skip
    assert int(b["metadata"]["resourceVersion"]) == rv + 1
    with pytest.raises(errors.ApiError) as exc:
        store.update("configmaps", {"metadata": {"name": "a", "namespace": "n"}}, expected_rv=str(rv))
    assert exc.value.code == 409
    w = store.watch("configmaps", "n", since=rv)
    store.delete("configmaps", "n", "a")
    assert [w.queue.get_nowait().type for _ in range(2)] == ["MODIFIED", "DELETED"]
    w.close()
