"""``gpuready plan``: what the deploy will install and what the conformance suite will expect, per node.

It is the dry run a platform engineer reads before touching hosts, so it prints only what comes from the spec.
"""

from __future__ import annotations

import json
from typing import Any

from gpuready.deploy import addons
from gpuready.nvidia import diag_packages
from gpuready.spec import Fleet, NodeSpec, dra


def node_plan(node: NodeSpec) -> dict[str, Any]:
    s = node.sharing
    sharing: dict[str, Any] = {"mode": str(s.mode)}
    if s.mode in ("time-slicing", "mps"):
        sharing |= {"replicas": s.replicas, "rename": s.rename}
    if s.mode == "mig":
        sharing |= {
            "strategy": s.mig_strategy,
            "layout": {str(i): list(layout) for i, layout in enumerate(s.mig_layout) if layout is not None},
            "replicas": s.mig_replicas,
        }
    install: dict[str, Any] = {
        "packages": node.apt_packages,
        "repositories": dict(node.repos),
        "driver_source": node.versions.driver_source,
    }
    if node.diag_tools:  # diag_tools: DCGM (packages["diag"]) with its host engine, nvbandwidth where served
        install["diag_tools"] = {
            "services": [diag_packages.DCGM_SERVICE],
            "where_a_repository_has_it": [diag_packages.NVBANDWIDTH],
        }
    return {
        "gpus": {"model": node.gpu_model, "count": node.gpu_count, "nvswitch": node.nvswitch},
        "install": install,
        "sharing": sharing,
        "join": {
            "enabled": node.join.enabled,
            "api_endpoint": node.join.api_endpoint,
            "labels": node.node_labels,
            "taints": [str(t) for t in node.taints],
        },
        "gpu_allocation": node.knobs["gpu_allocation"],
        "device_plugin_config": node.device_plugin_config_key,
        "runtime": "cdi" if node.cdi else "runtime-class",
        "expect": {
            "driver_version": node.versions.driver,
            "toolkit_version": node.versions.toolkit,
            "allocatable": node.expected_allocatable,
            "labels": node.expected_labels,
            "resource_slice_devices": [d.as_dict() for d in node.expected_devices],
        },
    }


def fleet_plan(fleet: Fleet) -> dict[str, Any]:
    return {
        "inventory": fleet.inventory,
        "nodes": {name: node_plan(node) for name, node in fleet.nodes.items()},
        "device_plugin_configs": fleet.device_plugin_configs(),
    }


def _grouped(by_node: dict[str, list[str]]) -> list[tuple[list[str], list[str]]]:
    groups: dict[tuple[str, ...], list[str]] = {}
    for node, taints in by_node.items():
        groups.setdefault(tuple(taints), []).append(node)
    return [(nodes, list(taints)) for taints, nodes in groups.items()]


def addon_warnings(fleet: Fleet) -> list[str]:
    """What would not land on a GPU node because of its taints: an add-on DaemonSet (none should: they tolerate
    every pool's ``node_taints``), and GPU workloads, which get no toleration from gpuready for a taint other than
    ``nvidia.com/gpu`` (the RuntimeClass adds only that one; CDI-mode pods use no RuntimeClass at all)."""
    out = []
    for nodes, taints in _grouped(addons.untolerated_taints(fleet, addons.gpu_tolerations(fleet))):
        out.append(
            f"{', '.join(nodes)}: the GPU add-ons (device plugin, GFD, NFD worker, dcgm-exporter, DRA kubelet plugin) do not "
            f"tolerate {', '.join(taints)} and would not run there"
        )
    for nodes, taints in _grouped(addons.untolerated_taints(fleet, addons.GPU_TOLERATIONS)):
        out.append(
            f"{', '.join(nodes)}: taint {', '.join(taints)}: the add-ons tolerate it, but a GPU workload lands "
            "there only with its own toleration for it (the nvidia RuntimeClass adds only nvidia.com/gpu)"
        )
    return out


