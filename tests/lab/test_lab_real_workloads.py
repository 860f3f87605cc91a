"""The suite's workloads and metrics layers on a real-kubelet lab host (issues #28/#29: every layer on real kubelets).

On the shared real-kubelet lab (conftest.real_l4_lab: trixie, the L4 profile: 1 GPU, time-sliced 4 ways), with
gpuready's add-ons deployed (dcgm-exporter included). Every real-kubelet host imported the lab's CUDA images at
``lab up`` (:mod:`gpuready.lab.cuda_images`): the vectorAdd sample running gpuready's own driver-API vectorAdd, the
CUDA base image, the emulated dcgm-exporter and the probe image, under the knobs' default names.

* a pod of the vectorAdd image, given the GPU by NVIDIA's real device plugin, runs in a real runc container and
  its vectorAdd goes through the mock ``libcuda.so.1`` the runtime injected (the log names the L4);
* ``gpuready check -m "node or workloads or metrics"`` passes: the exporter pod is ready (node layer), the
  time-sliced pods see the GPU, vectorAdd passes, the exporter is scraped through the API server's pod proxy and a running GPU pod of the run is in its labels (the
  kubelet's pod-resources API, read by the exporter);
* with a driver/library mismatch injected (``hosts.inject_fault(..., "driver-mismatch")``: the mock libcuda's cuInit
  fails as a real one does), ``workloads/test_vector_add`` fails naming the node and the CUDA error; the fault is
  cleared afterwards.

Measured from a clean clone (2 cores, warm caches): 4 passed in 270-310 s (lab up 85 s and both node deploys; add-ons
deploy and settle 19-25 s; the healthy suite 27-41 s, the faulted one 11-33 s). Tried once on the same lab, not
kept as tests: ``-m "host or gpu"`` and ``-m policy`` pass too (the skips: no NVSwitch, vectorAdd on the node
only with --connection local, no node to fill alone for preemption); ``-m diag`` skips all four (no nvbandwidth
or dcgmi on a node deployed without diag_tools).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_NODE, RealLab
from pyinfra_runs import run_pyinfra
from suite_runs import failed, run_suite, wait_until_settled
from test_lab_real_kubelet import _kubectl, _wait

from gpuready.lab import cuda_images, hosts

pytestmark = pytest.mark.lab

NODE = REAL_NODE
LAYERS = ("-m", "node or workloads or metrics")  # node: its test_dcgm_exporter_ready needs the exporter too
TIMINGS: dict[str, float] = {}


def _say(message: str) -> None:
    print(f"[real-workloads] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def workloads_lab(real_l4_lab: RealLab) -> Any:
    started = time.monotonic()
    addons = run_pyinfra(real_l4_lab.lab, deploy="deploys/cluster_addons.py")
    assert addons.returncode == 0, addons.output[-6000:]
    wait_until_settled(real_l4_lab, timeout=300)
    TIMINGS["add-ons deploy and settle"] = time.monotonic() - started
    yield real_l4_lab
    _say(f"timings: {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


def _exporter_pod(lab: RealLab) -> dict[str, Any]:
    r = _kubectl(lab.lab.state, "get", "pods", "-n", "gpu-system", "-l", "app.kubernetes.io/name=nvidia-dcgm-exporter",
                 "-o", "json")  # fmt: skip
    items = json.loads(r.stdout)["items"] if r.returncode == 0 else []
    return items[0] if items else {}


def test_the_vectoradd_image_runs_gpureadys_vectoradd_over_the_mock_libcuda(workloads_lab: RealLab) -> None:
    state = workloads_lab.lab.state
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lab-vectoradd", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": NODE,
            "runtimeClassName": "nvidia",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "vectoradd",
                    "image": cuda_images.VECTORADD_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    created = _kubectl(state, "apply", "-f", "-", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr
    try:

        def done() -> tuple[bool, str]:
            r = _kubectl(state, "get", "pod", "lab-vectoradd", "-o", "jsonpath={.status.phase}")
            return r.stdout in ("Succeeded", "Failed"), r.stdout

        ok, phase = _wait(done, 180)
        logs = _kubectl(state, "logs", "lab-vectoradd").stdout
        described = _kubectl(state, "describe", "pod", "lab-vectoradd").stdout
        assert ok and phase == "Succeeded", f"{phase}\n{logs}\n{described[-3000:]}"
        # gpuready's vectorAdd (one line per CUDA device, the device's name from the mock libcuda)
        assert "CUDA device 0 (NVIDIA L4): vectorAdd of 50000 elements: Test PASSED" in logs, logs
    finally:
        _kubectl(state, "delete", "pod", "lab-vectoradd", "--wait=false")


def test_the_exporter_is_the_labs_emulation_on_the_machine_files(workloads_lab: RealLab) -> None:
    pod = _exporter_pod(workloads_lab)
    name = pod["metadata"]["name"]
    r = _kubectl(workloads_lab.lab.state, "get", "--raw",
                 f"/api/v1/namespaces/gpu-system/pods/{name}:9400/proxy/metrics")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert 'modelName="NVIDIA L4"' in r.stdout and f'Hostname="{name}"' in r.stdout, r.stdout[:2000]
    logs = _kubectl(workloads_lab.lab.state, "logs", "-n", "gpu-system", name).stdout
    assert "emulated dcgm-exporter" in logs and "Kubernetes mapping on" in logs, logs


def test_workloads_and_metrics_pass_on_the_real_kubelet(workloads_lab: RealLab, tmp_path: Path) -> None:
    started = time.monotonic()
    verdict = run_suite(workloads_lab, tmp_path, *LAYERS)
    TIMINGS["suite healthy"] = time.monotonic() - started
    assert failed(verdict) == {}, json.dumps(verdict["nodes"], indent=1)[-6000:]
    layers = verdict["nodes"][NODE]["layers"]
    for layer, check in (("workloads", "test_vector_add"), ("workloads", "test_time_slicing"),
                         ("metrics", "test_series_per_gpu"), ("metrics", "test_running_pod_in_labels")):  # fmt: skip
        assert layers[layer]["checks"][check]["status"] == "pass", layers[layer]["checks"]


def test_a_driver_mismatch_fails_vectoradd_naming_the_node(workloads_lab: RealLab, tmp_path: Path) -> None:
    hosts.inject_fault(workloads_lab.lab.paths, NODE, "driver-mismatch")
    try:
        started = time.monotonic()
        verdict = run_suite(workloads_lab, tmp_path, "-m", "workloads")
        TIMINGS["suite faulted"] = time.monotonic() - started
    finally:
        hosts.inject_fault(workloads_lab.lab.paths, NODE, None)
    bad = failed(verdict)
    assert list(bad) == [NODE], bad
    message = bad[NODE].get("workloads/test_vector_add", "")
    assert message.startswith(f"{NODE}: vectorAdd did not pass") and "DRIVER_MISMATCH" in message, bad[NODE]
    wait_until_settled(workloads_lab, timeout=300)  # the lab as the next module expects it
