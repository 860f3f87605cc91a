"""Real kubectl (v1.37) against the simulator: what it prints is what a user of a real cluster would see."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

from .conftest import pod_phase, wait_for

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: plugin-config
  namespace: default
data:
  config.yaml: |
    version: v1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: pause-ds
  namespace: default
spec:
  selector:
    matchLabels: {app: pause-ds}
  template:
    metadata:
      labels: {app: pause-ds}
    spec:
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
"""


def test_get_nodes_wide(kubectl) -> None:
    out = kubectl("get", "nodes", "-o", "wide").stdout.splitlines()
    assert re.split(r"\s{2,}", out[0].strip()) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP",
                                                  "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]  # fmt: skip
    rows = [re.split(r"\s{2,}", line.strip()) for line in out[1:]]
    assert [r[0] for r in rows] == ["virt-node-0000", "virt-node-0001", "virt-node-0002"]
    first = rows[0]
    assert first[1:3] == ["Ready", "<none>"]
    assert re.fullmatch(r"\d+s", first[3])
    assert first[4:] == ["v1.37.1", "10.128.0.2", "<none>", "Debian GNU/Linux 12 (bookworm)", "6.1.0-28-amd64",
                         "containerd://1.7.24"]  # fmt: skip


def test_describe_node(kubectl) -> None:
    out = kubectl("describe", "node", "virt-node-0001").stdout
    assert re.search(r"^Name:\s+virt-node-0001$", out, re.M)
    assert re.search(r"^\s+nvidia\.com/gpu:\s+8$", out, re.M)  # capacity and allocatable
    assert re.search(r"^\s+Ready\s+True\s+.*KubeletReady\s+kubelet is posting ready status$", out, re.M)
    assert re.search(r"^Taints:\s+<none>$", out, re.M)
    assert re.search(r"^\s+HolderIdentity:\s+virt-node-0001$", out, re.M)  # the Lease is found
    assert re.search(r"^Non-terminated Pods:\s+\(0 in total\)$", out, re.M)


def test_apply_client_side_then_server_side_twice(kubectl, tmp_path: Path, sim) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
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
        assert ssa.stdout.splitlines() == ["configmap/plugin-config serverside-applied",
                                           "daemonset.apps/pause-ds serverside-applied"]  # fmt: skip
    cm = sim.store.get("configmaps", "default", "plugin-config")
    managers = {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]}
    # kubectl upgraded the client-side apply manager to server-side apply ownership (csaupgrade)
    assert managers == {("kubectl", "Apply"), ("kubectl-last-applied", "Apply")}
    assert cm["data"] == {"config.yaml": "version: v1\n"}


def test_apply_configured_changes_the_object(kubectl, tmp_path: Path, sim) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    kubectl("apply", "-f", str(manifest))
    manifest.write_text(MANIFEST.replace("version: v1", "version: v2"))
    out = kubectl("apply", "-f", str(manifest)).stdout.splitlines()
    assert out == ["configmap/plugin-config configured", "daemonset.apps/pause-ds unchanged"]
    assert sim.store.get("configmaps", "default", "plugin-config")["data"]["config.yaml"] == "version: v2\n"


