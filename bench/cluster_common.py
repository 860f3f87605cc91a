"""What the cluster benches share: a lab cluster brought up and down like tests/conftest.py's `lab_cluster` (the
lab's network namespace, the real control plane, KWOK with N virtual nodes), and readings of its
processes (/proc) and of the API server's own request counter (/metrics).

Needs root and the cached control-plane binaries (`make control-plane`).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpuready.lab import network
from gpuready.lab.cluster import cluster

COMPONENTS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok")
TICKS = os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def lab_cluster(
    virtual_nodes: int, profile: str = "dgx-h100", grace: str = "40s"
) -> Iterator[tuple[dict[str, Any], float]]:
    """(state entry, seconds `cluster.up` took); everything is stopped and the namespace destroyed after."""
    with tempfile.TemporaryDirectory(prefix="gpuready-cluster-bench-") as tmp:
        root = Path(tmp)
        net = network.plan(root)
        network.ensure(net)
        try:
            start = time.monotonic()
            entry = cluster.up(
                root,
                net,
                "http://deb.debian.org/debian",
                lambda line: print(f"  {line}", flush=True),
                virtual_nodes=virtual_nodes,
                virtual_profile=profile,
                node_monitor_grace_period=grace,
            )
            took = time.monotonic() - start
            try:
                yield entry, took
            finally:
                cluster.down(entry)
        finally:
            network.destroy(net.netns, net.root_veth)


def pids(entry: dict[str, Any]) -> dict[str, int]:
    """Component -> pid: the control plane's and KWOK's."""
    out = {c: p for c, p in (entry.get("pids") or {}).items()}
    out["kwok"] = entry["kwok"]["pid"]
    return {c: out[c] for c in COMPONENTS if c in out}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process so far (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def api_client(entry: dict[str, Any]) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=entry["kubeconfig"], client_configuration=cfg)
    return client.ApiClient(cfg)


_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def request_totals(api: client.ApiClient) -> Counter[tuple[str, str]]:
    """The API server's apiserver_request_total summed by (verb, resource), from its /metrics."""
    text = api.call_api("GET", f"{api.configuration.host}/metrics").read().decode()
    out: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        out[(labels.get("verb", ""), labels.get("resource", ""))] += int(float(m.group("value")))
    return out


def table(rows: list[tuple[str, str]]) -> None:
    for label, value in rows:
        print(f"{label:<64} {value}", flush=True)
