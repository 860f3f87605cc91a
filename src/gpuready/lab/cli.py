"""`gpuready lab ...`: bring the local lab up and down, look at it, log into it, break its hardware.

Exposed as `add_lab_parser(subparsers)` for the top-level `gpuready` script and as `python -m gpuready.lab`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from gpuready.lab import faults, hosts, ssh
from gpuready.lab.cluster import cluster
from gpuready.lab.state import LabNotUp, LabPaths, lab_dir, require_state


def _paths() -> LabPaths:
    return LabPaths(lab_dir())


def _up(args: argparse.Namespace) -> int:
    state = hosts.up(
        _paths(),
        nodes=args.nodes,
        profiles=args.profile or None,
        releases=args.os or None,
        control_plane=args.control_plane,
        kubernetes_version=args.kubernetes_version,
    )
    _print_hosts(state)
    return 0


def _down(args: argparse.Namespace) -> int:
    hosts.down(_paths(), poweroff=not args.kill)
    return 0


def _base(args: argparse.Namespace) -> int:
    for suite in dict.fromkeys(args.os or [hosts.DEFAULT_RELEASE]):
        path, seconds = hosts.ensure_base(suite, rebuild=args.rebuild)
        print(f"{suite}: {path} ({'cached' if seconds is None else f'built in {seconds:.1f}s'})")
    return 0


def _status(args: argparse.Namespace) -> int:
    state = hosts.status(_paths())
    if args.json:
        print(json.dumps(state, indent=2, sort_keys=True))
    else:
        _print_hosts(state)
        repo = state["repo"]
        print(
            f"repositories: {repo['base_url']}/ ({'serving' if repo['running'] else 'NOT RUNNING'}), "
            f"keyring {repo['keyring_path']}"
        )
        _print_network(state)
    return 0


def _print_network(state: dict[str, Any]) -> None:
    net = state.get("network")
    if net:
        present = "present" if net.get("present") else "MISSING"
        print(
            f"network: namespace {net['netns']} ({present}), subnet {net['subnet']}, pods {net['pod_cidr']}; "
            f"this machine is {net['root_address']} on {net['root_veth']}"
        )
    api = state.get("apiserver")
    if api:
        print(
            f"control plane: https://{api['endpoint']} ({'serving' if api.get('running') else 'NOT RUNNING'})"
        )
    proxy = (api or {}).get("kube_proxy")
    if proxy and "running" in proxy:  # real-kubelet mode; from `status`
        if not proxy["running"]:
            print(f"kube-proxy: NOT RUNNING (log {proxy['log']})")
        else:
            # it programs Services only once its Node exists (after the node deploy's join) or 30 s passed
            print(
                f"kube-proxy: {'nftables table written' if proxy.get('programmed') else 'waiting for its node'}"
            )
    egress = state.get("egress")
    if egress:
        print(
            f"egress proxy: {egress['address']}:{egress['port']} to {', '.join(egress['allow']) or 'nothing'} "
            f"({'running' if egress.get('running') else 'NOT RUNNING'})"
        )


def _print_hosts(state: dict[str, Any]) -> None:
    memory = any("memory_kib" in h for h in state["hosts"].values())  # from `status`, not from `up`
    print(
        f"{'HOST':<12} {'ADDRESS':<18} {'OS':<9} {'PROFILE':<12} {'GPUS':<28} {'STATE':<8}"
        + (" MEMORY (RSS)" if memory else "")
    )
    for name, h in sorted(state["hosts"].items(), key=lambda item: item[1]["index"]):
        gpus = f"{h['gpu_count']}x {h['gpu_model']}"
        os_name = h.get("os", "bookworm")  # a lab brought up before hosts had a release ran bookworm
        line = f"{name:<12} {h['address']}:{h['port']:<7} {os_name:<9} {h['profile']:<12} {gpus:<28} {_host_state(h):<8}"
        if memory:
            line += " " + _memory(h.get("memory_kib") or {})
        print(line.rstrip())


def _memory(rss_kib: dict[str, int]) -> str:
    """'kubelet 61 MiB, containerd 38 MiB'; '-' before the node deploy started either."""
    return (
        ", ".join(f"{name} {rss_kib[name] / 1024:.0f} MiB" for name in hosts.NODE_DAEMONS if name in rss_kib)
        or "-"
    )


def _host_state(host: dict[str, Any]) -> str:
    if "running" not in host:  # straight from `up`, which returns only once every sshd answered
        return "up"
    if not host["running"]:
        return "down"
    return "up" if host["ssh_answers"] else "running, sshd not answering"


def _ssh(args: argparse.Namespace) -> int:
    paths = _paths()
    host = hosts.host_entry(require_state(paths), args.node)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    argv = ssh.ssh_argv(paths, host["address"], host["port"], command or None)
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def _fault(args: argparse.Namespace) -> int:
    if args.clear == (args.fault is not None):
        print("give either a FAULT or --clear", file=sys.stderr)
        return 2
    lines = hosts.inject_fault(_paths(), args.node, None if args.clear else args.fault, args.gpu)
    for line in lines:
        print(f"{args.node} journal: {line}")
    print(f"{args.node}: {'faults cleared' if args.clear else f'{args.fault} injected'}")
    return 0


def _fault_epilog() -> str:
    """The faults `lab fault` injects, one entry each, from gpuready.lab.faults.FAULTS."""
    width = max(len(name) for name in faults.FAULTS) + 4
    lines = ["faults (per GPU: on the GPU --gpu names, GPU 0 by default; host: on the whole host, no --gpu):"]
    for fault in faults.FAULTS.values():
        scope = "per GPU" if fault.per_gpu else "host"
        needs = f" [needs {fault.needs.replace('_', ' ')}]" if fault.needs else ""
        head = f"  {fault.name:<{width - 2}}"
        lines.append(
            textwrap.fill(
                f"[{scope}] {fault.description}{needs}",
                width=100,
                initial_indent=head,
                subsequent_indent=" " * width,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


def add_lab_parser(subparsers: Any) -> argparse.ArgumentParser:
    lab = subparsers.add_parser("lab", help="a local fleet of Debian hosts with emulated NVIDIA GPUs")
    sub = lab.add_subparsers(dest="lab_command", required=True)
    _add_lab_commands(sub)
    return lab


def _add_lab_commands(sub: Any) -> None:
    p = sub.add_parser("up", help="boot a fresh lab (cleans up whatever a previous lab left)")
    p.add_argument("--nodes", type=int, default=3, help="number of hosts (default 3)")
    p.add_argument(
        "--control-plane",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start the Kubernetes control plane the hosts join (default: on)",
    )
    p.add_argument(
        "--kubernetes-version",
        default=cluster.DEFAULT_VERSION,
        metavar="X.Y.Z",
        help="control plane version, built from k8s.io/kubernetes once and cached (default "
        f"{cluster.DEFAULT_VERSION}, the kubernetes_version default in inventory/group_data/all.py)",
    )
    p.add_argument(
        "--profile",
        action="append",
        metavar="NAME",
        help="hardware profile; repeat to cycle over nodes (default: h100-sxm-8, a100-80gb-4, l4-1)",
    )
    _os_option(p, "Debian release of the hosts; repeat to cycle over nodes like --profile")
    _handles(p, _up)
    p = sub.add_parser("down", help="stop every host and the repository server, remove what the lab made")
    p.add_argument(
        "--kill",
        action="store_true",
        help="kill the hosts instead of powering each off in order (faster: a shutdown waits up to "
        f"{hosts.STOP_TIMEOUT_S:.0f} s for pods whose PID 1 ignores SIGTERM; nothing of a lab is kept either way)",
    )
    _handles(p, _down)
    p = sub.add_parser("status", help="hosts, addresses, profiles and whether they answer")
    p.add_argument("--json", action="store_true")
    _handles(p, _status)
    p = sub.add_parser("ssh", help="log into a lab host (strict host-key checking, lab key)")
    p.add_argument("node")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD... to run a command instead of a shell")
    _handles(p, _ssh)
    p = sub.add_parser(
        "fault",
        help="inject a hardware fault into a host, or --clear all its faults",
        description="Inject a hardware fault into a lab host, or --clear all its faults.",
        epilog=_fault_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("node")
    p.add_argument("fault", nargs="?", metavar="FAULT", help="the fault to inject, one of those below")
    p.add_argument("--gpu", type=int, help="GPU index the fault hits")
    p.add_argument("--clear", action="store_true")
    _handles(p, _fault)
    p = sub.add_parser("base", help="build the cached Debian base roots now (normally done by `up`)")
    p.add_argument("--rebuild", action="store_true")
    _os_option(p, "Debian release to build the base of; repeat for several")
    _handles(p, _base)


def _os_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--os",
        action="append",
        choices=hosts.RELEASES,
        metavar="RELEASE",
        help=f"{what} ({' | '.join(hosts.RELEASES)}; default: {hosts.DEFAULT_RELEASE})",
    )


def _handles(parser: argparse.ArgumentParser, command: Callable[[argparse.Namespace], int]) -> None:
    """Turn the lab's expected failures into one clear line and exit status 1 instead of a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (LabNotUp, hosts.LabError) as exc:
            print(f"gpuready lab: {exc}", file=sys.stderr)
            return 1

    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuready.lab", description=__doc__.splitlines()[0])
    _add_lab_commands(parser.add_subparsers(dest="lab_command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
