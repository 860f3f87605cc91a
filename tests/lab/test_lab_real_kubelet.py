"""The lab's real kubelet (`gpuready lab up`, issue #28): gpuready's own node
deploy, unchanged, gives a lab host the REAL kubelet and kubeadm v1.36.3 (the lab's packages carry them), joins it
with the real `kubeadm join`, and a pod runs as a real runc container of the host's Debian containerd.

On the shared real-kubelet lab (conftest.real_l4_lab: trixie, the L4 profile; subnet 10.222.0.0/16, host number
222), beside the session lab. With the caches warm (kubelet, control plane, base roots, images) that lab's up and
both node deploys take about 76 s on an idle 2-core machine and its teardown 23 s, so the default `make test` runs
the module (marked lab only).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from conftest import REAL_NODE, Lab, RealLab
from pyinfra_runs import PyinfraRun

from gpuready.lab import k8s_packages, realhost
from gpuready.lab.cluster import cluster

SLEEP_UNTIL_TERM = "trap 'exit 0' TERM; /bin/busybox sleep 3600 & wait"
pytestmark = pytest.mark.lab

NODE = REAL_NODE
VERSION = cluster.DEFAULT_VERSION


def _kubectl(state: dict[str, Any], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = str(k8s_packages.kubectl_binary())
    return subprocess.run(
        [exe, f"--kubeconfig={state['apiserver']['kubeconfig']}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wait(probe: Any, timeout: float) -> tuple[bool, str]:
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        ok, last = probe()
        if ok:
            return True, last
        time.sleep(2)
    return False, last


@pytest.fixture(scope="module")
def deployed(real_l4_lab: RealLab) -> tuple[Lab, PyinfraRun, PyinfraRun]:
    return real_l4_lab.lab, real_l4_lab.first, real_l4_lab.second


def test_real_kubelet_and_kubeadm_binaries(deployed: tuple[Lab, PyinfraRun, PyinfraRun]) -> None:
    lab, _, _ = deployed
    for tool, version in (("kubelet", "kubelet --version"), ("kubeadm", "kubeadm version -o short")):
        magic = lab.ssh(NODE, f"head -c 4 /usr/bin/{tool} | od -An -c").stdout.split()
        assert magic[1:4] == ["E", "L", "F"], f"{tool} is not an ELF binary: {magic}"
        out = lab.ssh(NODE, version).stdout
        assert f"v{VERSION}" in out, out
    owner = lab.ssh(NODE, "dpkg -S /usr/bin/kubelet /usr/bin/kubeadm").stdout
    assert "kubelet:" in owner and "kubeadm:" in owner, owner


def test_node_joined_by_the_real_kubelet_is_ready(deployed: tuple[Lab, PyinfraRun, PyinfraRun]) -> None:
    lab, _, _ = deployed

    def ready() -> tuple[bool, str]:
        r = _kubectl(lab.state, "get", "node", NODE, "-o", "json")
        if r.returncode:
            return False, r.stderr
        node = json.loads(r.stdout)
        conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        info = node["status"]["nodeInfo"]
        return conds.get(
            "Ready"
        ) == "True", f"{conds} {info['kubeletVersion']} {info['containerRuntimeVersion']}"

    ok, detail = _wait(ready, 180)
    assert ok, detail
    assert f"v{VERSION}" in detail and "containerd://" in detail, detail


def test_busybox_pod_is_a_real_container(deployed: tuple[Lab, PyinfraRun, PyinfraRun]) -> None:
    lab, _, _ = deployed
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "real-busybox", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "busybox",
                    "image": realhost.BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    # ends on SIGTERM (`sleep` as PID 1 ignores it and would hold the host's shutdown)
                    "command": ["/bin/busybox", "sh", "-c", f"echo real; {SLEEP_UNTIL_TERM}"],
                }
            ],
        },
    }
    created = _kubectl(lab.state, "apply", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr

    def running() -> tuple[bool, str]:
        r = _kubectl(lab.state, "get", "pod", "real-busybox", "-o", "json")
        status = json.loads(r.stdout).get("status", {}) if r.returncode == 0 else {}
        return status.get("phase") == "Running", json.dumps(status)[-1500:] or r.stderr

    ok, detail = _wait(running, 150)
    if not ok:
        events = _kubectl(
            lab.state, "get", "events", "-A", "--field-selector", "involvedObject.name=real-busybox"
        )
        journal = lab.ssh(
            NODE, "journalctl -u kubelet -u containerd --no-pager -o cat | tail -40", check=False
        )
        pytest.fail(f"pod not Running: {detail}\n{events.stdout}\n{journal.stdout}")
    ps = lab.ssh(NODE, "crictl ps --name busybox -o json").stdout
    containers = json.loads(ps)["containers"]
    assert [c["metadata"]["name"] for c in containers] == ["busybox"], ps
    assert containers[0]["state"] == "CONTAINER_RUNNING", ps


def test_second_deploy_changes_nothing(deployed: tuple[Lab, PyinfraRun, PyinfraRun]) -> None:
    _, _, second = deployed
    assert second.returncode == 0, second.failure
    assert second.changed_operations() == set(), second.failure


def _run_pod(lab: Lab, name: str, script: str, volumes: dict[str, str] | None = None) -> str:
    """Run busybox ``sh -c script`` in a pod on the real node to its end; its log (hostPath ``volumes``: host -> pod)."""
    mounts = [{"name": f"v{i}", "mountPath": inside} for i, inside in enumerate((volumes or {}).values())]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": realhost.BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/busybox", "sh", "-c", script], "volumeMounts": mounts}],
            "volumes": [{"name": f"v{i}", "hostPath": {"path": host}} for i, host in enumerate(volumes or {})],
        },
    }  # fmt: skip
    created = _kubectl(lab.state, "apply", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr

    def done() -> tuple[bool, str]:
        r = _kubectl(lab.state, "get", "pod", name, "-o", "jsonpath={.status.phase}")
        return r.stdout in ("Succeeded", "Failed"), r.stdout + r.stderr

    ok, phase = _wait(done, 120)
    assert ok, f"pod {name} did not finish: {phase}"

    # containerd copies a container's output into its log file as the process writes it: the copy of the last
    # lines may land just after the kubelet has seen the container exit (CI at 0c891ee read an empty log once)
    def logged() -> tuple[bool, str]:
        r = _kubectl(lab.state, "logs", name)
        return r.returncode == 0 and r.stdout.strip() != "", r.stdout if r.returncode == 0 else r.stderr

    ok, log = _wait(logged, 30)
    status = "" if ok else _kubectl(lab.state, "get", "pod", name, "-o", "jsonpath={.status}").stdout
    assert ok, f"pod {name} ended {phase} and logged nothing: {log} {status}"
    return log


def test_a_container_sees_only_the_host_files_its_spec_mounts(
    deployed: tuple[Lab, PyinfraRun, PyinfraRun],
) -> None:
    """The host's kubelet.conf (its credentials) is not in a pod that does not mount it, and is in one that does."""
    lab, _, _ = deployed
    assert lab.ssh(NODE, "test -f /etc/kubernetes/kubelet.conf && echo there").stdout.strip() == "there"
    look = "test -e {path} && echo visible || echo absent"
    alone = _run_pod(lab, "real-no-mount", look.format(path="/etc/kubernetes/kubelet.conf"))
    assert alone.strip() == "absent", alone
    mounted = _run_pod(
        lab, "real-mount", look.format(path="/host-etc/kubelet.conf"), {"/etc/kubernetes": "/host-etc"}
    )
    assert mounted.strip() == "visible", mounted


