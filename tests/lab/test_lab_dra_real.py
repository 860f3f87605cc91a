"""NVIDIA's real DRA driver on a real-kubelet lab host (issue #29 item 1).

Its own one-host lab (trixie: containerd 1.7, CDI mode; the L4 profile: 1 GPU, its pool in DRA mode through
GPUREADY_LAB_DRA=l4-1; subnet 10.233.0.0/16, host number 233) on the real kubelet. After gpuready's
node deploy and add-ons deploy (gpuready's own DRA manifests, gpuready.deploy.dra_addons), the kubelet plugin pod
is a real container of the lab's image ``registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1``
(gpuready.lab.dra_image: NVIDIA's gpu-kubelet-plugin built from the Go module) over the mock NVML; it registers
with the real kubelet's plugin watcher, publishes the node's ResourceSlice (the GPU with the UUID the host's
``nvidia-smi -L`` prints), and a pod with a ResourceClaim for one GPU runs on the real kubelet with the device the
driver's CDI spec injects. The whole suite on a DRA pool through the same driver runs in test_lab_dra.py (the MIG
A100 beside a device-plugin node), not again here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import Lab, deployed_real_kubelet_lab
from polling import wait_for
from test_lab_real_kubelet import _kubectl

from gpuready.deploy import dra_addons
from gpuready.lab import dra_image

pytestmark = pytest.mark.lab

INDEX = 233
NODE = f"gpu-node-{INDEX}"
NAMESPACE = "gpu-system"  # group_data/all.py: addons_namespace
DRIVER = "gpu.nvidia.com"
DRA_ENV = {"GPUREADY_LAB_DRA": "l4-1"}
CLAIM_POD = "dra-claim-pod"


@pytest.fixture(scope="module")
def dra_lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with deployed_real_kubelet_lab(tmp_path_factory, "lab-real-dra", INDEX, "trixie", env=DRA_ENV) as lab:
        yield lab


def _get(lab: Lab, *args: str) -> Any:
    r = _kubectl(lab.state, "get", *args, "-o", "json")
    return json.loads(r.stdout) if r.returncode == 0 else {}


def _plugin_pod(lab: Lab) -> dict[str, Any]:
    pods = _get(lab, "pods", "-n", NAMESPACE, "--field-selector", f"spec.nodeName={NODE}")
    found = [p for p in pods.get("items", []) if p["metadata"]["name"].startswith(dra_addons.KUBELET_PLUGIN)]
    return found[0] if found else {}


def _diagnose(lab: Lab, pod: dict[str, Any], container: str = "") -> str:
    name = pod.get("metadata", {}).get("name", "")
    namespace = pod.get("metadata", {}).get("namespace", NAMESPACE)
    logs = _kubectl(lab.state, "logs", "-n", namespace, name, "--all-containers", "--prefix", "--tail=40")
    previous = _kubectl(lab.state, "logs", "-n", namespace, name, "--all-containers", "-p", "--tail=30")
    journal = lab.ssh(NODE, "journalctl -u kubelet -u containerd --no-pager -o cat | tail -40", check=False)
    status = json.dumps(pod.get("status", {}))[-2500:]
    return (
        f"{status}\n--- logs\n{logs.stdout}{logs.stderr}\n--- previous\n{previous.stdout}{previous.stderr}\n"
        f"--- journal\n{journal.stdout}"
    )


def _slice_devices(lab: Lab) -> list[dict[str, Any]]:
    slices = _get(lab, "resourceslices", "--field-selector", f"spec.nodeName={NODE}")
    return [
        device
        for s in slices.get("items", [])
        if s["spec"]["driver"] == DRIVER
        for device in s["spec"].get("devices") or []
    ]


def _host_uuids(lab: Lab) -> list[str]:
    return re.findall(r"\(UUID: (GPU-[0-9a-f-]+)\)", lab.ssh(NODE, "nvidia-smi -L").stdout)


def test_the_kubelet_plugin_runs_nvidias_binary_and_registers_with_the_real_kubelet(dra_lab: Lab) -> None:
    def registered() -> bool:
        """Ready, its registration socket in the kubelet's plugin watcher directory, its DRA socket beside."""
        pod = _plugin_pod(dra_lab)
        ready = all(s.get("ready") for s in pod.get("status", {}).get("containerStatuses", [{}]))
        listing = f"ls /var/lib/kubelet/plugins_registry/ /var/lib/kubelet/plugins/{DRIVER}/"
        sockets = dra_lab.ssh(NODE, listing, check=False).stdout.split()
        return ready and {f"{DRIVER}-reg.sock", "dra.sock"} <= set(sockets)

    try:
        wait_for(registered, 240, "the DRA kubelet plugin ready and registered")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(dra_lab, _plugin_pod(dra_lab))}") from None
    pod = _plugin_pod(dra_lab)
    assert {c["image"] for c in pod["spec"]["containers"]} == {dra_image.image_name()}
    listed = json.loads(dra_lab.ssh(NODE, "crictl ps --name gpus -o json").stdout)["containers"]
    assert [c["state"] for c in listed] == ["CONTAINER_RUNNING"], listed
    version = dra_lab.ssh(NODE, f"crictl exec {listed[0]['id']} gpu-kubelet-plugin --version", check=False)
    assert f"v{dra_image.DEFAULT_VERSION}" in version.stdout + version.stderr, version
    # the kubelet dialled the plugin it registered (its health stream: v0.4.1 serves none without the
    # NVMLDeviceHealthCheck gate, so the kubelet logs that it is unimplemented; harmless, and proof of the link)
    # (the plugin watcher finds the socket, then registers and logs it: the line can follow the socket by a moment;
    # session 30's second CI read the journal before it)
    handler = re.compile(rf'DRA registration handler.*pluginName="{re.escape(DRIVER)}"')

    def journal() -> str:
        return dra_lab.ssh(NODE, "journalctl -u kubelet --no-pager -o cat", check=False).stdout

    try:
        wait_for(lambda: handler.search(journal()), 60, "the kubelet's DRA registration handler line")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{journal()[-3000:]}") from None


