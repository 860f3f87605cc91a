"""Metrics layer: dcgm-exporter on every GPU node, scraped through the API server's pod proxy.

Every node's exporter is scraped at once. A GPU pod must be running on the node for the pod-label check: the
workloads layer's sharing pods still hold their GPUs; a node without one gets a pod that holds one GPU (all
started together, one watch); a ``gpu_allocation = "dra"`` node gets a pod holding a ResourceClaim of the run, whose
claim its GPU's series must name (dcgm-exporter's ``dra_claim_*`` labels). The judging is in
:mod:`gpuready.conformance.checks.metrics`.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuready.conformance import dra_workloads as dw
from gpuready.conformance import workloads as wl
from gpuready.conformance.checks import CannotCheck
from gpuready.conformance.checks import metrics as checks
from gpuready.conformance.checks.workloads import pod_resource
from gpuready.conformance.plugin import judge
from gpuready.nvidia.dcgm import parse_dcgm_metrics
from gpuready.spec.kubesyntax import image_repository

pytestmark = pytest.mark.metrics

DCGM_PORT = "9400"


def _exporter_port(pod):
    for container in pod["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "metrics" or str(port.get("containerPort")) == DCGM_PORT:
                return str(port["containerPort"])
    return DCGM_PORT


@pytest.fixture(scope="module")
def scrapes(gpuready_suite, cluster, gpuready_workloads):
    """{node name: (parsed samples or an error message, names of this run's pods running there)}."""
    nodes = [n for n in gpuready_suite.nodes if gpuready_suite.gated(n, "metrics") is None]
    holders, claims = [], {}
    for n in nodes:
        if n.dra:  # a GPU held through a claim of this run, looked for in the dra_claim_* labels
            claim = dw.held_claim(n)
            claims[n.name] = claim["metadata"]["name"]
            dw.create_claims(gpuready_workloads, [claim])
            pod = dw.claim_pod(f"holder-{n.name}", n, n.images.cuda_base, claims[n.name], ["sleep", "infinity"],
                               "metrics")  # fmt: skip
            holders.append((pod, "running"))
        elif not gpuready_workloads.running_on(n.name):
            try:
                res = pod_resource(n)
            except CannotCheck:
                continue
            pod = wl.gpu_pod(
                f"holder-{n.name}", n, n.images.cuda_base, res, command=["sleep", "infinity"], check="metrics"
            )
            holders.append((pod, "running"))
    if holders:
        gpuready_workloads.run(holders, gpuready_suite.pod_timeout)
    core = cluster.core
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    exporters = {}
    # the upstream repository name, or the configured image's repository (a mirror may rename it)
    exporter_repos = {"dcgm-exporter"} | {image_repository(n.images.dcgm_exporter) for n in nodes}
    for pod in pods:
        images = " ".join(c.get("image") or "" for c in pod["spec"].get("containers") or [])
        if any(r in images for r in exporter_repos) and pod.get("status", {}).get("phase") == "Running":
            exporters[pod["spec"].get("nodeName")] = pod

    def scrape(node):
        pod = exporters.get(node.name)
        if pod is None:
            return node.name, "no running dcgm-exporter pod on the node"
        meta = pod["metadata"]
        try:
            text = core.connect_get_namespaced_pod_proxy_with_path(
                f"{meta['name']}:{_exporter_port(pod)}",
                meta["namespace"],
                "metrics",
                _request_timeout=gpuready_suite.timeout,
            )
            return node.name, parse_dcgm_metrics(text)
        except Exception as exc:  # reported by the node's checks, with the pod scraped
            return (
                node.name,
                f"scraping {meta['namespace']}/{meta['name']} failed: {type(exc).__name__}: {exc}",
            )

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        scraped = dict(pool.map(scrape, nodes)) if nodes else {}
    found = {
        name: (value, [r.name for r in gpuready_workloads.running_on(name)], claims.get(name))
        for name, value in scraped.items()
    }
    gpuready_workloads.release(("metrics",), gpuready_suite.pod_timeout)  # scraped: give the GPUs back
    return found


@pytest.fixture
def samples(node, scrapes):
    value = scrapes.get(node.name, ("not scraped", [], None))[0]
    if isinstance(value, str):
        pytest.fail(f"{node.name}: {value}", pytrace=False)
    return value


def test_series_per_gpu(node, samples):
    judge(node, checks.series_per_entity, node, samples)


def test_values_sane(node, samples):
    judge(node, checks.sane_values, samples)


def test_running_pod_in_labels(node, samples, scrapes, gpuready_workloads):
    judge(node, checks.pod_labels, samples, gpuready_workloads.namespace, scrapes[node.name][1])


def test_claim_in_labels(node, samples, scrapes, gpuready_workloads):
    judge(node, checks.claim_labels, node, samples, gpuready_workloads.namespace, scrapes[node.name][2])