def nfd_note(fleet: Fleet) -> str | None:
    """What ``gpuready plan`` and the add-ons deploy say when ``addons_nfd`` is off (None when it is on)."""
    first = next(iter(fleet.nodes.values()), None)
    if first is None or first.knobs["addons_nfd"]:
        return None
    return (
        "addons_nfd = False: gpuready deploys no node-feature-discovery; GFD's labels (nvidia.com/gpu.product, ...) "
        "reach the Nodes only through the NFD the cluster runs itself (the GPU Operator's, for one)"
    )


def render_json(fleet: Fleet) -> str:
    warnings = {
        "security_warnings": fleet.security_warnings(),
        "cuda_warnings": fleet.cuda_warnings(),
        "addon_warnings": addon_warnings(fleet),
        "addon_notes": [note] if (note := nfd_note(fleet)) else [],
    }
    return json.dumps({**fleet_plan(fleet), **warnings}, indent=2)


def render_text(fleet: Fleet) -> str:
    """One block per distinct plan: nodes of a pool share a block, so a 1000-node fleet reads as its pools."""
    groups: dict[str, list[NodeSpec]] = {}
    for node in fleet.nodes.values():
        groups.setdefault(json.dumps(node_plan(node), sort_keys=True), []).append(node)
    lines = [
        f"Inventory {fleet.inventory}: {len(fleet.nodes)} GPU node(s) in {len(groups)} distinct plan(s)",
        "",
    ]
    for nodes in groups.values():
        node = nodes[0]
        p = node_plan(node)
        gpus = p["gpus"]
        names = ", ".join(n.name for n in nodes)
        lines.append(names + (f"  ({len(nodes)} nodes)" if len(nodes) > 1 else ""))
        nvswitch = "  (NVSwitch: Fabric Manager)" if node.nvswitch else ""
        lines.append(f"  GPUs         {gpus['count']}x {gpus['model']}{nvswitch}")
        for step, pins in p["install"]["packages"].items():
            lines.append(f"  install      {step:<11} {' '.join(pins)}")
        if tools := p["install"].get("diag_tools"):
            lines.append(
                f"  install      {'diag':<11} {' '.join(tools['where_a_repository_has_it'])} where a repository "
                f"has it; service {' '.join(tools['services'])} enabled and running"
            )
        for key, url in p["install"]["repositories"].items():
            if not key.endswith("keyring_url"):
                lines.append(f"  repository   {key.removesuffix('_repo_url'):<11} {url}")
        sharing = p["sharing"]
        detail = ", ".join(f"{k}={v}" for k, v in sharing.items() if k != "mode")
        lines.append(f"  sharing      {sharing['mode']}" + (f" ({detail})" if detail else ""))
        lines.append(
            f"  join         {node.join.api_endpoint if node.join.enabled else 'no (kube_join = False)'}"
        )
        lines.append(f"  taints       {', '.join(p['join']['taints']) or '-'}")
        runtime = (
            "CDI: devices from /var/run/cdi/nvidia.yaml (nvidia-cdi-refresh), containerd enable_cdi; GPU pods need "
            "no runtimeClassName"
            if node.cdi
            else "runtime class: GPU pods run with runtimeClassName nvidia (nvidia_cdi = False)"
        )
        lines.append(f"  runtime      {runtime}")
        if node.dra:
            lines.append(
                "  allocation   DRA: the DRA driver's kubelet plugin, DeviceClasses gpu.nvidia.com/mig.nvidia.com"
            )
        else:
            lines.append(
                f"  plugin cfg   {node.device_plugin_config_key} (deviceListStrategy {node.device_list_strategy})"
            )
        lines.append(f"  expect       driver {node.versions.driver}, toolkit {node.versions.toolkit}")
        alloc = ", ".join(f"{k}={v}" for k, v in node.expected_allocatable.items())
        lines.append(f"  allocatable  {alloc or '- (no nvidia.com/* extended resources)'}")
        for line in dra.summary(node.expected_devices):
            lines.append(f"  slice device {line} (driver {dra.DRIVER}, pool {node.name})")
        for key, value in node.expected_labels.items():
            lines.append(f"  label        {key}={value}")
        lines.append("")
    if note := nfd_note(fleet):
        lines.append(f"note: {note}")
    for warning in addon_warnings(fleet):
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
