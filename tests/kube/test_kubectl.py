"""Real kubectl against the real control plane and KWOK's virtual nodes: what it prints is what a user of a real
cluster sees. Pods on virtual nodes run no containers (KWOK marks them Running, a Job's pods Succeeded), so
nothing here reads a log."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from polling import wait_for

from .conftest import PAUSE, pod_phase, unique

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: plugin-config
  namespace: {ns}
data:
  config.yaml: |
    version: v1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: pause-ds
  namespace: {ns}
spec:
  selector:
    matchLabels: {{app: pause-ds}}
  template:
    metadata:
      labels: {{app: pause-ds}}
    spec:
      nodeSelector: {{gpuready.test/set: {set}}}
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
"""


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def _on(node: str) -> str:
    """`kubectl run --overrides` keeping the scheduler to `node` (other tests' nodes share the cluster)."""
    return json.dumps({"spec": {"nodeSelector": {"kubernetes.io/hostname": node}}})


def _label_set(kubectl: Any, nodes: list[str]) -> str:
    """Label this test's nodes with a set name of their own, for selectors that must not see other nodes."""
    name = unique("set")
    kubectl("label", "node", *nodes, f"gpuready.test/set={name}")
    return name


def test_get_nodes_wide(kubectl: Any, virtual_nodes: Callable[..., list[str]], api: client.ApiClient) -> None:
    nodes = virtual_nodes(3)
    out = kubectl("get", "nodes", *nodes, "-o", "wide").stdout.splitlines()
    assert _cells(out[0]) == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    rows = [_cells(line) for line in out[1:]]
    assert [r[0] for r in rows] == nodes
    ips = [
        next(a.address for a in client.CoreV1Api(api).read_node(n).status.addresses if a.type == "InternalIP")
        for n in nodes
    ]
    for row, ip in zip(rows, ips, strict=True):
        assert row[1:3] == ["Ready", "<none>"]
        assert re.fullmatch(r"\d+s", row[3])
        assert row[4:] == [
            "v1.36.3",
            ip,
            "<none>",
            "Debian GNU/Linux 12 (bookworm)",
            "6.1.0-28-amd64 (amd64)",  # the 1.36 apiserver's table adds the node's architecture
            "containerd://1.7.24",
        ]
    assert len(set(ips)) == 3


def test_describe_node(kubectl: Any, virtual_nodes: Callable[..., list[str]]) -> None:
    (node,) = virtual_nodes(1)
    out = kubectl("describe", "node", node).stdout
    assert re.search(rf"^Name:\s+{node}$", out, re.M)
    assert len(re.findall(r"^\s+nvidia\.com/gpu:\s+8$", out, re.M)) == 2  # capacity and allocatable
    assert re.search(r"^\s+Ready\s+True\s+.*KubeletReady\s+kubelet is posting ready status$", out, re.M)
    assert re.search(r"^Taints:\s+<none>$", out, re.M)
    assert re.search(r"^\s+HolderIdentity:\s+\S+$", out, re.M)  # the Lease (KWOK's) is found
    assert re.search(r"^PodCIDR:\s+10\.244\.\d+\.0/24$", out, re.M)  # the real controller-manager's node IPAM
    assert re.search(r"^Non-terminated Pods:\s+\(0 in total\)$", out, re.M)


def test_apply_client_side_then_server_side_twice(
    kubectl: Any, tmp_path: Path, namespace: str, api: client.ApiClient
) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.format(ns=namespace, set=unique("none")))
    first = kubectl("apply", "-f", str(manifest))
    assert first.stdout.splitlines() == ["configmap/plugin-config created", "daemonset.apps/pause-ds created"]
    assert first.stderr == ""
    again = kubectl("apply", "-f", str(manifest))
    assert again.stdout.splitlines() == [
        "configmap/plugin-config unchanged",
        "daemonset.apps/pause-ds unchanged",
    ]
    changed = kubectl("apply", "-f", "-", check=False)  # no stdin: kubectl reports nothing to apply
    assert changed.returncode != 0
    for _ in range(2):
        ssa = kubectl("apply", "--server-side", "-f", str(manifest))
        assert ssa.stdout.splitlines() == [
            "configmap/plugin-config serverside-applied",
            "daemonset.apps/pause-ds serverside-applied",
        ]
    cm = client.CoreV1Api(api).read_namespaced_config_map("plugin-config", namespace)
    managers = {(m.manager, m.operation) for m in cm.metadata.managed_fields}
    # kubectl upgraded the client-side apply manager to server-side apply ownership (csaupgrade)
    assert managers == {("kubectl", "Apply"), ("kubectl-last-applied", "Apply")}
    assert cm.data == {"config.yaml": "version: v1\n"}


