"""The node and add-on deploys on real lab hosts, with the real pyinfra CLI: converge, re-run with no change,
upgrade exactly the driver, keep the join secret out of output and process lists, survive an unreachable host."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from pyinfra_runs import REPO, run_pyinfra

from gpuready.lab import network
from gpuready.lab.packages import driver_debs
from gpuready.nvidia import smi
from gpuready.nvidia.containerd_config import nvidia_runtime_of
from gpuready.spec import load_fleet

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def core(deployed_lab):
    kubeconfig = deployed_lab.lab.state["apiserver"]["kubeconfig"]
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


@pytest.fixture(scope="module")
def fleet(deployed_lab, monkeypatch_module):
    monkeypatch_module.setenv("GPUREADY_LAB_DIR", str(deployed_lab.lab.paths.root))
    return load_fleet(REPO / "inventory" / "lab.py")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_first_run_converges_every_node(deployed_lab):
    success, errors, _ = deployed_lab.first.total
    assert errors == 0 and success > 0, deployed_lab.first.output[-3000:]


def test_second_run_changes_nothing(deployed_lab):
    assert deployed_lab.second.returncode == 0
    success, errors, unchanged = deployed_lab.second.total
    assert (success, errors) == (0, 0), deployed_lab.second.changed_operations()
    assert unchanged == deployed_lab.first.total[0] + deployed_lab.first.total[2]


def test_no_change_run_reads_each_host_in_one_round_trip(deployed_lab, fleet):
    """Every fact the node deploy decides on comes from one batched command per host while nothing changes."""
    output = deployed_lab.second.output
    for name in fleet.nodes:
        commands = re.findall(rf"^\s*\[{re.escape(name)}\] >>> (.*)$", output, flags=re.M)
        assert len(commands) == 1, f"{name}: {len(commands)} commands in a no-change run:\n" + "\n".join(
            c[:160] for c in commands
        )


def test_addons_second_run_changes_nothing(deployed_lab):
    assert deployed_lab.addons_first.total[0] > 0
    assert deployed_lab.addons_second.total[:2] == (0, 0), deployed_lab.addons_second.changed_operations()


def test_real_containerd_runs_with_the_nvidia_handler_and_runc_options(deployed_lab):
    for node in deployed_lab.lab.state["hosts"]:
        dump = deployed_lab.lab.ssh(node, "containerd config dump").stdout
        nvidia = nvidia_runtime_of(dump)
        assert nvidia is not None, f"{node}: no nvidia runtime in containerd config dump"
        assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
        assert nvidia["options"]["SystemdCgroup"] is True
        assert nvidia_runtime_of(dump, "runc")["options"]["SystemdCgroup"] is True
        assert deployed_lab.lab.ssh(node, "systemctl is-active containerd").stdout.strip() == "active"


def test_driver_installed_pinned_and_held(deployed_lab, fleet):
    for name, node in fleet.nodes.items():
        report = smi.parse_query_xml(deployed_lab.lab.ssh(name, "nvidia-smi -q -x").stdout)
        assert report.driver_version == node.versions.driver
        assert len(report.gpus) == node.gpu_count
        held = set(deployed_lab.lab.ssh(name, "apt-mark showhold").stdout.split())
        assert {"nvidia-driver", "nvidia-container-toolkit", "kubelet", "kubeadm"} <= held
        if node.nvswitch:
            assert (
                deployed_lab.lab.ssh(name, "systemctl is-active nvidia-fabricmanager").stdout.strip()
                == "active"
            )


def test_nodes_registered_with_their_labels_and_taints(deployed_lab, fleet, core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for name, spec in fleet.nodes.items():
        node = nodes[name]
        for key, value in spec.node_labels.items():
            assert node.metadata.labels.get(key) == value, (name, key)
        taints = {(t.key, t.value, t.effect) for t in node.spec.taints or []}
        assert {(t.key, t.value or None, t.effect) for t in spec.taints} <= taints
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True", (name, ready.message)


def test_mig_layout_is_the_specs(deployed_lab, fleet):
    for name, spec in fleet.nodes.items():
        if spec.sharing.mode != "mig":
            continue
        listed = smi.parse_list(deployed_lab.lab.ssh(name, "nvidia-smi -L").stdout)
        for gpu, layout in zip(listed, spec.sharing.mig_layout, strict=True):
            assert sorted(m.profile for m in gpu.mig_devices) == sorted(layout or ())


def _changed_steps(run) -> set[str]:
    return {op.rsplit(" | ", 1)[-1] for op in run.changed_operations()}


def driver_package_versions(lab, node: str) -> set[str]:
    """The versions of every installed package the lab's CUDA repository builds for a driver (all must agree)."""
    names = sorted(
        {
            deb.name
            for deb in driver_debs(
                "580.178.04",
                {"nvml": Path("/dev/null"), "cuda": Path("/dev/null"), "tools": Path("/dev/null")},
            )
        }
    )
    query = "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' " + " ".join(names)
    out = lab.ssh(node, query, check=False).stdout  # exits 1 for the names dpkg never saw (Fabric Manager)
    # status "ii" or "hi" (held): installed
    installed = [
        line.split() for line in out.splitlines() if len(line.split()) > 2 and line.split()[2][1:2] == "i"
    ]
    assert {name for name, *_ in installed} >= {"nvidia-driver", "libnvidia-ml1", "libcuda1", "nvidia-smi"}, (
        out
    )
    return {version for _, version, *_ in installed}


