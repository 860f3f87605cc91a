"""``--connection pod`` against the lab's real control plane: the host and gpu layers with no SSH data at all, through
one probe pod per node (gpuready.conformance.probe). The fleet's virtual nodes each have a stand-in host on this
machine (shims.FakeNode: the lab's emulated nvidia-smi and stand-in systemctl, journalctl, containerd and
nvidia-ctk), where the lab's node agent runs a container that looks at its host (gpuready.lab.agent.host_exec);
the real scheduler places the probes, the real API server serves their logs. A healthy fleet passes; a fault on
one stand-in fails that node only; a node with no host behind it fails its connection check saying so; the probe
namespace is the only privileged one, its pods carry no token, and it is gone after a pass, a failure, a timeout,
Ctrl-C and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from kube_fleet import copy_suite, make_fleet
from polling import wait_for
from shims import read_verdict

from gpuready.conformance import workloads as wl

# runtime-class mode: the stand-ins' containerd is 1.6.20 (shims' captured dump), which has no CDI
HOSTS = [
    ("h100-sxm-8", {"nvidia_cdi": False}),
    ("l4-1", {"gpu_sharing": "time-slicing", "sharing_replicas": 4, "nvidia_cdi": False}),
]
# pre-Ampere (page retirement, no row remapping): for the one fault no host of the session lab can carry
T4 = ("t4-1", {"nvidia_cdi": False})
PROBE_PREFIX = wl.NAMESPACE_PREFIX + "probe-"


@pytest.fixture
def suite_dir(pytester):
    return copy_suite(pytester, "test_host.py", "test_gpu.py")


@pytest.fixture
def fleets(lab_cluster, api, virtual_nodes, tmp_path):
    started = []

    def make(stand_ins=True, hosts=HOSTS, **kw):
        fleet = make_fleet(
            lab_cluster,
            api,
            virtual_nodes,
            tmp_path / f"fleet{len(started)}",
            hosts,
            stand_ins=stand_ins,
            dcgm=False,
            **kw,
        )
        started.append(fleet)
        return fleet

    yield make
    for fleet in started:
        fleet.delete()


def args(fleet, report, *more):
    return ("conformance", "--inventory", str(fleet.inventory), "--kubeconfig", str(fleet.kubeconfig),
            "--connection", "pod", "--command-timeout", "20", "--pod-timeout", "60", "--report-dir", str(report),
            "-p", "no:cacheprovider", "-rs", *more)  # fmt: skip


def run(pytester, fleet, *more, **kw):
    report = pytester.path / "report"
    result = pytester.runpytest_inprocess(*args(fleet, report, *more), **kw)
    return result, read_verdict(report)


def failures(verdict):
    return {
        f"{node}:{layer}/{check}": r["message"]
        for node, data in verdict["nodes"].items()
        for layer, checks in data["layers"].items()
        for check, r in checks["checks"].items()
        if r["status"] == "fail"
    }


def statuses(verdict, node):
    return {
        f"{layer}/{check}": r["status"]
        for layer, checks in verdict["nodes"][node]["layers"].items()
        for check, r in checks["checks"].items()
    }


def probe_namespaces(fleet):
    return {n for n in fleet.run_namespaces() if n.startswith(PROBE_PREFIX)}


def assert_cleaned_up(fleet):
    wait_for(lambda: not fleet.run_namespaces() - fleet.runs_before, what="the probe namespace deleted")
    for node in fleet.nodes:
        assert not [p for p in fleet.pods(node=node) if p["metadata"]["namespace"].startswith(PROBE_PREFIX)]


SEEN = """\
import json, pytest
from gpuready.conformance.plugin import SUITE
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if item.name.startswith('test_nvidia_smi_runs') and not __import__('os').path.exists('seen.json'):
        probes = item.session.config.stash[SUITE].probes
        w = probes.workloads
        core, rbac = w.cluster.core, __import__('kubernetes').client.RbacAuthorizationV1Api(w.cluster.api)
        namespaces = {n.metadata.name: n.metadata.labels for n in core.list_namespace().items}
        bindings = [b.metadata.name for b in rbac.list_namespaced_role_binding(w.namespace).items]
        subjects = [s.namespace for b in rbac.list_cluster_role_binding().items for s in b.subjects or []]
        open('seen.json', 'w').write(json.dumps({'namespace': w.namespace, 'labels': namespaces,
            'bindings': bindings, 'cluster_subjects': subjects,
            'pods_left': len(core.list_namespaced_pod(w.namespace).items)}))
def pytest_sessionfinish(session):
    probes = session.config.stash[SUITE].probes
    open('counts.json', 'w').write(json.dumps([probes.runs, probes.pods]))