def test_the_real_driver_publishes_the_machines_gpu_with_its_uuid(dra_lab: Lab) -> None:
    devices = wait_for(lambda: _slice_devices(dra_lab), 120, f"a ResourceSlice of {DRIVER} for {NODE}")
    uuids = _host_uuids(dra_lab)
    assert len(uuids) == 1, uuids  # the l4-1 profile
    gpus = [d for d in devices if d["attributes"]["type"]["string"] == "gpu"]
    assert [d["attributes"]["uuid"]["string"] for d in gpus] == uuids, devices
    assert gpus[0]["attributes"]["productName"]["string"].startswith("NVIDIA L4"), gpus[0]


CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: %(pod)s, namespace: default}
spec:
  restartPolicy: Never
  tolerations: [{operator: Exists}]
  nodeSelector: {kubernetes.io/hostname: %(node)s}
  resourceClaims: [{name: gpu, resourceClaimName: one-gpu}]
  containers:
  - name: main
    image: docker.io/library/busybox:1.36-lab
    imagePullPolicy: IfNotPresent
    # a shell that ends on SIGTERM: `sleep` as PID 1 ignores it and holds the host's shutdown for systemd's timeout
    command: [sh, -c, "ls -l /dev/nvidia0 /dev/nvidiactl; env | grep -i nvidia; trap 'exit 0' TERM; sleep 3600 & wait"]
    resources: {claims: [{name: gpu}]}
