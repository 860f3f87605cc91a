"""An MPS pool on a real-kubelet lab host, through NVIDIA's real device plugin and MPS control daemon (issue #29).

Its own one-host lab (trixie: containerd 1.7, CDI mode; the L40S profile: 2 GPUs, shared by MPS with 2 clients
each through GPUREADY_LAB_MPS=l40s-2; subnet 10.236.0.0/16, host number 236) on the real kubelet.
After gpuready's node and add-ons deploys, NVIDIA's GFD (real) labels the node ``nvidia.com/mps.capable=true``
through NFD, gpuready's MPS control daemon DaemonSet runs NVIDIA's ``mps-control-daemon`` (the image the lab builds
from k8s-device-plugin v0.19.3) there: it mounts the clients' shm, sets each GPU to EXCLUSIVE_PROCESS with
``nvidia-smi -c`` and starts ``nvidia-cuda-mps-control -d`` (the lab's static tool, injected by the real CDI spec as
NVIDIA's is). The device plugin checks the daemon before it registers 4 replicas. The suite then passes every
layer, its gpu layer reading the compute mode the daemon set; without the daemon the node fails it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Lab, deployed_real_kubelet_lab
from polling import wait_for
from suite_runs import failed, run_suite, wait_until_settled
from test_lab_real_kubelet import _kubectl

from gpuready.deploy import addons

pytestmark = pytest.mark.lab

INDEX = 236
NODE = f"gpu-node-{INDEX}"
PROFILE = "l40s-2"
NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
MPS_ENV = {"GPUREADY_LAB_MPS": PROFILE}
RESOURCE_DIR = f"{addons.MPS_ROOT}/nvidia.com/gpu"  # the daemon's per-resource pipe and log directories


@pytest.fixture(scope="module")
def mps_lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with deployed_real_kubelet_lab(
        tmp_path_factory, "lab-real-mps", INDEX, "trixie", PROFILE, MPS_ENV
    ) as lab:
        yield lab


def _daemon_pod(lab: Lab) -> dict[str, Any]:
    r = _kubectl(
        lab.state, "get", "pods", "-n", NAMESPACE, "--field-selector", f"spec.nodeName={NODE}", "-o", "json"
    )
    pods = json.loads(r.stdout).get("items", []) if r.returncode == 0 else []
    found = [p for p in pods if p["metadata"]["name"].startswith(addons.MPS_CONTROL_DAEMON)]
    return found[0] if found else {}


def _diagnose(lab: Lab) -> str:
    pod = _daemon_pod(lab)
    name = pod.get("metadata", {}).get("name", "")
    logs = _kubectl(lab.state, "logs", "-n", NAMESPACE, name, "--all-containers", "--prefix", "--tail=40")
    labels = _kubectl(lab.state, "get", "node", NODE, "-o", "jsonpath={.metadata.labels}")
    journal = lab.ssh(NODE, "journalctl -u kubelet --no-pager -o cat | tail -30", check=False)
    return (
        f"pod: {json.dumps(pod.get('status', {}))[-2000:]}\n--- logs\n{logs.stdout}{logs.stderr}\n"
        f"--- node labels\n{labels.stdout}\n--- kubelet\n{journal.stdout}"
    )


def _compute_modes(lab: Lab) -> list[str]:
    return lab.ssh(NODE, "nvidia-smi --query-gpu=compute_mode --format=csv,noheader").stdout.split()


def _allocatable(lab: Lab) -> str:
    r = _kubectl(lab.state, "get", "node", NODE, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}")
    return r.stdout.strip()


def _sidecar_settled(lab: Lab) -> bool:
    """config-manager's sidecar has applied the node's config label and waits for its next change. Until then the
    daemon can still restart: the sidecar starts before the daemon's container, often exits finding no process to
    signal, and its next run applies ``default`` (the label is read before its informer lists the Node), then the
    label's config, each with a SIGHUP that stops MPS (compute mode back to DEFAULT) and starts it again."""
    name = _daemon_pod(lab).get("metadata", {}).get("name", "")
    logs = _kubectl(lab.state, "logs", "-n", NAMESPACE, name, "-c", "config-manager").stdout
    key = addons.DEVICE_PLUGIN_CONFIG_LABEL.replace(".", "\\.")  # a jsonpath key with dots in it
    label = _kubectl(
        lab.state,
        "get",
        "node",
        NODE,
        "-o",
        f"jsonpath={{.metadata.labels.{key}}}",
    ).stdout.strip()
    detected = f"Label change detected: {addons.DEVICE_PLUGIN_CONFIG_LABEL}={label}"
    return bool(label) and detected in logs and "Waiting for change" in logs.rsplit(detected, 1)[1]