"""


def test_healthy_fleet_passes_the_host_and_gpu_layers_through_probe_pods(pytester, suite_dir, fleets):
    fleet = fleets()
    (pytester.path / "conftest.py").write_text(SEEN)
    result, verdict = run(pytester, fleet)
    assert failures(verdict) == {}, result.stdout.str()[-3000:]
    assert result.ret == 0
    for node in fleet.nodes:
        got = statuses(verdict, node)
        for check in ("host/test_connection", "host/test_driver_version", "host/test_containerd_nvidia_handler",
                      "host/test_kubelet_active", "gpu/test_gpus_match_spec", "gpu/test_no_xid_errors"):  # fmt: skip
            assert got[check] == "pass", (node, check, got)
        # the commands ran on the node's (stand-in) host, through the probe
        calls = (fleet.stand_ins[node].root / "calls").read_text()
        assert "nvidia-smi -q -x" in calls and "systemctl is-active kubelet" in calls
        assert "journalctl -k -b --no-pager -o cat" in calls
    h100 = next(iter(fleet.nodes))
    assert statuses(verdict, h100)["host/test_fabric_manager_active"] == "pass"
    assert statuses(verdict, h100)["gpu/test_nvlink_up"] == "pass"
    seen = json.loads((pytester.path / "seen.json").read_text())
    # one probe per node for both layers (host, gpu), created at once, deleted when read
    counts = json.loads((pytester.path / "counts.json").read_text())
    assert counts == [1, len(fleet.nodes)], counts
    assert seen["pods_left"] == 0
    labels = seen["labels"]
    assert labels[seen["namespace"]]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels[seen["namespace"]]["app.kubernetes.io/managed-by"] == "gpuready"
    others = [n for n, lab in labels.items() if n.startswith(wl.NAMESPACE_PREFIX) and n != seen["namespace"]]
    assert all(labels[n]["pod-security.kubernetes.io/enforce"] == "restricted" for n in others)
    assert seen["bindings"] == [] and seen["namespace"] not in seen["cluster_subjects"]  # no rights given
    assert_cleaned_up(fleet)


@pytest.mark.parametrize(
    ("fault", "position", "check", "words"),
    [
        ("xid-79", 0, "gpu/test_no_xid_errors", "79"),
        ("fabricmanager-failed", 0, "host/test_fabric_manager_active", "Fabric Manager is failed"),
        ("driver-mismatch", 1, "host/test_no_driver_library_mismatch", "mismatch"),
        ("retired-pages-pending", 2, "gpu/test_no_pending_memory_repairs", "a page retirement is pending"),
    ],
)
def test_a_fault_on_one_host_fails_that_node_only(pytester, suite_dir, fleets, fault, position, check, words):
    fleet = fleets(hosts=[*HOSTS, T4]) if position >= len(HOSTS) else fleets()
    node = list(fleet.nodes)[position]
    stand_in = fleet.stand_ins[node]
    stand_in.inject(fault, 0)
    stand_in.write()
    result, verdict = run(pytester, fleet)
    bad = failures(verdict)
    assert bad and all(key.startswith(f"{node}:") for key in bad), bad
    message = bad[f"{node}:{check}"]
    assert message.startswith(f"{node}: ") and words in message, message
    assert result.ret == 1
    assert_cleaned_up(fleet)


def test_a_node_with_no_host_behind_it_fails_its_connection_saying_so(pytester, suite_dir, fleets):
    fleet = fleets(stand_ins=False)
    result, verdict = run(pytester, fleet, "-m", "host")
    for node in fleet.nodes:
        message = failures(verdict)[f"{node}:host/test_connection"]
        assert message.startswith(
            f"{node}: the probe pod did not answer: pod probe-1-{node}: phase Failed"
        ), message
        assert "exit code 1" in message, message
        assert (
            f"last log lines: gpuready lab: {node} has no running host behind it (a virtual node)" in message
        )
        assert statuses(verdict, node)["host/test_driver_version"] == "skip"
    assert result.ret == 1
    assert_cleaned_up(fleet)


def test_an_unpullable_probe_image_names_the_image(pytester, suite_dir, fleets):
    fleet = fleets()
    image = "registry.example.com:5000/library/debian:trixie-slim"
    _result, verdict = run(pytester, fleet, "-m", "host", "--data", f"probe_image={image}")
    for node in fleet.nodes:
        message = failures(verdict)[f"{node}:host/test_connection"]
        assert "ErrImagePull" in message and image in message, message
    assert_cleaned_up(fleet)


def test_probe_namespace_deleted_after_a_timeout(pytester, suite_dir, fleets):
    fleet = fleets()
    for stand_in in fleet.stand_ins.values():  # the toolkit's CLI hangs: no probe can finish in time
        slow = stand_in.bin / "nvidia-ctk"
        slow.write_text("#!/bin/sh\nsleep 30\n")
        slow.chmod(0o755)
    result, verdict = run(pytester, fleet, "-m", "host", "--pod-timeout", "2")
    for node in fleet.nodes:
        assert "(timed out waiting)" in failures(verdict)[f"{node}:host/test_connection"]
    assert result.ret == 1
    assert_cleaned_up(fleet)


def test_probe_namespace_deleted_after_ctrl_c(pytester, suite_dir, fleets):
    fleet = fleets()
    (pytester.path / "conftest.py").write_text(
        "import pytest\n"
        "from gpuready.conformance.plugin import SUITE\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_call(item):\n"
        "    if item.name.startswith('test_gpus_match_spec'):\n"
        "        open('namespace', 'w').write(item.session.config.stash[SUITE].probes.workloads.namespace)\n"
        "        raise KeyboardInterrupt\n"
    )
    report = pytester.path / "report"
    result = pytester.runpytest_inprocess(*args(fleet, report), no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (pytester.path / "namespace").read_text().startswith(PROBE_PREFIX)
    assert_cleaned_up(fleet)


def test_probe_namespace_deleted_after_sigterm_while_a_probe_runs(pytester, suite_dir, fleets, tmp_path):
    fleet = fleets()
    # the kernel log takes long to read: the probe (the host and gpu layers' commands) hangs on it
    for stand_in in fleet.stand_ins.values():
        slow = stand_in.bin / "journalctl"
        slow.write_text("#!/bin/sh\nsleep 30\n")
        slow.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    report = tmp_path / "report"
    cmd = [sys.executable, "-m", "pytest", *args(fleet, report, "--command-timeout", "5")]
    proc = subprocess.Popen(cmd, cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: any(
                p["metadata"]["namespace"].startswith(PROBE_PREFIX)
                and p["metadata"]["name"].startswith("probe-1-")
                for node in fleet.nodes
                for p in fleet.pods(node=node)
            ),
            what="the probe pods",
        )
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()[-2000:]
    assert_cleaned_up(fleet)
