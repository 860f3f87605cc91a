"""``--discover`` and ``gpuready discover``: the I/O around :mod:`gpuready.spec.discovery`.

One LIST of nodes and one of pods for the whole cluster, one GET per device-plugin ConfigMap (found from the device
plugin's pods, by image, in whatever namespace and under whatever name they run: gpuready's add-ons and the GPU
Operator alike), then one probe per GPU node at once (``nvidia-smi -q -x``, ``nvidia-ctk --version``,
``nvidia-smi -L``: the host layer's own commands, so its probe later reuses the answers), and the pure discovery
turns it all into NodeSpecs and problems.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from gpuready.conformance.checks import CannotCheck, Output
from gpuready.conformance.checks import host as host_checks
from gpuready.conformance.checks.node import ADDON_IMAGES, NOT_THE_ADDON
from gpuready.nvidia.smi import parse_list
from gpuready.spec import DEVICE_PLUGIN_CONFIG_LABEL, NodeSpec, SpecError, discovery

Obj = dict[str, Any]
COMMANDS = ["true", host_checks.NVIDIA_SMI_COMMAND, host_checks.TOOLKIT_COMMAND, host_checks.SMI_LIST_COMMAND]
INVENTORY_FILE = "discovered-inventory.py"  # in --report-dir with --discover
Prober = Callable[[Sequence[NodeSpec]], Mapping[str, Mapping[str, Output] | None]]


def _addon_pod(pod: Obj, component: str) -> bool:
    """A pod of ``component`` (a key of ADDON_IMAGES: "device plugin", "DRA kubelet plugin"), by image."""
    containers = (pod.get("spec") or {}).get("containers") or []
    words = " ".join(" ".join([*(c.get("command") or []), *(c.get("args") or [])]) for c in containers)
    if any(o in words or o in pod["metadata"].get("name", "") for o in NOT_THE_ADDON[component]):
        return False
    return any(ADDON_IMAGES[component] in (c.get("image") or "") for c in containers)


def _default_key(pod: Obj) -> str:
    for c in [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or [])]:
        for env in c.get("env") or []:
            if env.get("name") == "DEFAULT_CONFIG" and env.get("value"):
                return str(env["value"])
    return "default"


def read_cluster(cluster: Any) -> tuple[list[Obj], dict[str, Obj | None], set[str]]:
    """Every Node; per node the device plugin config its label (else the plugin's DEFAULT_CONFIG) selects in
    the ConfigMaps its device plugin pod mounts (None where there is no plugin pod or no such key); and the nodes
    a device plugin or DRA kubelet plugin pod runs on (GPU nodes, whatever their labels and capacity say)."""
    from kubernetes.client.exceptions import ApiException

    core = cluster.core
    nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    plugins = {p["spec"].get("nodeName"): p for p in pods if _addon_pod(p, "device plugin")}
    dra = {p["spec"].get("nodeName") for p in pods if _addon_pod(p, "DRA kubelet plugin")}
    with_addons = {n for n in [*plugins, *dra] if n}
    maps: dict[tuple[str, str], dict[str, str]] = {}
    configs: dict[str, Obj | None] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        pod = plugins.get(name)
        if pod is None:
            continue
        namespace = pod["metadata"]["namespace"]
        key = ((node["metadata"].get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)) or _default_key(pod)
        for volume in pod["spec"].get("volumes") or []:
            cm = (volume.get("configMap") or {}).get("name")
            if not cm:
                continue
            if (namespace, cm) not in maps:
                try:
                    maps[(namespace, cm)] = core.read_namespaced_config_map(cm, namespace).data or {}
                except ApiException:
                    maps[(namespace, cm)] = {}
            text = maps[(namespace, cm)].get(key)
            if text is not None:
                try:
                    configs[name] = yaml.safe_load(text)
                except yaml.YAMLError:
                    configs[name] = None
                break
    return nodes, configs, with_addons


def probed_from(outputs: Mapping[str, Output]) -> discovery.Probed:
    """What the discovery needs from a node's answers to :data:`COMMANDS`."""
    driver: str | None = None
    gpus: tuple[str, ...] = ()
    memory: int | None = None
    try:
        report = host_checks.smi_report(outputs[host_checks.NVIDIA_SMI_COMMAND])
    except CannotCheck:
        report = None
    if report is not None:
        driver = report.driver_version
        gpus = tuple(g.name or "" for g in report.gpus)
        memory = report.gpus[0].memory_total_mib if report.gpus else None
    toolkit = host_checks._TOOLKIT_VERSION.search(outputs[host_checks.TOOLKIT_COMMAND].stdout)
    mig: tuple[tuple[str, ...] | None, ...] = ()
    listed = outputs[host_checks.SMI_LIST_COMMAND]
    if listed.rc == 0:
        try:
            mig = tuple(tuple(d.profile for d in g.mig_devices) or None for g in parse_list(listed.stdout))
        except ValueError:
            mig = ()
    nvswitch = report is not None and any(g.fabric_state not in (None, "N/A") for g in report.gpus)
    return discovery.Probed(driver, toolkit.group(1) if toolkit else None, gpus, memory, mig, nvswitch)


def discover_cluster(
    cluster: Any,
    prober: Prober | None,
    names: Sequence[str] = (),
    expect_driver: str | None = None,
    expect_toolkit: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[discovery.Discovery, Any]:
    """(the discovery, its validated Fleet). ``prober`` runs :data:`COMMANDS` on the GPU nodes it is given, at
    once, and returns each node's answers (None for a node that did not answer); None: labels only."""
    nodes, configs, with_addons = read_cluster(cluster)
    if names:
        known = {n["metadata"]["name"] for n in nodes}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SpecError(f"--nodes of {cluster.url}", [f"unknown node(s) {unknown}"])
        nodes = [n for n in nodes if n["metadata"]["name"] in names]
    source = cluster.url or "the cluster"
    first = discovery.discover(nodes, configs, {}, expect_driver, expect_toolkit, source, with_addons)
    probed: dict[str, discovery.Probed] = {}
    if prober is not None and first.hosts:
        answers = prober(list(discovery.fleet(first, overrides).nodes.values()))
        probed = {name: probed_from(out) for name, out in answers.items() if out is not None}
    found = discovery.discover(nodes, configs, probed, expect_driver, expect_toolkit, source, with_addons)
    return found, discovery.fleet(found, overrides)


def probe_answers(
    gather: Callable[[dict[str, list[str]]], None], runner: Callable[[NodeSpec], Any]
) -> Prober:
    """A prober over a suite's (or a ProbeFleet's) runners: ``gather`` fills every node's cache at once (one
    probe pod per node), then each node's answers are read from its runner."""
    from gpuready.conformance.runners import ConnectionFailed

    def probe(specs: Sequence[NodeSpec]) -> dict[str, dict[str, Output] | None]:
        gather({n.name: list(COMMANDS) for n in specs})
        out: dict[str, dict[str, Output] | None] = {}
        for node in specs:
            try:
                out[node.name] = {c: runner(node).run(c) for c in COMMANDS}
            except ConnectionFailed:
                out[node.name] = None
        return out

    return probe


def start_suite(config: Any, new_suite: Callable[..., Any]) -> Any:
    """The plugin's session start with ``--discover``: the run's Suite (made by the plugin's ``new_suite``, as
    with ``--inventory``), its nodes discovered from the cluster (the probes' answers already in the nodes'
    caches: the discovery's commands and those of the layers ``-m`` selects, in one probe pod per node), or a
    usage error."""
    import os

    import pytest

    from gpuready import kube
    from gpuready.conformance.report import FleetResults
    from gpuready.spec import parse_data_overrides

    if config.getoption("inventory"):
        raise pytest.UsageError(
            "--discover builds the expectations from the cluster: give it or --inventory, not both"
        )
    connection = config.getoption("connection") or "pod"
    if connection not in ("pod", "local"):
        raise pytest.UsageError(
            f"--discover --connection {connection}: discovered nodes have no SSH data; use --connection pod (the "
            "default with --discover) or local"
        )
    try:
        overrides = parse_data_overrides(config.getoption("data"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    kubeconfig = config.getoption("kubeconfig") or overrides.get("kubeconfig")
    context = config.getoption("kube_context")
    from gpuready.arguments import in_pod

    if not (kubeconfig or context or os.environ.get("KUBECONFIG") or in_pod()):
        raise pytest.UsageError(
            "--discover reads the cluster: give it one (--kubeconfig, --kube-context, $KUBECONFIG, or run the "
            "suite in a pod with a service account)"
        )
    timeout = float(config.getoption("command_timeout"))
    try:
        cluster = kube.connect(kubeconfig, context, timeout=timeout)
    except kube.KubeError as exc:
        raise pytest.UsageError(f"--discover: {exc}") from None
    names = [n.strip() for n in (config.getoption("nodes") or "").split(",") if n.strip()]
    pod_timeout = float(config.getoption("pod_timeout") or overrides.get("pod_timeout") or 300)
    suite = new_suite(config, [], f"(discovered from {cluster.url})", connection, kubeconfig, pod_timeout)
    suite.cluster = cluster

    def gather(wanted: dict[str, list[str]]) -> None:
        if connection == "pod":  # the same probe pod gathers the host and gpu layers' commands (one round)
            # A node's NVSwitches are learned from this very probe (its fabric state), so their commands (Fabric
            # Manager, NVLink) are asked of every node: without them an NVSwitch node took a second probe pod
            # once discovered (measured on the lab's H100); a node without NVSwitches answers them unused.
            specs = {n.name: dataclasses.replace(n, nvswitch=True) for n in suite.nodes}
            suite.probe_fleet().gather({n: [*c, *suite.probe_commands(specs[n])] for n, c in wanted.items()})

    def prober(specs: Sequence[NodeSpec]) -> Mapping[str, Mapping[str, Output] | None]:
        suite.nodes = list(specs)
        if connection == "local" and len(specs) > 1:
            raise pytest.UsageError(
                f"--connection local checks this machine as one node, but {len(specs)} GPU nodes were discovered: "
                "add --nodes <this machine's node name>"
            )
        return probe_answers(gather, suite.runner)(specs)

    try:
        found, fleet = discover_cluster(
            cluster,
            prober,
            names,
            config.getoption("expect_driver"),
            config.getoption("expect_toolkit"),
            overrides,
        )
    except SpecError as exc:
        suite.close()
        raise pytest.UsageError(str(exc)) from None
    except BaseException:
        suite.close()
        raise
    if not fleet.nodes:
        suite.close()
        left = "; ".join(f"{n}: {why}" for n, why in found.undiscoverable.items())
        raise pytest.UsageError(
            f"--discover: no GPU node found in {cluster.url}" + (f" ({left})" if left else "")
        )
    suite.nodes = list(fleet.nodes.values())
    suite.inventory = fleet.inventory
    suite.results = FleetResults(
        [n.name for n in suite.nodes], fleet.inventory, started=suite.results.started
    )
    if suite.probes is not None:
        suite.probes.nodes = {n.name: n for n in suite.nodes}
    suite.discovery = found
    if suite.report_dir:  # what was discovered, as an inventory to review, pin and commit
        from pathlib import Path

        path = Path(suite.report_dir) / INVENTORY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(discovery.render_inventory(found))
        suite.notes.append(f"--discover: wrote {path} (review it, pin it, then run with --inventory)")
    for name, why in found.undiscoverable.items():
        suite.notes.append(
            f"--discover: {name}: its expectations could not be read ({why}): it fails the host layer"
        )
    suite.notes.append(
        "--discover: pools (product + sharing): "
        + "; ".join(f"{pool}: {len(members)} node(s)" for pool, members in found.pools.items())
    )
    return suite


def main(args: Any) -> int:
    """``gpuready discover``: print the discovered inventory (stdout) and what disagrees (stderr)."""
    import sys

    from gpuready import kube
    from gpuready.conformance.probe import ProbeFleet

    try:
        cluster = kube.connect(args.kubeconfig, args.kube_context, timeout=args.command_timeout)
    except kube.KubeError as exc:
        print(f"gpuready discover: {exc}", file=sys.stderr)
        return 2
    overrides = {"probe_image": args.probe_image} if args.probe_image else {}
    probes = ProbeFleet([], lambda: cluster, args.command_timeout, args.pod_timeout)

    def prober(specs: Sequence[NodeSpec]) -> Mapping[str, Mapping[str, Output] | None]:
        probes.nodes = {n.name: n for n in specs}
        return probe_answers(probes.gather, probes.runner)(specs)

    names = [n.strip() for n in (args.nodes or "").split(",") if n.strip()]
    try:
        found, fleet = discover_cluster(
            cluster,
            None if args.no_probe else prober,
            names,
            args.expect_driver,
            args.expect_toolkit,
            overrides,
        )
    except SpecError as exc:
        print(f"gpuready discover: the cluster declares what an inventory may not: {exc}", file=sys.stderr)
        return 2
    finally:
        probes.delete()
    sys.stdout.write(discovery.render_inventory(found))
    unanswered = [
        n for n in fleet.nodes if not args.no_probe and probes.backends.get(n) and probes.backends[n].error
    ]
    for name in unanswered:
        print(f"gpuready discover: {name}: {probes.backends[name].error}", file=sys.stderr)
    count = 0
    for name in found.hosts:
        for kind in discovery.KINDS:
            for text in found.of(name, kind):
                count += 1
                print(f"gpuready discover: {name}: {kind}: {text}", file=sys.stderr)
    left = f" ({len(found.undiscoverable)} left out of the inventory)" if found.undiscoverable else ""
    print(
        f"gpuready discover: {len(found.hosts)} GPU node(s){left} in {len(found.pools)} pool(s), "
        f"{count} problem(s)",
        file=sys.stderr,
    )
    return 1 if count or unanswered else 0