def test_a_pod_whose_image_the_lab_lacks_gets_err_image_pull(
    deployed: tuple[Lab, PyinfraRun, PyinfraRun],
) -> None:
    lab, _, _ = deployed
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "real-missing-image", "namespace": "default"},
           "spec": {"nodeName": NODE, "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "c", "image": "registry.example.com/gpuready/not-in-the-lab:1.0"}]}}  # fmt: skip
    created = _kubectl(lab.state, "apply", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr

    def waiting() -> tuple[bool, str]:
        r = _kubectl(lab.state, "get", "pod", "real-missing-image", "-o",
                     "jsonpath={.status.containerStatuses[0].state.waiting.reason}")  # fmt: skip
        return r.stdout in ("ErrImagePull", "ImagePullBackOff"), r.stdout + r.stderr

    ok, detail = _wait(waiting, 120)
    assert ok, f"no ErrImagePull: {detail}"
    events = _kubectl(
        lab.state, "get", "events", "--field-selector", "involvedObject.name=real-missing-image"
    )
    assert "not-in-the-lab" in events.stdout and "Failed" in events.stdout, events.stdout


def test_logs_and_exec_go_through_the_real_kubelet(deployed: tuple[Lab, PyinfraRun, PyinfraRun]) -> None:
    """The API server reaches the real kubelet's API (logs, exec), and the container has its own PID namespace."""
    lab, _, _ = deployed
    ok, detail = _wait(lambda: (lambda r: ("real" in r.stdout, r.stdout + r.stderr))(
        _kubectl(lab.state, "logs", "real-busybox")), 60)  # fmt: skip
    assert ok, detail
    execd = _kubectl(lab.state, "exec", "real-busybox", "--", "/bin/busybox", "ps")
    assert execd.returncode == 0, execd.stderr
    assert "systemd" not in execd.stdout and "sleep 3600" in execd.stdout, execd.stdout
    listed = lab.ssh(NODE, "ctr -n k8s.io containers ls -q | wc -l").stdout
    assert int(listed) >= 2, listed  # the pod's sandbox (pause) and its busybox container


def test_the_api_servers_pod_proxy_and_port_forward_reach_a_pod(
    deployed: tuple[Lab, PyinfraRun, PyinfraRun],
) -> None:
    """A pod on the host's CNI bridge serves HTTP: the API server's pod proxy and `kubectl port-forward` (the real
    kubelet's streaming server, containerd's port forwarding) both reach it."""
    lab, _, _ = deployed
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "real-httpd", "namespace": "default"},
           "spec": {"nodeName": NODE, "tolerations": [{"operator": "Exists"}], "containers": [{
               "name": "httpd", "image": realhost.BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
               "command": ["/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /www && echo served-by-real-httpd > "
                           "/www/index.html; trap 'exit 0' TERM; /bin/busybox httpd -f -p 8080 -h /www & wait"]}]}}  # fmt: skip
    created = _kubectl(lab.state, "apply", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr

    def proxied() -> tuple[bool, str]:
        r = _kubectl(lab.state, "get", "--raw", "/api/v1/namespaces/default/pods/real-httpd:8080/proxy/")
        return "served-by-real-httpd" in r.stdout, r.stdout + r.stderr

    ok, detail = _wait(proxied, 120)
    assert ok, f"the API server's pod proxy did not reach the pod: {detail}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    forward = subprocess.Popen(
        [str(k8s_packages.kubectl_binary()), f"--kubeconfig={lab.state['apiserver']['kubeconfig']}",
         "port-forward", "pod/real-httpd", f"{port}:8080"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert forward.stdout is not None
        first = forward.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080" once it listens
        assert "Forwarding from" in first, first
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as answer:
            assert "served-by-real-httpd" in answer.read().decode()
    finally:
        forward.terminate()
        forward.wait(timeout=30)
