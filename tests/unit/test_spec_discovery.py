"""``--discover``'s pure part (gpuready.spec.discovery): Node objects as the add-ons and GFD leave them -> the same
NodeSpecs an inventory gives, and every disagreement a problem naming the node's label, value and what was expected.

The Node objects are made from inventory specs (labels = ``node_labels`` + ``expected_labels``, allocatable =
``expected_allocatable``), so a healthy discovery must give back the specs' expectations exactly."""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from gpuready.nvidia import catalogue
from gpuready.spec import discovery, load_fleet
from gpuready.spec.discovery import Probed

DRIVER, TOOLKIT = "580.178.04", "1.20.0"
HOSTS: list[tuple[str, dict[str, Any]]] = [
    ("h100-a", {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "node_taints": ["nvidia.com/gpu=present:NoSchedule"]}),
    ("h100-b", {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "node_taints": ["nvidia.com/gpu=present:NoSchedule"]}),
    ("h100-c", {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "node_taints": ["nvidia.com/gpu=present:NoSchedule"]}),
    ("a100-mixed", {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 4, "gpu_sharing": "mig", "mig_strategy": "mixed",
                    "mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}, "node_taints": []}),
    ("a100-single", {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 2, "gpu_sharing": "mig", "mig_strategy": "single",
                     "mig_layout": ["1g.10gb"] * 7, "node_taints": []}),
    ("l4-ts", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_sharing": "time-slicing", "sharing_replicas": 4,
               "nvidia_cdi": False, "node_taints": []}),
    ("l4-renamed", {"gpu_model": "NVIDIA L4", "gpu_count": 2, "gpu_sharing": "mps", "sharing_replicas": 2,
                    "sharing_rename": True, "node_taints": []}),
]  # fmt: skip


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    path = tmp_path_factory.mktemp("inv") / "inventory.py"
    path.write_text(f"gpu_nodes = ({[(n, {**d, 'kube_join': False}) for n, d in HOSTS]!r}, {{}})\n")
    return load_fleet(path).nodes


def node_object(spec, driver: str = DRIVER) -> dict[str, Any]:
    major = driver.split(".")[0]
    labels = {
        **spec.node_labels,
        **spec.expected_labels,
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver.major": major,
        "kubernetes.io/hostname": spec.name,
    }
    resources = {"cpu": "16", **{k: str(v) for k, v in spec.expected_allocatable.items()}}
    return {
        "metadata": {"name": spec.name, "labels": {k: str.__str__(v) for k, v in labels.items()}},
        "spec": {"taints": [t.as_dict() for t in spec.taints]},
        "status": {"capacity": resources, "allocatable": dict(resources),
                   "nodeInfo": {"kubeletVersion": "v1.36.3"}},
    }  # fmt: skip


def probed(spec, driver: str = DRIVER, toolkit: str = TOOLKIT, gpus: int | None = None) -> Probed:
    mig = tuple(tuple(layout) if layout else None for layout in spec.sharing.mig_layout)
    return Probed(driver, toolkit, (spec.gpu_model,) * (spec.gpu_count if gpus is None else gpus),
                  spec.model.memory_mib, mig or (None,) * spec.gpu_count)  # fmt: skip


def configs(specs) -> dict[str, Any]:
    return {n: s.device_plugin_config for n, s in specs.items()}


def run(specs, objects=None, probes=None, **kw):
    objects = objects or [node_object(s) for s in specs.values()]
    probes = {n: probed(s) for n, s in specs.items()} if probes is None else probes
    return discovery.discover(objects, configs(specs), probes, **kw)


def test_a_healthy_cluster_gives_back_the_inventory_expectations(specs):
    found = run(specs)
    assert found.problems == {} and found.undiscoverable == {}
    fleet = discovery.fleet(found)
    assert list(fleet.nodes) == sorted(specs)
    for name, spec in specs.items():
        got = fleet.nodes[name]
        assert (got.gpu_model, got.gpu_count, got.sharing) == (
            spec.gpu_model,
            spec.gpu_count,
            spec.sharing,
        ), name
        assert got.expected_allocatable == spec.expected_allocatable
        assert got.expected_labels == spec.expected_labels
        assert got.node_labels == spec.node_labels, (
            name
        )  # the device-plugin config key too (CDI mode read back)
        assert got.taints == spec.taints and got.join.enabled is False
        assert (got.versions.driver, got.versions.toolkit, got.versions.kubernetes) == (
            DRIVER,
            TOOLKIT,
            "1.36.3",
        )
    assert sorted(found.pools) == sorted(
        ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB mig-mixed", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb mig-single",
         "NVIDIA-L4-SHARED time-slicing x4", "NVIDIA-L4 mps x2"]
    )  # fmt: skip


