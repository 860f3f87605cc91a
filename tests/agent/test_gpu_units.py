"""The agent's GPU rules without a cluster: config selection, devices, GFD labels, containerd merging, scrape, CUDA
images, the lab's host views."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuready.lab.agent.gpu import LabGpuBackend, virtual_hardware
from gpuready.lab.agent.gpu_host import HostView, VirtualGpuView, containerd_runtimes
from gpuready.lab.agent.gpu_images import VECTOR_ADD_OK, Exposure, container_devices, run_with_smi, vector_add
from gpuready.lab.agent.gpu_metrics import dcgm_scrape, hostname_label
from gpuready.lab.agent.gpu_plugin import (
    PluginError,
    gfd_labels,
    parse_config,
    plugin_devices,
    select_config,
)
from gpuready.lab.agent.runtime import ContainerPlan
from gpuready.lab.hardware import make_hardware
from gpuready.nvidia.dcgm import parse_dcgm_metrics

from .conftest import CUDA_BASE, VECTOR_ADD, make_host

PLUGIN = {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"}


def host(profile: str = "l40s-2", faults: list | None = None, mig: dict | None = None):
    hw = make_hardware(profile, 0)
    hw["faults"] = faults or []
    return VirtualGpuView("n", hw, mig_state={"gpus": mig or {}}).snapshot()


def mig_state(hw: dict, layout: dict[int, list[str]]) -> dict:
    out = {}
    for g in hw["gpus"]:
        by_name = {p["name"]: p for p in g["mig_profiles"]}
        gis = [
            {
                "id": i + 1,
                "profile_id": by_name[n]["profile_id"],
                "cis": [{"id": 0, "size": by_name[n]["compute_slices"]}],
            }
            for i, n in enumerate(layout.get(g["index"], []))
        ]
        on = g["index"] in layout
        out[g["uuid"]] = {"mig_current": on, "mig_pending": on, "persistence": False, "gis": gis}
    return out


@pytest.mark.parametrize(
    ("keys", "label", "default", "expected"),
    [
        (["a", "default"], "a", "default", ("a", None)),
        (["a", "default"], "zzz", "default", (None, "specified config zzz does not exist")),
        (["a", "default"], None, None, ("default", None)),  # named fallback
        (["only"], None, None, ("only", None)),  # single fallback
        (
            ["a", "b"],
            None,
            None,
            (None, "no config was set, no default was provided, and all fallbacks failed"),
        ),
    ],
)
def test_config_manager_selection(keys, label, default, expected) -> None:
    assert select_config(keys, label, default, ["named", "single"]) == expected


def test_time_slicing_replicas_rename_and_cli_precedence() -> None:
    text = (
        "version: v1\nflags: {migStrategy: single}\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
        "    resources: [{name: nvidia.com/gpu, replicas: 3}]\n"
    )
    config = parse_config(text, "k", {**PLUGIN, "env": [{"name": "MIG_STRATEGY", "value": "none"}]})
    assert config.mig_strategy == "none"  # env beats the file
    devices = plugin_devices(config, host())
    assert list(devices) == ["nvidia.com/gpu.shared"]
    ids = [d.id for d in devices["nvidia.com/gpu.shared"]]
    uuids = [g["uuid"] for g in make_hardware("l40s-2", 0)["gpus"]]
    assert ids == [f"{u}::{i}" for u in uuids for i in range(3)]
    labels = gfd_labels(config, host(), 1700000000)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"  # renamed: no -SHARED suffix
    assert labels["nvidia.com/gpu.replicas"] == "3" and labels["nvidia.com/gfd.timestamp"] == "1700000000"
    with pytest.raises(PluginError, match="number of replicas must be >= 2"):
        parse_config(
            "sharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 1}]\n", "", PLUGIN
        )
    with pytest.raises(PluginError, match="unknown version: v2"):
        parse_config("version: v2\n", "", PLUGIN)


def test_off_bus_gpu_not_advertised_and_invalid_single_layout() -> None:
    state = host(faults=[{"fault": "off-bus", "gpu": 0}])
    assert [d.gpu.index for d in plugin_devices(parse_config(None, "", PLUGIN), state)["nvidia.com/gpu"]] == [
        1
    ]
    hw = make_hardware("a100-80gb-4", 0)
    mixed_layout = VirtualGpuView(
        "n",
        hw,
        mig_state={"gpus": mig_state(hw, {0: ["1g.10gb"], 1: ["2g.20gb"], 2: ["1g.10gb"], 3: ["1g.10gb"]})},
    )
    single = parse_config("flags: {migStrategy: single}\n", "", PLUGIN)
    with pytest.raises(PluginError, match="More than one MIG device type"):
        plugin_devices(single, mixed_layout.snapshot())
    labels = gfd_labels(single, mixed_layout.snapshot(), 0)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("0", "0")


def test_containerd_drop_in_replaces_cri_table_per_plugin_key(tmp_path) -> None:
    (tmp_path / "etc/containerd/conf.d").mkdir(parents=True)
    (tmp_path / "etc/containerd/config.toml").write_text(
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\nruntime_type = "io.containerd.kata.v2"\n'
    )
    (tmp_path / "etc/containerd/conf.d/99-nvidia.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )
    runtimes, default = containerd_runtimes(tmp_path)
    assert sorted(runtimes) == [
        "nvidia",
        "runc",
    ]  # kata lost: the drop-in's CRI table replaced the main file's
    assert default == "nvidia" and runtimes["nvidia"].nvidia and not runtimes["runc"].nvidia


def finish(plan: ContainerPlan) -> tuple[str, int | None]:
    """(log, exit code) of a container whose command runs in a worker thread (host_exec); None: it runs on."""
    deadline = time.monotonic() + 30
    while not plan.pending.done():
        assert time.monotonic() < deadline, "the command did not finish"
        time.sleep(0.02)
    return plan.pending.result()


def test_vector_add_errors() -> None:
    state = host(faults=[{"fault": "xid-48", "gpu": 1}])
    g0, g1 = state.gpus
    assert vector_add(Exposure(False, []), state).logs.endswith(
        "(error code CUDA driver version is insufficient for CUDA runtime version)!\n"
    )
    assert vector_add(Exposure(True, []), state).exit_code == 1
    assert "uncorrectable ECC error encountered" in vector_add(Exposure(True, [(g1, None)]), state).logs
    assert vector_add(Exposure(True, [(g0, None)]), state).exit_code == 0


def test_a_pods_nvidia_smi_is_the_hosts_seeing_the_containers_devices(tmp_path: Path) -> None:
    """The emulated nvidia-smi of the node (here: a virtual node's, run on this machine) with only the container's
    device nodes: its GPUs numbered from 0, its MIG devices under their parent; none without the driver libraries."""
    hw = make_hardware("a100-80gb-4", 0)
    backend = LabGpuBackend(VirtualGpuView("n", hw, mig_state={"gpus": mig_state(hw, {0: ["1g.10gb"] * 3})}))
    g0, g1, *_ = backend.host().gpus
    mig = g0.mig_devices[1]
    exp = Exposure(True, [(g0, mig), (g1, None)])
    assert container_devices(exp).split(",") == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{3 + mig.gi * 9}",
        f"/dev/nvidia-caps/nvidia-cap{3 + mig.gi * 9 + 1}",
        "/dev/nvidia1",
    ]
    listed = (
        f"GPU 0: {g0.name} (UUID: {g0.uuid})\n  MIG 1g.10gb     Device  0: (UUID: {mig.uuid})\n"
        f"GPU 1: {g1.name} (UUID: {g1.uuid})\n"
    )
    assert finish(run_with_smi(["nvidia-smi", "-L"], {}, exp, backend)) == (listed, 0)
    hold = ["sh", "-c", "echo start; nvidia-smi -L; sleep infinity"]
    assert finish(run_with_smi(hold, {}, exp, backend)) == ("start\n" + listed, None)
    version = ["sh", "-c", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"]
    assert finish(run_with_smi(version, {}, exp, backend)) == ("580.178.04\n" * 2, 0)
    assert finish(run_with_smi(["nvidia-smi", "-L"], {}, Exposure(True, []), backend)) == (
        "No devices were found\n",
        6,
    )
    # a lab host's root that is not running (the tests' fake roots): its own files, through the emulator here
    root, hardware = make_host(tmp_path, "h", "a100-80gb-4", mig={1: ["1g.10gb", "1g.10gb"]})
    fake = LabGpuBackend(HostView("h", root, hardware))
    h1 = fake.host().gpus[1]
    seen = finish(run_with_smi(["nvidia-smi", "-L"], {}, Exposure(True, [(h1, h1.mig_devices[1])]), fake))
    assert seen == (
        f"GPU 0: {h1.name} (UUID: {h1.uuid})\n  MIG 1g.10gb     Device  0: (UUID: {h1.mig_devices[1].uuid})\n",
        0,
    )
    # no driver libraries injected: no nvidia-smi in the container
    shell = run_with_smi(["bash", "-c", "nvidia-smi -L; sleep infinity"], {}, Exposure(False, []), backend)
    assert finish(shell) == ("/bin/bash: line 1: nvidia-smi: command not found\n", 127)
    direct = run_with_smi(["nvidia-smi", "-L"], {}, Exposure(False, []), backend)
    assert (direct.exit_code, direct.reason) == (128, "StartError") and "executable file not found" in (
        direct.message or ""
    )


def test_dcgm_scrape_parses_with_kubernetes_labels() -> None:
    state = host("h100-sxm-8", faults=[{"fault": "xid-79", "gpu": 7}])
    pod = {
        "metadata": {"name": "dcgm-x"},
        "spec": {
            "containers": [{"name": "e", "env": [{"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"}]}]
        },
    }
    owners = {state.gpus[2].uuid: ("ml", "train-0", "worker")}
    samples = parse_dcgm_metrics(
        dcgm_scrape(state, pod, owners, 0.0, "x/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04")
    )
    temp = {s.gpu: s for s in samples if s.metric == "DCGM_FI_DEV_GPU_TEMP"}
    assert sorted(temp) == list(range(7))  # GPU 7 fell off the bus: only its XID remains
    assert (temp[2].pod, temp[2].namespace, temp[2].container) == ("train-0", "ml", "worker")
    assert temp[2].labels["pci_bus_id"] == "00000000:3A:00.0" and temp[3].pod is None
    assert [s.value for s in samples if s.metric == "DCGM_FI_DEV_XID_ERRORS" and s.gpu == 7] == [79.0]
    assert hostname_label("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04") == "Hostname"
    assert hostname_label("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.4-4.9.0-ubuntu22.04") == "hostname"


def test_dcgm_remapped_rows_are_what_nvidia_smi_reports() -> None:
    """DCGM reads NVML's remapped-row counters, as nvidia-smi -q does (nvemu.remapped_rows): an XID 48 double-bit
    error remaps one row on an H100, a pending remap is one more; a GPU without faults has none."""
    faults = [
        {"fault": "xid-48", "gpu": 1},
        {"fault": "xid-48", "gpu": 2},
        {"fault": "row-remap-pending", "gpu": 2},
    ]
    state = host("h100-sxm-8", faults=faults)
    pod = {"metadata": {"name": "dcgm-x"}, "spec": {"containers": [{"name": "e"}]}}
    samples = parse_dcgm_metrics(dcgm_scrape(state, pod, {}, 0.0, "x/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"))
    remapped = {s.gpu: s.value for s in samples if s.metric == "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"}
    assert remapped == {0: 0.0, 1: 1.0, 2: 2.0, **{i: 0.0 for i in range(3, 8)}}


def test_virtual_hardware_matches_virtual_profiles() -> None:
    hw = virtual_hardware("a100-pcie-4", 2)
    assert [g["name"] for g in hw["gpus"]] == ["NVIDIA A100-PCIE-40GB"] * 4
    assert hw["gpus"][0]["memory_mib"] == 40960
    assert virtual_hardware("cpu", 0) is None
    assert len(virtual_hardware("dgx-h100", 0)["gpus"]) == 8


def test_a_host_view_reads_the_hosts_own_files(tmp_path: Path) -> None:
    """A HostView (what the dcgm-exporter image and stand-in hosts read) sees the driver, runtimes and GPUs of the
    root it is given."""
    make_host(tmp_path / "hosts", "gpu-host-a", "l4-1")
    host = tmp_path / "hosts/gpu-host-a"
    state = HostView("gpu-host-a", host / "merged", host / "machine/hardware.json").snapshot()
    assert (state.driver_version, state.default_runtime, state.nvml_error) == ("580.178.04", "runc", None)
    assert state.runtimes["nvidia"].nvidia and [g.uuid for g in state.gpus] == [
        make_hardware("l4-1", 0)["gpus"][0]["uuid"]
    ]


def test_gpu_request_no_plugin_serves_runs_with_the_images_devices() -> None:
    """Capacity a virtual profile registered with, no device plugin: the kubelet allocates nothing and the image's
    ``NVIDIA_VISIBLE_DEVICES=all`` applies under the nvidia runtime (vectorAdd passes, every GPU is listed)."""
    hw = virtual_hardware("dgx-h100", 0)
    backend = LabGpuBackend(VirtualGpuView("n", hw))
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"runtimeClassName": "nvidia"}}
    limits = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    plan = backend.runtime.plan(pod, {"name": "va", "image": VECTOR_ADD, **limits}, None)
    assert (plan.exit_code, plan.logs) == (0, VECTOR_ADD_OK)
    smi = {"name": "smi", "image": CUDA_BASE, "command": ["nvidia-smi", "-L"], **limits}
    listed = finish(backend.runtime.plan(pod, smi, None))[0].splitlines()
    assert listed == [f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {g['uuid']})" for i, g in enumerate(hw["gpus"])]
    assert backend.owners() == {}  # nothing allocated: dcgm-exporter maps no GPU to the pod


def test_a_virtual_nodes_emulator_files_go_with_its_view():
    """The files a virtual node's nvidia-smi reads (written once, on first use) leave nothing behind in /tmp."""
    import gc

    view = VirtualGpuView("n", virtual_hardware("dgx-h100", 0))
    files = Path(view.emulator_env()["GPUREADY_LAB_HARDWARE"]).parent
    assert (files / "hardware.json").exists() and (files / "state.json").exists()
    del view
    gc.collect()
    assert not files.exists()