def test_driver_version_change_upgrades_exactly_the_driver(deployed_lab):
    lab, node = deployed_lab.lab, "gpu-node-3"
    old = "nvidia_driver_version=580.178.04"
    try:
        run = run_pyinfra(lab, "--limit", node, "--data", "nvidia_driver_version=570.195.03",
                          "--data", "nvidia_driver_branch=570")  # fmt: skip
        assert run.returncode == 0, run.output[-3000:]
        assert "reboot the node (drained) to load it" in run.output
        # only driver steps change: pin, lists, install (and re-holding the new packages)
        changed = _changed_steps(run)
        assert changed == {
            "Pin the NVIDIA driver version",
            # one refresh of the lists, for the repositories of the whole deploy: the new pins are missing
            "Refresh the apt lists for cuda, nvidia-container-toolkit, kubernetes",
            "Install and hold NVIDIA driver 570.195.03",
        }
        assert driver_package_versions(lab, node) == {"570.195.03-1"}
        assert "nvidia-driver" in lab.ssh(node, "apt-mark showhold").stdout.split()
    finally:
        back = run_pyinfra(lab, "--limit", node)
        assert back.returncode == 0, back.output[-3000:]
        assert driver_package_versions(lab, node) == {"580.178.04-1"}, old
        # the loaded (emulated) module never changed: the 580 userspace matches it again
        lab.ssh(node, "systemctl restart nvidia-persistenced")
        # While 570's userspace sat on the loaded 580 module (the reboot the deploy asked for never came), the
        # toolkit's refresh service (NVIDIA's unit: Restart=on-failure, 5 starts in 10 s) failed on the mismatch
        # and its .path unit with it, as on a real node: clear that, as the reboot would have.
        lab.ssh(node, "systemctl reset-failed nvidia-cdi-refresh.service nvidia-cdi-refresh.path; "
                      "systemctl start nvidia-cdi-refresh.path nvidia-cdi-refresh.service")  # fmt: skip
        assert lab.ssh(node, "systemctl is-system-running --wait", check=False).stdout.strip() == "running"


def test_join_secret_is_in_no_output_and_no_process_list(deployed_lab, core):
    lab, node = deployed_lab.lab, "gpu-node-3"
    token = Path(lab.state["apiserver"]["join_token_file"]).read_text().strip()
    lab.ssh(node, "kubeadm reset -f >/dev/null 2>&1; systemctl stop kubelet || true")
    core.delete_node(node)  # what an admin does after `kubeadm reset`, so the node can join again
    seen: list[str] = []
    stop = threading.Event()

    def watch_ps() -> None:
        while not stop.is_set():
            seen.append(lab.ssh(node, "ps -eo args", check=False).stdout)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_ps)
    watcher.start()
    try:
        run = run_pyinfra(lab, "-vvv", "--limit", node)
    finally:
        stop.set()
        watcher.join()
    assert run.returncode == 0, run.output[-3000:]
    assert "kubeadm join" in " ".join(_changed_steps(run))
    assert len(seen) > 3
    assert token not in run.output
    assert token.split(".")[1] not in run.output
    assert not any(token in snapshot for snapshot in seen)
    assert lab.ssh(node, "test -e /etc/kubernetes/gpuready/join.yaml || echo gone").stdout.strip() == "gone"