"""


def test_a_pod_with_a_claim_for_one_gpu_runs_and_sees_its_device(dra_lab: Lab) -> None:
    applied = _kubectl(dra_lab.state, "apply", "-f", "-", stdin=CLAIM % {"pod": CLAIM_POD, "node": NODE})
    assert applied.returncode == 0, applied.stderr

    def running() -> bool:
        phase = _get(dra_lab, "pod", "-n", "default", CLAIM_POD).get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise AssertionError(f"{CLAIM_POD} {phase}")
        return phase == "Running"

    try:
        wait_for(running, 180, f"{CLAIM_POD} running")
    except AssertionError as exc:
        pod = _get(dra_lab, "pod", "-n", "default", CLAIM_POD)
        plugin = _diagnose(dra_lab, _plugin_pod(dra_lab))
        raise AssertionError(f"{exc}\n{_diagnose(dra_lab, pod)}\n--- plugin\n{plugin}") from None
    claim = _get(dra_lab, "resourceclaim", "-n", "default", "one-gpu")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"]) for r in results] == [(DRIVER, NODE)], results
    device = next(d for d in _slice_devices(dra_lab) if d["name"] == results[0]["device"])
    assert [device["attributes"]["uuid"]["string"]] == _host_uuids(dra_lab)
    # the device nodes come from the driver's CDI spec for this claim (the pod names no runtime class)
    seen = wait_for(
        lambda: (lambda r: r.stdout if "/dev/nvidia0" in r.stdout else "")(
            _kubectl(dra_lab.state, "logs", "-n", "default", CLAIM_POD)
        ),
        60,
        "the pod's listing of its device nodes",
    )
    assert re.search(r"^c.* 195,\s+0 .*/dev/nvidia0$", seen, re.M), seen
    # the kubelet asked the registered plugin to prepare the claim: its CDI spec for the claim, named by its UID
    uid = claim["metadata"]["uid"]
    specs = dra_lab.ssh(NODE, "ls /var/run/cdi/").stdout.split()
    assert f"k8s.{DRIVER}-claim_{uid}.yaml" in specs, specs
    libraries = _kubectl(
        dra_lab.state, "exec", "-n", "default", CLAIM_POD, "--", "sh", "-c", "ls /usr/lib/x86_64-linux-gnu"
    )
    assert "libnvidia-ml.so.1" in libraries.stdout.split(), libraries.stdout + libraries.stderr
    # the driver's own nvidia-smi from the claim's CDI spec (an ELF, as NVIDIA's) runs in the busybox pod and
    # lists the claimed GPU alone
    listed = _kubectl(dra_lab.state, "exec", "-n", "default", CLAIM_POD, "--", "/usr/bin/nvidia-smi", "-L")
    uuids = re.findall(r"\(UUID: (GPU-[0-9a-f-]+)\)", listed.stdout)
    spec = dra_lab.ssh(NODE, f"cat /var/run/cdi/k8s.{DRIVER}-claim_{uid}.yaml", check=False).stdout
    assert uuids == [device["attributes"]["uuid"]["string"]], (
        f"{listed.stdout}{listed.stderr}--- claim spec\n{spec}"
    )


def test_the_compute_mode_the_driver_sets_at_unprepare_reaches_the_machine(dra_lab: Lab) -> None:
    """NVIDIA's driver (TimeSlicingSettings on) sets each GPU of a claim it unprepares back to compute mode DEFAULT
    (v0.4.1 device_state.go unprepareDevices -> SetTimeSlice -> `nvidia-smi -i UUID -c DEFAULT`), chrooted into the
    host root its pod mounts read-only. On a real node that reaches the GPU through /dev/nvidiactl; the lab's runc
    wrapper gives that view the driver state read-write, so the host's nvidia-smi must show it. (Before that, the
    setting changed nothing and said it had: the GPU stayed PROHIBITED.) After the claim pod above."""
    uuid = _host_uuids(dra_lab)[0]
    query = f"nvidia-smi -i {uuid} --query-gpu=compute_mode --format=csv,noheader"
    dra_lab.ssh(NODE, f"nvidia-smi -i {uuid} -c PROHIBITED")
    assert dra_lab.ssh(NODE, query).stdout.strip() == "Prohibited"
    claim = _get(dra_lab, "resourceclaim", "-n", "default", "one-gpu")
    spec = f"/var/run/cdi/k8s.{DRIVER}-claim_{claim['metadata']['uid']}.yaml"
    deleted = _kubectl(
        dra_lab.state, "delete", "-n", "default", f"pod/{CLAIM_POD}", "resourceclaim/one-gpu", "--wait=true"
    )
    assert deleted.returncode == 0, deleted.stderr
    # the kubelet has the driver unprepare the claim when its pod is gone: the claim's CDI spec goes with it
    wait_for(
        lambda: dra_lab.ssh(NODE, f"test -e {spec}", check=False).returncode != 0,
        120,
        f"the driver to unprepare the claim ({spec} removed)",
    )
    mode = dra_lab.ssh(NODE, query).stdout.strip()
    assert mode == "Default", f"{mode}\n--- plugin\n{_diagnose(dra_lab, _plugin_pod(dra_lab))}"