def test_daemonset_pods_listed_by_kubectl(kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    kubectl("apply", "-f", str(manifest))

    def ready_line():
        out = kubectl("get", "ds", "pause-ds", "--no-headers").stdout.split()
        return out if out[1:6] == ["3", "3", "3", "3", "3"] else None

    wait_for(ready_line, what="daemonset 3/3 ready")
    pods = kubectl("get", "pods", "-l", "app=pause-ds", "-o", "wide", "--no-headers").stdout.splitlines()
    assert sorted(p.split()[6] for p in pods) == ["virt-node-0000", "virt-node-0001", "virt-node-0002"]
    assert all(p.split()[1:3] == ["1/1", "Running"] for p in pods)


def test_run_logs_and_delete(kubectl, sim) -> None:
    out = kubectl(
        "run", "hello", "--image=busybox", "--restart=Never", "--", "sh", "-c", "echo hello; echo world"
    )
    assert out.stdout.strip() == "pod/hello created"
    wait_for(lambda: pod_phase(sim, "hello") == "Succeeded", what="pod hello Succeeded")
    assert kubectl("logs", "hello").stdout == "hello\nworld\n"
    row = kubectl("get", "pod", "hello", "--no-headers").stdout.split()
    assert row[:4] == ["hello", "0/1", "Completed", "0"]
    assert kubectl("delete", "pod", "hello").stdout.strip() == 'pod "hello" deleted from default namespace'
    gone = kubectl("get", "pod", "hello", check=False)
    assert gone.returncode == 1
    assert gone.stderr.strip() == 'Error from server (NotFound): pods "hello" not found'


def test_failing_command_and_unknown_image(kubectl, sim) -> None:
    kubectl("run", "fails", "--image=busybox", "--restart=Never", "--", "sh", "-c", "echo oops; exit 3")
    kubectl("run", "nopull", "--image=nginx:1.27", "--restart=Never")
    wait_for(lambda: pod_phase(sim, "fails") == "Failed", what="pod fails Failed")
    assert kubectl("get", "pod", "fails", "--no-headers").stdout.split()[1:3] == ["0/1", "Error"]
    assert kubectl("logs", "fails").stdout == "oops\n"

    def pull_backoff():
        row = kubectl("get", "pod", "nopull", "--no-headers").stdout.split()
        return row[2] == "ImagePullBackOff"

    wait_for(pull_backoff, what="ImagePullBackOff")
    logs = kubectl("logs", "nopull", check=False)
    assert logs.returncode == 1
    assert logs.stderr.strip() == ('Error from server (BadRequest): container "nopull" in pod "nopull" is waiting '
                                   "to start: trying and failing to pull image")  # fmt: skip
    events = kubectl("get", "events", "--field-selector", "involvedObject.name=nopull,reason=Failed", "-o",
                     "jsonpath={.items[0].message}").stdout  # fmt: skip
    assert events.startswith('Failed to pull image "nginx:1.27": rpc error: code = Unknown desc = failed to pull and '
                             'unpack image "docker.io/library/nginx:1.27"')  # fmt: skip


def test_get_pods_watch_with_request_timeout(kubectl, sim) -> None:
    kubectl("run", "first", "--image=registry.k8s.io/pause:3.10")
    wait_for(lambda: pod_phase(sim, "first") == "Running", what="first Running")
    result: dict[str, subprocess.CompletedProcess[str]] = {}

    def watch() -> None:
        result["w"] = kubectl("get", "pods", "-w", "--request-timeout=5s", check=False, timeout=30)

    t = threading.Thread(target=watch)
    started = time.monotonic()
    t.start()
    # create the second pod once the watch is established: the list already returned `first`
    wait_for(
        lambda: any(w.namespace == "default" for w in sim.store._watchers.get("pods", [])), what="watch open"
    )
    kubectl("run", "second", "--image=registry.k8s.io/pause:3.10")
    t.join(timeout=30)
    assert time.monotonic() - started < 25
    lines = result["w"].stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert lines[1].split()[:3] == ["first", "1/1", "Running"]
    second = [line.split()[:3] for line in lines[2:]]
    assert second[0] == ["second", "0/1", "Pending"]
    assert second[-1] == ["second", "1/1", "Running"]


def test_cordon_uncordon_and_selectors(kubectl, sim) -> None:
    assert kubectl("cordon", "virt-node-0001").stdout.strip() == "node/virt-node-0001 cordoned"
    row = kubectl("get", "node", "virt-node-0001", "--no-headers").stdout.split()
    assert row[1] == "Ready,SchedulingDisabled"
    assert sim.store.get("nodes", "", "virt-node-0001")["spec"]["unschedulable"] is True
    assert kubectl("uncordon", "virt-node-0001").stdout.strip() == "node/virt-node-0001 uncordoned"
    assert "unschedulable" not in sim.store.get("nodes", "", "virt-node-0001")["spec"]
    kubectl("label", "node", "virt-node-0002", "pool=a")
    kubectl("label", "node", "virt-node-0000", "pool=b")
    names = lambda *sel: kubectl("get", "nodes", *sel, "-o", "name").stdout.split()  # noqa: E731
    assert names("--selector", "pool=a") == ["node/virt-node-0002"]
    assert names("-l", "pool in (a,b)") == ["node/virt-node-0000", "node/virt-node-0002"]
    assert names("-l", "pool notin (a)") == ["node/virt-node-0000", "node/virt-node-0001"]
    assert names("-l", "!pool") == ["node/virt-node-0001"]
    assert names("-l", "pool,pool!=b") == ["node/virt-node-0002"]
    assert names("--field-selector", "metadata.name=virt-node-0001") == ["node/virt-node-0001"]


def test_describe_pod_shows_scheduling_failure(kubectl) -> None:
    kubectl("run", "greedy", "--image=registry.k8s.io/pause:3.10", "--overrides",
            '{"spec":{"containers":[{"name":"greedy","image":"registry.k8s.io/pause:3.10",'
            '"resources":{"limits":{"nvidia.com/gpu":"9"}}}]}}')  # fmt: skip

    def described():
        out = kubectl("describe", "pod", "greedy").stdout
        return out if "FailedScheduling" in out else None

    out = wait_for(described, what="FailedScheduling event")
    assert ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No "
            "preemption victims found for incoming pod.") in " ".join(out.split())  # fmt: skip