def test_an_unreachable_host_fails_alone(deployed_lab, tmp_path):
    """A host address in the lab's subnet that no host holds: routed to the lab, answered by nobody."""
    ghost = network.LabNetwork.from_state(deployed_lab.lab.state["network"]).host_address(250)
    (tmp_path / "group_data").mkdir()
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    (tmp_path / "inv.py").write_text(
        f"exec(open({str(REPO / 'inventory' / 'lab.py')!r}).read())\n"
        f"gpu_nodes[0].append(('ghost-node', {{**gpu_nodes[0][0][1], 'ssh_hostname': {ghost!r},"
        " 'ssh_connect_retries': 0}))\n"
    )
    run = run_pyinfra(deployed_lab.lab, inventory=str(tmp_path / "inv.py"))
    assert run.returncode != 0
    assert "ghost-node" in run.output and "Could not connect" in run.output
    assert run.total[1] == 0  # the hosts that answered ran every operation without error
    for node in deployed_lab.lab.state["hosts"]:
        assert f"[{node}] Connected" in run.output


def test_sharing_change_updates_only_the_configmap_and_the_label(deployed_lab, core):
    lab = deployed_lab.lab
    try:
        run = run_pyinfra(
            lab, "--limit", "gpu-node-3", "--data", "sharing_replicas=8", deploy="deploys/cluster_addons.py"
        )
        assert run.returncode == 0, run.output[-3000:]
        assert run.changed_operations() == {
            "Apply ConfigMap gpu-system/nvidia-device-plugin-configs",
            "Label the node with its device-plugin config",
        }
        node = core.read_node("gpu-node-3")
        # the L4 host runs bookworm: runtime-class mode, whose configs hand devices over by envvar
        key = "time-slicing-8" + ("-envvar" if lab.state["hosts"]["gpu-node-3"]["os"] == "bookworm" else "")
        assert node.metadata.labels["nvidia.com/device-plugin.config"] == key
        cm = core.read_namespaced_config_map("nvidia-device-plugin-configs", "gpu-system")
        assert "replicas: 8" in cm.data[key]
    finally:
        back = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
        assert back.returncode == 0, back.output[-3000:]


