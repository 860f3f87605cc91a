"""Image knobs: every image the add-ons and the suite run is validated as an image reference and reaches what runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_spec import problems_of, write_inventory
from test_validate_before_connect import _listener, _run

from gpuready.cli import main
from gpuready.conformance import SUITE_DIR
from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import node as node_checks
from gpuready.deploy.addons import AddonSettings, render_all
from gpuready.spec import IMAGE_KNOBS, Images, kubesyntax, load_fleet

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "0123456789abcdef" * 4
MIRROR = "registry.example.com:5000/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
GOOD = [
    "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    MIRROR,
    f"registry.example.com:5000/nvidia/cuda@{DIGEST}",
    f"nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04@{DIGEST}",
    "localhost:5000/cuda-sample",
    "busybox",
    "Registry.Example.com/a/b__c.d-e:T_1.x",
]
BAD = [
    "",
    "nvcr.io/nvidia/cuda:12.4.1 base",
    " nvcr.io/nvidia/cuda:12.4.1",
    "nvcr.io/NVIDIA/cuda:12.4.1",
    "nvcr.io/x:",
    "nvcr.io/x@sha256:abc",
    f"nvcr.io/x@sha256:{'A' * 64}",
    "nvcr.io/x@md5:" + "0" * 32,
    "nvcr.io/x:-tag",
    "nvcr.io//x",
    "nvcr.io/x/",
    42,
]


@pytest.mark.parametrize("ref", GOOD)
def test_image_reference_accepted(ref):
    assert kubesyntax.image_reference_problem(ref) is None


@pytest.mark.parametrize("ref", BAD)
def test_image_reference_refused(ref):
    assert kubesyntax.image_reference_problem(ref) == kubesyntax.IMAGE_REFERENCE_FORM


def test_image_repository():
    assert kubesyntax.image_repository(MIRROR) == "registry.example.com:5000/nvidia/k8s/cuda-sample"
    assert kubesyntax.image_repository(f"localhost:5000/x@{DIGEST}") == "localhost:5000/x"
    assert kubesyntax.image_repository("localhost:5000/x") == "localhost:5000/x"


def test_defaults_are_group_data_and_unchanged(tmp_path):
    # the lab builds NVIDIA's images under these names (gpuready.lab.*_image): the defaults must not drift
    (node,) = load_fleet(write_inventory(tmp_path)).nodes.values()
    assert node.images == Images()
    assert node.images.gfd == node.images.device_plugin
    assert wl.VECTOR_ADD_IMAGE == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
    assert wl.CUDA_BASE_IMAGE == "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    group_data: dict = {}
    exec((REPO / "inventory" / "group_data" / "all.py").read_text(), group_data)
    for key, attr in IMAGE_KNOBS.items():
        declared = group_data[key]
        assert (declared or group_data["device_plugin_image"]) == getattr(Images(), attr), key


@pytest.mark.parametrize("key", sorted(IMAGE_KNOBS))
@pytest.mark.parametrize(
    "value", ["", "nvcr.io/nvidia/x y:1", "nvcr.io/NVIDIA/cuda:1", "nvcr.io/x:", "a@sha256:1"]
)
def test_bad_image_knob_is_refused_naming_file_host_key_value_and_form(tmp_path, key, value):
    problems = problems_of(write_inventory(tmp_path, **{key: value}))
    assert problems == [
        f"{tmp_path / 'inv.py'}: host node-1: {key} = {value!r}: {kubesyntax.IMAGE_REFERENCE_FORM}"
    ]


def test_every_bad_image_knob_is_reported_at_once(tmp_path):
    problems = problems_of(write_inventory(tmp_path, **dict.fromkeys(IMAGE_KNOBS, "Bad Image")))
    assert [p.split(": ")[2].split(" = ")[0] for p in problems] == list(IMAGE_KNOBS)


def test_bad_default_in_group_data_names_group_data(tmp_path):
    path = write_inventory(tmp_path)
    all_py = tmp_path / "group_data" / "all.py"
    all_py.write_text(
        all_py.read_text().replace('cuda_base_image = "nvcr.io/', 'cuda_base_image = "nvcr.io/X')
    )
    (problem,) = problems_of(path)
    assert problem.startswith(f"{all_py}: host node-1: cuda_base_image = 'nvcr.io/Xnvidia/cuda:")


def test_plan_refuses_a_bad_image(tmp_path, capsys):
    path = write_inventory(tmp_path, dcgm_exporter_image="nvcr.io/x:")
    assert main(["plan", str(path)]) == 2
    assert "dcgm_exporter_image = 'nvcr.io/x:': must be an image reference" in capsys.readouterr().err


def test_bad_image_stops_pyinfra_before_connecting(tmp_path):
    server, accepted = _listener()
    try:
        result: subprocess.CompletedProcess = _run(
            tmp_path, gpu_count=1, port=server.getsockname()[1], vectoradd_image="nvcr.io/x:"
        )
    finally:
        server.close()
    assert result.returncode == 2, result.stderr
    assert "inv.py: host node-a: vectoradd_image = 'nvcr.io/x:': must be an image reference" in result.stderr
    assert accepted == []


MIRRORED = {
    "device_plugin_image": f"registry.example.com:5000/nvidia/k8s-device-plugin:v0.18.0@{DIGEST}",
    "gfd_image": "registry.example.com:5000/mirror/gfd:v0.18.0",
    "dcgm_exporter_image": "registry.example.com:5000/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
    "vectoradd_image": MIRROR,
    "cuda_base_image": f"registry.example.com:5000/nvidia/cuda@{DIGEST}",
    "nfd_image": "registry.example.com:5000/nfd/node-feature-discovery:v0.17.3",
}


@pytest.fixture
def mirrored(tmp_path):
    (node,) = load_fleet(write_inventory(tmp_path, **MIRRORED)).nodes.values()
    return node


def _images(manifest) -> dict[str, list[str]]:
    pod = (
        manifest["spec"]["template"]["spec"]
        if manifest["kind"] in ("DaemonSet", "Deployment")
        else manifest["spec"]
    )
    return {manifest["metadata"]["name"]: [c["image"] for c in pod["containers"]]}


def test_mirrored_images_reach_the_addon_manifests(tmp_path, mirrored):
    fleet = load_fleet(write_inventory(tmp_path, **MIRRORED))
    images: dict[str, list[str]] = {}
    for manifest in render_all(fleet, AddonSettings.from_node(mirrored)):
        if manifest["kind"] in ("DaemonSet", "Deployment"):
            images.update(_images(manifest))
    assert images == {
        "nvidia-device-plugin": [MIRRORED["device_plugin_image"]] * 2,
        "gpu-feature-discovery": [MIRRORED["gfd_image"]] * 2,
        "nvidia-dcgm-exporter": [MIRRORED["dcgm_exporter_image"]],
        "nfd-master": [MIRRORED["nfd_image"]],
        "nfd-worker": [MIRRORED["nfd_image"]],
    }


def test_gfd_follows_a_mirrored_device_plugin_by_default(tmp_path):
    image = "mirror.local/nvidia/k8s-device-plugin:v0.18.0"
    (node,) = load_fleet(write_inventory(tmp_path, device_plugin_image=image)).nodes.values()
    assert node.images.gfd == image
    settings = AddonSettings.from_node(node)
    assert (settings.device_plugin_image, settings.gfd_image) == (image, image)


def test_mirrored_images_reach_the_suites_pods(mirrored):
    # what conformance/test_workloads.py and test_metrics.py build for a node
    vectoradd = wl.gpu_pod(
        "vectoradd-x", mirrored, mirrored.images.vectoradd, "nvidia.com/gpu", check="vectoradd"
    )
    holder = wl.gpu_pod("holder-x", mirrored, mirrored.images.cuda_base, "nvidia.com/gpu", check="metrics")
    assert [c["image"] for c in vectoradd["spec"]["containers"]] == [MIRROR]
    assert [c["image"] for c in holder["spec"]["containers"]] == [MIRRORED["cuda_base_image"]]


def test_the_suite_reads_its_images_from_the_spec():
    # the workloads and policy layers' pods are built in gpuready.conformance.workload_runs and policy_runs
    for path in (
        SUITE_DIR.parent / "workload_runs.py",
        SUITE_DIR.parent / "policy_runs.py",
        SUITE_DIR / "test_metrics.py",
    ):
        text, name = path.read_text(), path.name
        assert "wl.VECTOR_ADD_IMAGE" not in text and "wl.CUDA_BASE_IMAGE" not in text, name
        assert "n.images." in text, name


def test_addon_pod_of_a_renamed_mirror_is_recognised(tmp_path):
    renamed = "registry.example.com:5000/gpu/plugin:v0.18.0"
    (node,) = load_fleet(write_inventory(tmp_path, device_plugin_image=renamed)).nodes.values()
    pod = {
        "metadata": {"name": "nvidia-device-plugin-abc", "namespace": "gpu-system"},
        "spec": {"containers": [{"name": "nvidia-device-plugin", "image": renamed}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert node_checks.addon_pod_ready(node, [pod], "device plugin") == []