def _threads(lab: Lab) -> str:
    """The default active thread percentage, as a client on the host reads it from the daemon's control pipe."""
    ask = (
        f"printf get_default_active_thread_percentage | CUDA_MPS_PIPE_DIRECTORY={RESOURCE_DIR}/pipe "
        "nvidia-cuda-mps-control"
    )
    return lab.ssh(NODE, ask, check=False).stdout.strip()


def test_nvidias_mps_control_daemon_starts_mps_on_every_gpu(mps_lab: Lab) -> None:
    """Ready, MPS started for nvidia.com/gpu, and the daemon set for 2 clients per GPU (50 % of the SMs each),
    once config-manager's sidecar has settled on the node's config (:func:`_sidecar_settled`: until then MPS may
    stop and start again, and the compute mode reads DEFAULT in between)."""

    def started() -> bool:
        pod = _daemon_pod(mps_lab)
        ready = bool(pod) and all(
            s.get("ready") for s in pod.get("status", {}).get("containerStatuses", [{}])
        )
        marked = mps_lab.ssh(NODE, f"test -e {RESOURCE_DIR}/.started", check=False).returncode == 0
        settled = ready and _sidecar_settled(mps_lab) and marked and _threads(mps_lab) == "50.0"
        return settled and _compute_modes(mps_lab) == ["Exclusive_Process", "Exclusive_Process"]

    try:
        wait_for(
            started,
            300,
            f"the MPS control daemon Ready on {NODE}, MPS started for 2 clients per GPU in EXCLUSIVE_PROCESS mode",
        )
    except AssertionError as exc:
        log = mps_lab.ssh(NODE, f"tail -20 {RESOURCE_DIR}/log/control.log", check=False).stdout
        raise AssertionError(f"{exc}\nthreads: {_threads(mps_lab)!r}\n{log}\n{_diagnose(mps_lab)}") from None
    assert _compute_modes(mps_lab) == ["Exclusive_Process", "Exclusive_Process"]
    log = mps_lab.ssh(NODE, f"cat {RESOURCE_DIR}/log/control.log").stdout
    assert "Cmd:set_default_active_thread_percentage 50" in log, log
    assert "Cmd:set_default_device_pinned_mem_limit" in log, log


def test_the_real_plugin_registers_two_replicas_per_gpu(mps_lab: Lab) -> None:
    wait_for(
        lambda: _allocatable(mps_lab) == "4", 240, f"{NODE}'s allocatable nvidia.com/gpu = 4 (2 GPUs x 2)"
    )


def test_the_whole_suite_passes_on_the_mps_node_and_fails_without_its_daemon(
    mps_lab: Lab, tmp_path: Path
) -> None:
    deployed = SimpleNamespace(lab=mps_lab)
    wait_until_settled(deployed)
    verdict = run_suite(deployed, tmp_path / "healthy")
    assert failed(verdict) == {}, json.dumps(verdict["nodes"], indent=1)[-6000:]
    statuses = {c: r["status"] for layer in verdict["nodes"][NODE]["layers"].values()
                for c, r in layer["checks"].items()}  # fmt: skip
    assert statuses["test_compute_mode"] == "pass"
    # the daemon stopped (its DaemonSet's node selector no longer matches): it quits MPS and sets DEFAULT again
    patch = '{"spec":{"template":{"spec":{"nodeSelector":{"gpuready.io/no-such-label":"true"}}}}}'
    done = _kubectl(
        mps_lab.state, "patch", "daemonset", "-n", NAMESPACE, addons.MPS_CONTROL_DAEMON, "-p", patch
    )
    assert done.returncode == 0, done.stderr
    wait_for(lambda: not _daemon_pod(mps_lab), 180, f"the MPS control daemon pod gone from {NODE}")
    wait_for(lambda: _compute_modes(mps_lab) == ["Default", "Default"], 60, "the GPUs back in DEFAULT mode")
    bad = failed(run_suite(deployed, tmp_path / "no-daemon", "-m", "gpu"))
    assert list(bad) == [NODE] and list(bad[NODE]) == ["gpu/test_compute_mode"], bad
    assert "compute mode Default, expected Exclusive_Process" in bad[NODE]["gpu/test_compute_mode"]
    assert "no MPS control daemon runs MPS on it" in bad[NODE]["gpu/test_compute_mode"]