def test_real_kubectl_shows_the_specs_allocatable_and_gfd_labels(deployed_lab, fleet):
    """After both deploys, `kubectl get nodes -o json` (the real binary) shows every node as its spec says."""
    kubeconfig = deployed_lab.lab.state["apiserver"]["kubeconfig"]
    kubectl = REPO / ".venv" / "bin" / "kubectl"
    deadline = time.monotonic() + 60
    while True:  # the device plugin and GFD pods start after the add-ons deploy returns
        out = subprocess.run(
            [str(kubectl), "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        nodes = {n["metadata"]["name"]: n for n in json.loads(out)["items"]}
        problems = []
        for name, spec in fleet.nodes.items():
            allocatable = {
                k: int(v)
                for k, v in nodes[name]["status"]["allocatable"].items()
                if k.startswith("nvidia.com/") and v != "0"
            }
            if allocatable != spec.expected_allocatable:
                problems.append(f"{name}: allocatable {allocatable} != {spec.expected_allocatable}")
            labels = nodes[name]["metadata"]["labels"]
            missing = {k: v for k, v in spec.expected_labels.items() if labels.get(k) != v}
            if missing:
                problems.append(f"{name}: labels differ from {missing}")
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not problems, problems


def test_objects_no_longer_rendered_are_pruned_only_when_asked(deployed_lab, core):
    lab = deployed_lab.lab
    stale = {
        "metadata": {
            "name": "gpuready-stale-pool",
            "namespace": "gpu-system",
            "labels": {"app.kubernetes.io/managed-by": "gpuready"},
        },
        "data": {"k": "v"},
    }
    core.create_namespaced_config_map("gpu-system", stale)
    kept = run_pyinfra(lab, "-v", deploy="deploys/cluster_addons.py")
    assert kept.returncode == 0 and kept.total[0] == 0, kept.output[-3000:]
    assert "not pruning ConfigMap gpu-system/gpuready-stale-pool (set addons_prune = True)" in kept.output
    assert core.read_namespaced_config_map("gpuready-stale-pool", "gpu-system")
    pruned = run_pyinfra(lab, "--data", "addons_prune=True", deploy="deploys/cluster_addons.py")
    assert pruned.changed_operations() == {"Prune objects the spec no longer renders"}
    names = [c.metadata.name for c in core.list_namespaced_config_map("gpu-system").items]
    assert "gpuready-stale-pool" not in names and "nvidia-device-plugin-configs" in names


def test_a_field_another_manager_changed_stops_the_addons_deploy_until_taken_over(deployed_lab, core):
    """Server-side apply against the real API server: a field someone changed with another field manager is a
    conflict; the deploy names the object, the field and that manager and changes nothing, unless told to take
    the field over (addons_take_ownership), which restores gpuready's value."""
    lab = deployed_lab.lab
    apps = client.AppsV1Api(core.api_client)
    ours = apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", "gpu-system")
    image = ours.spec.template.spec.containers[0].image
    container = ours.spec.template.spec.containers[0].name
    edited = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": container, "image": "registry.example/dcgm-exporter:edited"}]
                }
            }
        },
    }
    apps.patch_namespaced_daemon_set(
        "nvidia-dcgm-exporter",
        "gpu-system",
        edited,
        field_manager="someone-else",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    try:
        stopped = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
        assert stopped.returncode != 0, stopped.output[-3000:]
        assert "DaemonSet gpu-system/nvidia-dcgm-exporter: another field manager changed" in stopped.output
        assert '"someone-else"' in stopped.output and ".image" in stopped.output
        assert "addons_take_ownership = True" in stopped.output
        live = apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", "gpu-system")
        assert live.spec.template.spec.containers[0].image == "registry.example/dcgm-exporter:edited"
    finally:
        taken = run_pyinfra(lab, "--data", "addons_take_ownership=True", deploy="deploys/cluster_addons.py")
    assert taken.returncode == 0, taken.output[-3000:]
    live = apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", "gpu-system")
    assert live.spec.template.spec.containers[0].image == image


def test_addon_service_accounts_can_do_what_their_roles_grant_and_nothing_else(deployed_lab):
    """Real RBAC: the device plugin's ServiceAccount reads nodes (its ClusterRole) and nothing more; dcgm-exporter's
    pods run with no API rights at all (it reads the kubelet's pod-resources socket, not the API)."""
    kubeconfig = deployed_lab.lab.state["apiserver"]["kubeconfig"]
    kubectl = REPO / ".venv" / "bin" / "kubectl"

    def can(who: str, *what: str) -> bool:
        out = subprocess.run([str(kubectl), "--kubeconfig", kubeconfig, "auth", "can-i", *what,
                              f"--as=system:serviceaccount:gpu-system:{who}"], capture_output=True, text=True)  # fmt: skip
        assert out.stdout.strip() in ("yes", "no"), out.stdout + out.stderr
        return out.stdout.strip() == "yes"

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    dcgm_pods = core.list_namespaced_pod(
        "gpu-system", label_selector="app.kubernetes.io/name=nvidia-dcgm-exporter"
    )
    dcgm_sa = {p.spec.service_account_name or "default" for p in dcgm_pods.items}
    assert len(dcgm_sa) == 1, dcgm_sa
    granted = [("get", "nodes"), ("list", "nodes"), ("watch", "nodes")]
    refused = [
        ("patch", "nodes"),
        ("delete", "nodes"),
        ("list", "pods"),
        ("create", "pods"),
        ("get", "secrets"),
        ("list", "configmaps"),
        ("create", "pods/eviction"),
        ("update", "nodes/status"),
    ]
    assert [w for w in granted if not can("nvidia-device-plugin", *w)] == []
    assert [w for w in refused if can("nvidia-device-plugin", *w)] == []
    (dcgm,) = dcgm_sa
    assert [w for w in granted + refused if can(dcgm, *w)] == []