def test_typed_client_commands_send_protobuf(kubectl, sim) -> None:
    """`kubectl create <kind>` and `drain` use client-go typed clients, which post protobuf bodies."""
    assert kubectl("create", "namespace", "team").stdout.strip() == "namespace/team created"
    kubectl("create", "configmap", "c1", "-n", "team", "--from-literal=a=b")
    kubectl("create", "secret", "generic", "s1", "-n", "team", "--from-literal=pw=x")
    kubectl("create", "serviceaccount", "bot", "-n", "team")
    kubectl("create", "priorityclass", "high", "--value=1000", "--description=important")
    assert sim.store.get("configmaps", "team", "c1")["data"] == {"a": "b"}
    secret = sim.store.get("secrets", "team", "s1")
    assert (secret["data"], secret["type"]) == ({"pw": "eA=="}, "Opaque")
    assert sim.store.get("serviceaccounts", "team", "bot") is not None
    assert sim.store.get("priorityclasses.scheduling.k8s.io", "", "high")["value"] == 1000
    assert sim.store.get("namespaces", "", "team")["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "team"
    }
    kubectl("run", "victim", "-n", "team", "--image=registry.k8s.io/pause:3.10")
    wait_for(lambda: pod_phase(sim, "victim", "team") == "Running", what="victim Running")
    node = sim.store.get("pods", "team", "victim")["spec"]["nodeName"]
    out = kubectl("drain", node, "--ignore-daemonsets", "--force", "--timeout=20s")
    assert "pod/victim evicted" in out.stdout
    assert sim.store.get("pods", "team", "victim") is None
    assert kubectl("get", "node", node, "--no-headers").stdout.split()[1] == "Ready,SchedulingDisabled"
    assert kubectl("delete", "namespace", "team").stdout.strip() == 'namespace "team" deleted'
    assert sim.store.list("configmaps", "team")[0] == []


def test_logs_follow_streams_until_the_container_exits(kubectl, sim) -> None:
    kubectl(
        "run", "ticker", "--image=busybox", "--restart=Never", "--", "sh", "-c", "echo one; sleep 3; echo two"
    )
    wait_for(lambda: pod_phase(sim, "ticker") == "Running", what="ticker Running")
    assert kubectl("logs", "ticker").stdout == "one\n"  # `two` is not written yet
    follow = kubectl("logs", "-f", "ticker", timeout=20)
    assert follow.stdout == "one\ntwo\n"
    assert pod_phase(sim, "ticker") == "Succeeded"