def test_apply_configured_changes_the_object(
    kubectl: Any, tmp_path: Path, namespace: str, api: client.ApiClient
) -> None:
    manifest = tmp_path / "m.yaml"
    text = MANIFEST.format(ns=namespace, set=unique("none"))
    manifest.write_text(text)
    kubectl("apply", "-f", str(manifest))
    manifest.write_text(text.replace("version: v1", "version: v2"))
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out == ["configmap/plugin-config configured", "daemonset.apps/pause-ds unchanged"]
    cm = client.CoreV1Api(api).read_namespaced_config_map("plugin-config", namespace)
    assert cm.data["config.yaml"] == "version: v2\n"


def test_daemonset_pods_listed_by_kubectl(
    kubectl: Any, tmp_path: Path, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    nodes = virtual_nodes(3)
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST.format(ns=namespace, set=_label_set(kubectl, nodes)))
    kubectl("apply", "-f", str(manifest))

    def ready_line() -> list[str] | None:
        out = kubectl("-n", namespace, "get", "ds", "pause-ds", "--no-headers").stdout.split()
        return out if out[1:6] == ["3", "3", "3", "3", "3"] else None

    wait_for(ready_line, 90, "daemonset 3/3 ready")
    pods = kubectl("-n", namespace, "get", "pods", "-l", "app=pause-ds", "-o", "wide", "--no-headers").stdout
    rows = [p.split() for p in pods.splitlines()]
    assert sorted(r[6] for r in rows) == nodes
    assert all(r[1:3] == ["1/1", "Running"] for r in rows)


def test_run_and_delete(
    kubectl: Any, namespace: str, virtual_nodes: Callable[..., list[str]], api: Any
) -> None:
    (node,) = virtual_nodes(1)
    ns = ("-n", namespace)
    out = kubectl(*ns, "run", "hello", f"--image={PAUSE}", "--restart=Never", "--overrides", _on(node))
    assert out.stdout.strip() == "pod/hello created"
    wait_for(lambda: pod_phase(api, "hello", namespace) == "Running", what="pod hello Running")
    row = kubectl(*ns, "get", "pod", "hello", "-o", "wide", "--no-headers").stdout.split()
    assert row[:4] == ["hello", "1/1", "Running", "0"] and row[6] == node, row
    assert (
        kubectl(*ns, "delete", "pod", "hello").stdout.strip()
        == f'pod "hello" deleted from {namespace} namespace'
    )
    gone = kubectl(*ns, "get", "pod", "hello", check=False)
    assert gone.returncode == 1
    assert gone.stderr.strip() == 'Error from server (NotFound): pods "hello" not found'


def test_get_pods_watch_with_request_timeout(
    kubectl: Any, kubectl_popen: Any, namespace: str, virtual_nodes: Callable[..., list[str]], api: Any
) -> None:
    (node,) = virtual_nodes(1)
    ns = ("-n", namespace)
    kubectl(*ns, "run", "first", f"--image={PAUSE}", "--overrides", _on(node))
    wait_for(lambda: pod_phase(api, "first", namespace) == "Running", what="first Running")
    started = time.monotonic()
    watch = kubectl_popen(*ns, "get", "pods", "-w", "--request-timeout=10s")
    assert watch.stdout is not None
    # kubectl lists, prints, then watches from the list's resourceVersion: once `first` is printed, a pod created
    # now can only reach it through the watch
    header, first = watch.stdout.readline(), watch.stdout.readline()
    kubectl(*ns, "run", "second", f"--image={PAUSE}", "--overrides", _on(node))
    rest, _ = watch.communicate(timeout=60)
    assert watch.returncode == 0
    assert time.monotonic() - started < 40
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert first.split()[:3] == ["first", "1/1", "Running"]
    second = [line.split()[:3] for line in rest.splitlines()]
    assert second[0] == ["second", "0/1", "Pending"]
    assert second[-1] == ["second", "1/1", "Running"]
    assert {row[0] for row in second} == {"second"}


def test_cordon_uncordon_and_selectors(
    kubectl: Any, virtual_nodes: Callable[..., list[str]], api: client.ApiClient
) -> None:
    n0, n1, n2 = virtual_nodes(3)
    v1 = client.CoreV1Api(api)
    assert kubectl("cordon", n1).stdout.strip() == f"node/{n1} cordoned"
    row = kubectl("get", "node", n1, "--no-headers").stdout.split()
    assert row[1] == "Ready,SchedulingDisabled"
    assert v1.read_node(n1).spec.unschedulable is True
    assert kubectl("uncordon", n1).stdout.strip() == f"node/{n1} uncordoned"
    assert v1.read_node(n1).spec.unschedulable is None
    mine = f"gpuready.test/set={_label_set(kubectl, [n0, n1, n2])}"
    kubectl("label", "node", n2, "pool=a")
    kubectl("label", "node", n0, "pool=b")
    names = lambda *sel: kubectl("get", "nodes", "-l", ",".join([mine, *sel]), "-o", "name").stdout.split()  # noqa: E731
    assert names("pool=a") == [f"node/{n2}"]
    assert names("pool in (a,b)") == [f"node/{n0}", f"node/{n2}"]
    assert names("pool notin (a)") == [f"node/{n0}", f"node/{n1}"]
    assert names("!pool") == [f"node/{n1}"]
    assert names("pool", "pool!=b") == [f"node/{n2}"]
    by_field = kubectl("get", "nodes", "--field-selector", f"metadata.name={n1}", "-o", "name").stdout.split()
    assert by_field == [f"node/{n1}"]


