"""The facts the node deploy batches are declared by its tasks (``node_facts.reads``), not listed in node_facts.py,
which imports no task (that was a 13-module import cycle). The batch must still hold every fact the deploy reads,
or a no-change run costs a second round trip: these tests hold the declarations to the list node_facts.py kept
before, on every node shape of the example inventory, and every fact a task or operation reads to a declaration."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.context import ctx_host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Arch, LinuxDistribution, Sysctl, Which

import gpuready.deploy.tasks  # noqa: F401  (the node deploy's tasks register their declarations on import)
from gpuready.deploy import node_facts
from gpuready.deploy.facts.apt import AptCandidate, HeldPackages
from gpuready.deploy.facts.containerd import ContainerdConfigText
from gpuready.deploy.facts.host import FileDigest, FileText, KernelFeature, Swap, UnitState
from gpuready.deploy.facts.kubeadm import KubeletJoined
from gpuready.deploy.facts.nvidia import MigInstances, NvidiaSmi
from gpuready.deploy.node_facts import FactSpec, _key, node_fact_specs
from gpuready.deploy.operations import apt as gpu_apt
from gpuready.deploy.tasks import containerd, driver, repos, toolkit
from gpuready.deploy.tasks import host as host_task
from gpuready.deploy.tasks import kubernetes as kube_task
from gpuready.nvidia import cdi, mig_layout
from gpuready.spec import NodeSpec, load_fleet

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "src" / "gpuready" / "deploy"


def listed_before(node: NodeSpec) -> list[FactSpec]:
    """node_facts.node_fact_specs as it was, when it imported every task to list their facts itself."""
    specs: list[FactSpec] = [
        (LinuxDistribution, {}),
        (Arch, {}),
        (DebPackages, {}),
        (HeldPackages, {}),
        (Which, {"command": "update-initramfs"}),
        (Swap, {}),
        (KubeletJoined, {}),
        (FileText, {"path": host_task.SYSCTL_FILE}),
        (Sysctl, {"keys": sorted(host_task.SYSCTLS)}),
    ]
    specs += [(KernelFeature, {"probe": probe}) for probe in host_task.MODULES.values()]
    specs += [(FileDigest, {"path": path}) for path in (*host_task.FILES, driver.PREFERENCES_FILE)]
    for repo in repos.REPOSITORIES:
        specs += [
            (FileDigest, {"path": repos.keyring_path(repo)}),
            (FileText, {"path": gpu_apt.list_path(repo)}),
        ]
    units = (*driver.units(node), *toolkit.units(node.cdi), containerd.UNIT, kube_task.UNIT)
    specs += [(UnitState, {"unit": unit}) for unit in units]
    if node.cdi:
        specs.append((FileDigest, {"path": cdi.SPEC_PATH}))
    specs += [(ContainerdConfigText, {"path": path}) for path in containerd.config_paths()]
    if node.sharing.mode == "mig":
        specs += [(NvidiaSmi, {}), (MigInstances, {})]
    if node.diag_tools:  # tasks.diag: only where the knob asks for the diag layer's tools
        specs += [(AptCandidate, {"package": "nvbandwidth"}), (UnitState, {"unit": "nvidia-dcgm"})]
    # the MIG boot unit (#29): installed on MIG nodes, removed from the others, so read on every node
    specs.append((UnitState, {"unit": mig_layout.UNIT}))
    specs += [(FileDigest, {"path": path}) for path in (mig_layout.UNIT_PATH, mig_layout.SCRIPT_PATH)]
    return specs


def nodes() -> list[tuple[str, NodeSpec, Any]]:
    """Every node of the example inventory (NVSwitch, MIG, time-slicing), with CDI and without, and with the
    diag layer's tools."""
    out = []
    for override in ({}, {"nvidia_cdi": False}, {"diag_tools": True}):
        fleet = load_fleet(REPO / "inventory" / "example.py", override)
        inventory = SimpleNamespace(_gpuready_fleet=fleet)  # what context.fleet_for caches
        out += [(name, node, inventory) for name, node in fleet.nodes.items()]
    return out


def declared(name: str, inventory: Any) -> list[FactSpec]:
    with ctx_host.use(SimpleNamespace(name=name, inventory=inventory)):
        return node_fact_specs()


def test_the_tasks_declare_exactly_what_node_facts_listed():
    shapes = set()
    for name, node, inventory in nodes():
        specs = declared(name, inventory)
        keys = [_key(cls, kwargs) for cls, kwargs in specs]
        assert len(keys) == len(set(keys)), f"{name}: a fact twice in one batch"
        assert sorted(keys) == sorted(_key(c, k) for c, k in listed_before(node)), name
        shapes.add((node.sharing.mode, node.cdi, node.nvswitch))
    assert {mode for mode, _, _ in shapes} >= {"none", "mig", "time-slicing"}
    assert {cdi_mode for _, cdi_mode, _ in shapes} == {True, False}


def node_fact_reads(path: Path) -> set[str]:
    """The fact classes a module passes to node_fact(...), by name."""
    reads = set()
    for call in ast.walk(ast.parse(path.read_text())):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "node_fact" and call.args:
            first = call.args[0]
            reads.add(first.id if isinstance(first, ast.Name) else ast.unparse(first))
    return reads


def test_every_fact_a_task_or_operation_reads_is_declared():
    """A new node_fact(...) read with no declaration would cost a second round trip in a no-change run."""
    sources = [*(DEPLOY / "tasks").glob("*.py"), *(DEPLOY / "operations").glob("*.py"), DEPLOY / "context.py"]
    read = set().union(*(node_fact_reads(path) for path in sources))
    assert {"DebPackages", "Swap", "KubeletJoined", "MigInstances"} <= read  # the scan sees the reads
    classes = {cls.__name__ for name, _, inventory in nodes() for cls, _ in declared(name, inventory)}
    assert read - classes == set(), "read with node_fact but declared by no task (node_facts.reads)"


def test_a_declaration_registered_twice_is_kept_once(monkeypatch):
    monkeypatch.setattr(node_facts, "_DECLARATIONS", {})

    def facts_read() -> list[FactSpec]:
        return [(Swap, {}), (Arch, {})]

    def other() -> list[FactSpec]:
        return [(Arch, {}), (FileText, {"path": "/etc/x"})]

    node_facts.reads(facts_read)
    node_facts.reads(facts_read)  # the same module imported again
    node_facts.reads(other)
    assert node_fact_specs() == [(Swap, {}), (Arch, {}), (FileText, {"path": "/etc/x"})]


@pytest.mark.parametrize("module", ["node_facts", "context"])
def test_the_fact_batch_imports_no_task_and_no_operation(module):
    """The shape lint-imports holds: node_facts (and context, which reads through it) below tasks/operations."""
    tree = ast.parse((DEPLOY / f"{module}.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {m for m in imported if m.startswith(("gpuready.deploy.tasks", "gpuready.deploy.operations"))}