def test_cpu_nodes_are_left_out_and_labels_alone_do_without_a_probe(specs):
    cpu = {"metadata": {"name": "cpu-1", "labels": {}}, "status": {"capacity": {"cpu": "4"}}}
    objects = [cpu, *(node_object(s) for s in specs.values())]
    found = discovery.discover(objects, configs(specs), {})
    assert "cpu-1" not in found.hosts and found.problems == {}
    fleet = discovery.fleet(found)
    for name, spec in specs.items():  # MIG layouts packed from the counts: the same devices
        assert fleet.nodes[name].expected_allocatable == spec.expected_allocatable, name
        assert fleet.nodes[name].versions.driver == DRIVER  # from GFD's driver label


def test_allocatable_that_disagrees_with_the_labels(specs):
    objects = [node_object(s) for s in specs.values()]
    l4 = next(o for o in objects if o["metadata"]["name"] == "l4-ts")
    l4["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    a100 = next(o for o in objects if o["metadata"]["name"] == "a100-mixed")
    del a100["status"]["allocatable"]["nvidia.com/mig-1g.10gb"]
    found = run(specs, objects)
    assert found.of("l4-ts", "labels") == [
        "allocatable nvidia.com/gpu = 3, but the labels say 4 (nvidia.com/gpu.count = 1 x nvidia.com/gpu.replicas = 4)"
    ]
    assert found.of("a100-mixed", "labels") == [
        "allocatable nvidia.com/mig-1g.10gb = absent, but the labels say 2 (the MIG labels)"
    ]
    assert set(found.problems) == {"l4-ts", "a100-mixed"}


def test_labels_that_disagree_with_the_config_and_each_other(specs):
    objects = [node_object(s) for s in specs.values()]
    cfg = configs(specs)
    cfg["l4-ts"] = copy.deepcopy(cfg["l4-ts"])
    cfg["l4-ts"]["sharing"]["timeSlicing"]["resources"][0]["replicas"] = 8
    h100 = next(o for o in objects if o["metadata"]["name"] == "h100-a")
    h100["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40000"
    found = discovery.discover(objects, cfg, {n: probed(s) for n, s in specs.items()})
    assert found.of("l4-ts", "labels") == [
        "GFD label nvidia.com/gpu.replicas = 4, but the device plugin config 'time-slicing-4-envvar' has replicas 8"
    ]
    assert "GFD label nvidia.com/gpu.memory = 40000, but a NVIDIA H100 80GB HBM3 has 81559 MiB" in found.of(
        "h100-a", "labels"
    )
    assert "GFD label nvidia.com/gpu.memory = 40000, but nvidia-smi says 81559 MiB" in found.of(
        "h100-a", "nvidia-smi"
    )


def test_labels_that_disagree_with_nvidia_smi(specs):
    probes = {n: probed(s) for n, s in specs.items()}
    probes["h100-b"] = probed(specs["h100-b"], gpus=7)
    probes["l4-ts"] = Probed(DRIVER, TOOLKIT, ("NVIDIA L40S",), 46068, (None,))
    a100 = specs["a100-mixed"]
    probes["a100-mixed"] = Probed(
        DRIVER, TOOLKIT, (a100.gpu_model,) * 4, 81920, (("3g.40gb", "2g.20gb"), None, None, None)
    )
    found = run(specs, probes=probes)
    assert found.of("h100-b", "nvidia-smi") == [
        "GFD label nvidia.com/gpu.count = 8, but nvidia-smi lists 7 GPU(s)"
    ]
    assert found.of("l4-ts", "nvidia-smi")[0] == (
        "GFD label nvidia.com/gpu.product = 'NVIDIA-L4-SHARED', but nvidia-smi says 'NVIDIA L40S'"
    )
    assert found.of("a100-mixed", "nvidia-smi") == [
        "MIG labels count 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb, nvidia-smi -L lists 1 x 2g.20gb, 1 x 3g.40gb"
    ]


def test_a_driver_or_toolkit_that_differs_from_its_pool(specs):
    probes = {n: probed(s) for n, s in specs.items()}
    probes["h100-c"] = probed(specs["h100-c"], driver="580.95.05")
    probes["h100-b"] = probed(specs["h100-b"], toolkit="1.19.0")
    objects = [node_object(s, "580.95.05" if s.name == "h100-c" else DRIVER) for s in specs.values()]
    found = run(specs, objects, probes)
    pool = "NVIDIA-H100-80GB-HBM3"
    assert found.of("h100-c", "pool") == [
        f"NVIDIA driver is 580.95.05, but 2 of 3 nodes of pool {pool!r} run {DRIVER}"
    ]
    assert found.of("h100-b", "pool") == [
        f"NVIDIA Container Toolkit is 1.19.0, but 2 of 3 nodes of pool {pool!r} run {TOOLKIT}"
    ]
    assert found.of("h100-a", "pool") == [] and found.of("h100-c", "nvidia-smi") == []
    # the spec holds the pool's version: the host layer's driver check fails the odd node too
    assert discovery.fleet(found).nodes["h100-c"].versions.driver == DRIVER
    # pinned: every node that differs from the pin
    pinned = run(specs, objects, probes, expect_driver="580.95.05")
    assert pinned.of("h100-a", "pool") == [f"NVIDIA driver is {DRIVER}, but --expect-driver pins 580.95.05"]
    assert pinned.of("h100-c", "pool") == []


def test_a_pool_split_in_two_halves_names_both_and_asks_for_a_pin(specs):
    two = {n: s for n, s in specs.items() if n in ("h100-a", "h100-b")}
    probes = {"h100-a": probed(two["h100-a"]), "h100-b": probed(two["h100-b"], driver="580.95.05")}
    found = run(two, [node_object(s, probes[s.name].driver) for s in two.values()], probes)
    for name in two:
        (message,) = found.of(name, "pool")
        assert "no majority" in message and "580.95.05 on h100-b" in message and "--expect-driver" in message


def test_a_node_without_gfd_labels_is_discovered_from_nvidia_smi_and_said_so(specs):
    spec = specs["h100-a"]
    obj = node_object(spec)
    obj["metadata"]["labels"] = {"nvidia.com/gpu.present": "true"}
    found = discovery.discover([obj], {}, {"h100-a": probed(spec)})
    assert "GFD label nvidia.com/gpu.product missing (nvidia-smi says NVIDIA H100 80GB HBM3)" in found.of(
        "h100-a", "labels"
    )
    bare = discovery.discover([obj], {}, {})
    assert "no nvidia.com/gpu.product label" in bare.undiscoverable["h100-a"]


def test_the_rendered_inventory_loads_back_to_the_same_specs(specs, tmp_path):
    found = run(specs)
    path = tmp_path / "discovered.py"
    path.write_text(discovery.render_inventory(found))
    loaded = load_fleet(path)
    direct = discovery.fleet(found)
    for name in specs:
        a, b = loaded.nodes[name], direct.nodes[name]
        assert (a.sharing, a.versions, a.expected_allocatable, a.node_labels, a.taints) == (
            b.sharing, b.versions, b.expected_allocatable, b.node_labels, b.taints
        )  # fmt: skip
    text = path.read_text()
    assert "# pool NVIDIA-H100-80GB-HBM3: 3 node(s), driver 580.178.04, toolkit 1.20.0" in text
    assert "kube_join': False" in text and "ssh_" not in text
    # a problem is a comment beside its node
    objects = [node_object(s) for s in specs.values()]
    objects[0]["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    assert "# a100-mixed" not in discovery.render_inventory(run(specs, objects))
    assert "# h100-a: labels: allocatable nvidia.com/gpu = 7" in discovery.render_inventory(
        run(specs, objects)
    )


def test_discover_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "discover", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "--expect-driver" in out.stdout, out.stderr


def test_nvswitch_is_discovered_from_the_gpus_fabric_state(specs):
    """A GPU of a Hopper NVSwitch board reports its fabric state (Completed, or In Progress while Fabric Manager
    is not done: gpud's capture of an HGX H100, tests/fixtures/nvidia-smi-text); others report N/A (telegraf's
    A100 capture). The discovered node then expects Fabric Manager active and its NVLinks up."""
    from pathlib import Path

    from gpuready.conformance.checks import Output
    from gpuready.conformance.checks import host as host_checks
    from gpuready.conformance.discovered import probed_from

    real = (
        (Path(__file__).parents[1] / "fixtures" / "nvidia-smi-xml" / "telegraf__a100-sxm4-v12.xml")
        .read_text()
        .replace("<attached_gpus>4</attached_gpus>", "<attached_gpus>1</attached_gpus>")  # trimmed upstream
    )

    def answers(report: str) -> dict[str, Output]:
        return {
            host_checks.NVIDIA_SMI_COMMAND: Output(0, report, ""),
            host_checks.TOOLKIT_COMMAND: Output(0, "NVIDIA Container Toolkit CLI version 1.20.0\n", ""),
            host_checks.SMI_LIST_COMMAND: Output(0, "", ""),
        }

    assert "<state>N/A</state>" in real and probed_from(answers(real)).nvswitch is False
    for state in ("Completed", "In Progress"):
        fabric = real.replace("<state>N/A</state>", f"<state>{state}</state>", 1)
        assert probed_from(answers(fabric)).nvswitch is True, state
    probes = {n: probed(s) for n, s in specs.items()}
    probes["h100-a"] = replace(probes["h100-a"], nvswitch=True)
    fleet = discovery.fleet(run(specs, probes=probes))
    assert fleet.nodes["h100-a"].nvswitch is True and fleet.nodes["h100-b"].nvswitch is False


# --- #31 item 0: no GPU node vanishes from a discovery ---------------------------------------------------------
LAB_A100_GPU = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]  # inventory/lab.py's mixed layout, on each GPU


@pytest.fixture(scope="module")
def lab_a100(tmp_path_factory):
    path = tmp_path_factory.mktemp("lab-a100") / "inventory.py"
    data = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 4, "gpu_sharing": "mig", "mig_strategy": "mixed",
            "mig_layout": {i: LAB_A100_GPU for i in range(4)}, "node_taints": [], "kube_join": False}  # fmt: skip
    path.write_text(f"gpu_nodes = ({[('a100-lab', data)]!r}, {{}})\n")
    return load_fleet(path).nodes["a100-lab"]


def test_the_labs_mixed_mig_layout_is_discovered_from_labels_alone(lab_a100):
    """Greedy first-fit put two 3g.40gb on one GPU and then found no room: the node was dropped and the run passed."""
    found = discovery.discover([node_object(lab_a100)], {"a100-lab": lab_a100.device_plugin_config}, {})
    assert found.undiscoverable == {} and found.problems == {}
    got = discovery.fleet(found).nodes["a100-lab"]
    assert got.gpu_count == 4 and got.expected_allocatable == lab_a100.expected_allocatable
    assert got.expected_labels == lab_a100.expected_labels


@pytest.mark.parametrize(
    ("model", "gpus", "layout"),
    [
        ("NVIDIA A100-SXM4-80GB", 4, [LAB_A100_GPU, ["7g.80gb"], ["4g.40gb", "3g.40gb"], ["1g.10gb"] * 7]),
        (
            "NVIDIA A100-SXM4-80GB",
            8,
            [["2g.20gb"] * 3 + ["1g.10gb"], ["3g.40gb", "3g.40gb"], None, ["1g.20gb"] * 4],
        ),
        (
            "NVIDIA H100 80GB HBM3",
            8,
            [["1g.10gb+me", "1g.10gb", "2g.20gb", "3g.40gb"], ["1g.20gb"] * 4, None, None],
        ),
        ("NVIDIA A30", 4, [["2g.12gb", "1g.6gb", "1g.6gb"], ["4g.24gb"], ["1g.6gb"] * 4, None]),
    ],
)
def test_every_mixed_layout_the_catalogue_allows_is_read_from_its_counts(model, gpus, layout):
    """Counts alone (no probe) name no GPU, but some layout of that many GPUs holds exactly those devices."""
    profiles = [p for gpu in layout if gpu for p in gpu]
    packed = discovery._pack(model, profiles, gpus)
    assert packed is not None and len(packed) == gpus
    assert sorted(p for gpu in packed if gpu for p in gpu) == sorted(profiles)
    assert all(not catalogue.layout_problems(model, list(gpu)) for gpu in packed if gpu)


def test_devices_no_layout_of_the_gpus_holds_are_refused_quickly():
    assert discovery._pack("NVIDIA A100-SXM4-80GB", ["7g.80gb"] * 5, 4) is None
    assert (
        discovery._pack("NVIDIA A100-SXM4-80GB", ["1g.10gb+me"] * 5, 4) is None
    )  # one media-engine slice each


def _unreadable(spec):
    obj = node_object(spec)
    obj["metadata"]["labels"]["nvidia.com/mig-3g.40gb.count"] = "40"  # no 4 GPUs hold 40 x 3g.40gb
    return obj


def test_a_node_discovery_cannot_read_is_in_the_run_failing_with_why(specs):
    """Such a node is still a host of the fleet (so the suite reaches it) and fails the discovery check; it is in
    no pool and the rendered inventory names it in a comment, not as a node."""
    objects = [node_object(s) for n, s in specs.items() if n != "a100-mixed"] + [
        _unreadable(specs["a100-mixed"])
    ]
    found = discovery.discover(objects, configs(specs), {})
    assert "fit no layout of 4 GPU(s)" in found.undiscoverable["a100-mixed"]
    (why,) = found.of("a100-mixed", "discovery")
    assert why.startswith("no expectations could be read from the cluster for it: the MIG labels' devices")
    assert "a100-mixed" in discovery.fleet(found).nodes
    assert all("a100-mixed" not in members for members in found.pools.values())
    text = discovery.render_inventory(found)
    assert (
        "# a100-mixed: left out, its expectations could not be read:" in text and "('a100-mixed'" not in text
    )
    # with the probe's nvidia-smi -L the layout is read from the GPUs: readable again, the counts judged by it
    probes = {n: probed(s) for n, s in specs.items()}
    objects[-1] = node_object(specs["a100-mixed"])
    assert discovery.discover(objects, configs(specs), probes).undiscoverable == {}


def test_a_node_known_only_by_its_addon_pod_is_a_gpu_node(specs):
    """No nvidia.com/* capacity (the plugin lost every GPU) and no GFD labels: the device plugin or DRA kubelet
    plugin pod on it still makes it a GPU node, and one the discovery cannot read."""
    lost = {"metadata": {"name": "gpu-lost", "labels": {}}, "status": {"capacity": {"cpu": "8"}}}
    assert discovery.discover([lost], {}, {}).hosts == {}
    found = discovery.discover([lost], {}, {}, with_addons={"gpu-lost"})
    assert "no nvidia.com/gpu.product label" in found.undiscoverable["gpu-lost"]
    assert found.of("gpu-lost", "discovery") and "gpu-lost" in discovery.fleet(found).nodes


def test_gpuready_discover_exits_1_and_names_a_node_it_cannot_read(specs, monkeypatch, capsys):
    """The CLI's view of the discovery above: the readable nodes in the inventory it prints, the unreadable one as a
    comment and a problem on stderr, counted, and exit 1 (0 only when nothing is wrong)."""
    from types import SimpleNamespace

    from gpuready import kube
    from gpuready.conformance import discovered

    objects = [node_object(s) for n, s in specs.items() if n != "a100-mixed"] + [
        _unreadable(specs["a100-mixed"])
    ]
    found = discovery.discover(objects, configs(specs), {})
    monkeypatch.setattr(kube, "connect", lambda *a, **k: SimpleNamespace(url="https://cluster.test"))
    monkeypatch.setattr(discovered, "discover_cluster", lambda *a, **k: (found, discovery.fleet(found)))
    args = SimpleNamespace(kubeconfig=None, kube_context=None, probe_image=None, command_timeout=5.0,
                           pod_timeout=5.0, nodes=None, no_probe=True, expect_driver=None, expect_toolkit=None)  # fmt: skip
    assert discovered.main(args) == 1
    out, err = capsys.readouterr()
    assert "# a100-mixed: left out, its expectations could not be read" in out and "('h100-a'" in out
    assert "a100-mixed: discovery: no expectations could be read from the cluster for it" in err
    assert f"{len(specs)} GPU node(s) (1 left out of the inventory)" in err and "1 problem(s)" in err
    healthy = discovery.discover([node_object(s) for s in specs.values()], configs(specs), {})
    monkeypatch.setattr(discovered, "discover_cluster", lambda *a, **k: (healthy, discovery.fleet(healthy)))
    assert discovered.main(args) == 0