def test_describe_pod_shows_scheduling_failure(
    kubectl: Any, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    virtual_nodes(3)
    kubectl("-n", namespace, "run", "greedy", f"--image={PAUSE}", "--overrides",
            json.dumps({"spec": {"containers": [{"name": "greedy", "image": PAUSE,
                                                 "resources": {"limits": {"nvidia.com/gpu": "9"}}}]}}))  # fmt: skip

    def described() -> str | None:
        out = kubectl("-n", namespace, "describe", "pod", "greedy").stdout
        return out if "FailedScheduling" in out else None

    message = " ".join(wait_for(described, what="FailedScheduling event").split())
    # every node of the cluster counts (other tests' nodes may be there too); ours are 8-GPU nodes
    found = re.search(
        r"0/(\d+) nodes are available: (\d+) Insufficient nvidia\.com/gpu\. no new claims to deallocate, "
        r"preemption: 0/\1 nodes are available: \2 Preemption is not helpful for scheduling\.",
        message,
    )
    assert found, message
    assert int(found[2]) >= 3


def test_typed_client_commands_send_protobuf(
    kubectl: Any, api: client.ApiClient, virtual_nodes: Callable[..., list[str]]
) -> None:
    """`kubectl create <kind>` and `drain` use client-go typed clients, which post protobuf bodies."""
    (node,) = virtual_nodes(1)
    v1 = client.CoreV1Api(api)
    team, high = unique("team"), unique("high")
    assert kubectl("create", "namespace", team).stdout.strip() == f"namespace/{team} created"
    try:
        kubectl("create", "configmap", "c1", "-n", team, "--from-literal=a=b")
        kubectl("create", "secret", "generic", "s1", "-n", team, "--from-literal=pw=x")
        kubectl("create", "serviceaccount", "bot", "-n", team)
        kubectl("create", "priorityclass", high, "--value=1000", "--description=important")
        try:
            assert v1.read_namespaced_config_map("c1", team).data == {"a": "b"}
            secret = v1.read_namespaced_secret("s1", team)
            assert (secret.data, secret.type) == ({"pw": "eA=="}, "Opaque")
            assert v1.read_namespaced_service_account("bot", team).metadata.name == "bot"
            assert client.SchedulingV1Api(api).read_priority_class(high).value == 1000
        finally:
            kubectl("delete", "priorityclass", high)
        assert v1.read_namespace(team).metadata.labels == {"kubernetes.io/metadata.name": team}
        # pods need the namespace's default ServiceAccount, which the real serviceaccount controller makes
        wait_for(
            lambda: any(
                sa.metadata.name == "default" for sa in v1.list_namespaced_service_account(team).items
            ),
            what=f"{team}/default",
        )
        kubectl("run", "victim", "-n", team, f"--image={PAUSE}", "--overrides", _on(node))
        wait_for(lambda: pod_phase(api, "victim", team) == "Running", what="victim Running")
        out = kubectl("drain", node, "--ignore-daemonsets", "--force", "--timeout=60s", timeout=90)
        assert "pod/victim evicted" in out.stdout
        assert pod_phase(api, "victim", team) is None
        assert kubectl("get", "node", node, "--no-headers").stdout.split()[1] == "Ready,SchedulingDisabled"
    finally:
        deleted = kubectl("delete", "namespace", team, timeout=120)
    # kubectl waits until the namespace controller has emptied and removed it
    assert deleted.stdout.strip() == f'namespace "{team}" deleted'
    assert kubectl("get", "configmaps", "-n", team, "-o", "name").stdout == ""


def test_kubectl_wait_for_conditions_and_fields(
    kubectl: Any, namespace: str, virtual_nodes: Callable[..., list[str]]
) -> None:
    """`kubectl wait` follows the real watch: a node's Ready condition, a pod's Ready condition, a field value."""
    (node,) = virtual_nodes(1)
    assert kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=60s").stdout.strip() == (
        f"node/{node} condition met"
    )
    ns = ("-n", namespace)
    kubectl(*ns, "run", "sleeper", f"--image={PAUSE}", "--restart=Never", "--overrides", _on(node))
    assert kubectl(*ns, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=60s").stdout.strip() == (
        "pod/sleeper condition met"
    )
    kubectl(*ns, "label", "pod", "sleeper", "stage=two")
    waited = kubectl(
        *ns, "wait", "--for=jsonpath={.metadata.labels.stage}=two", "pod/sleeper", "--timeout=60s"
    )
    assert waited.stdout.strip() == "pod/sleeper condition met"
    late = kubectl(*ns, "wait", "--for=jsonpath={.metadata.labels.stage}=three", "pod/sleeper", "--timeout=2s",
                   check=False)  # fmt: skip
    assert late.returncode == 1 and "timed out waiting for the condition on pods/sleeper" in late.stderr
