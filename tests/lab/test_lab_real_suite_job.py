"""The suite's Job and CronJob run the conformance suite inside a real-kubelet lab (issue #30, done-when item 2).

On the shared real-kubelet lab (conftest.real_l4_lab: trixie, the L4 profile: 1 GPU), converged by gpuready's node deploy and add-ons deploy (NVIDIA's real device plugin gives the node its
``nvidia.com/gpu``, which is how ``--discover`` finds it). The lab makes the suite's image and the probe image
(:mod:`gpuready.lab.suite_image`: the wheel of this checkout and its dependencies on the lab's trixie base root) and
imports both into the host's containerd. Then ``gpuready manifests --layers host,gpu --write-back --taint-failed
--taint-max-fraction 1`` is applied as printed: the Job runs ``gpuready check --discover --connection pod`` in a
real runc container under the least-RBAC ServiceAccount (the pod's own token, no kubeconfig), starts the probe pod
on the node and writes the verdict back: ``GPUConformance=True`` / ``ChecksPassed``. With uncorrectable ECC errors
injected into the GPU (``hosts.inject_fault(..., "ecc-uncorrectable")``) a Job made from the CronJob fails, and
the node gets ``GPUConformance=False`` / ``ChecksFailed`` naming ``gpu/test_no_uncorrectable_ecc_errors``, the
label ``fail`` and the taint ``gpuready.io/conformance-failed:NoSchedule``; with the fault cleared a third run
passes and takes the taint off.

Layers: host and gpu (probe pods). Left out: node, because its ``test_dcgm_exporter_ready`` fails here (the lab
builds no dcgm-exporter image for real-kubelet hosts: the pod stays ``ErrImagePull``); tried with
``--layers host,gpu,node``, every other check passed (30 passed, 8 skipped, that 1 failed), so the node layer's
RBAC and in-cluster reads work. Workloads, metrics, policy and diag need CUDA sample images and dcgm-exporter,
which the lab does not build either.

Measured (2 cores shared with other labs and Go builds, warm caches), two runs: **2 passed in 306 s** (setup 221
s: lab up and both deploys 199 s, images 11.4 s, import into containerd 10.1 s, GFD's labels there at once; the
Jobs 20 s healthy: "all 23 checks that ran passed (4 skipped)", 26 s faulted: "1 of 27 checks failed:
gpu/test_no_uncorrectable_ecc_errors", 23 s repaired; teardown 10 s) and 420 s beside busier labs (setup 234 s,
Jobs 37/56/50 s). Cold, the images add pip once (first build, base layer and dependencies: 138 s). Sizes: the suite
image 324 MB uncompressed (base layer 176 MB, shared with the probe image; dependencies 146 MB; gpuready 2.3 MB).

One lab-only stand-in, not a product setting: the lab's only node is the GPU node, tainted by the inventory's
``node_taints``; a real cluster runs the Job on a CPU node. The Job and CronJob get tolerations for the GPU node's
own taints and for the suite's own taint (so the third run can take it off), added to the printed YAML; nothing
else in it changes. The pod reaches the API server through the ``kubernetes`` Service (the lab's real kube-proxy).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REAL_NODE, Lab, RealLab
from polling import wait_for
from pyinfra_runs import run_pyinfra
from test_lab_real_kubelet import _kubectl

from gpuready import __version__
from gpuready.conformance import manifests, verdict_back
from gpuready.lab import hosts, suite_image

pytestmark = pytest.mark.lab

NODE = REAL_NODE
REPO = Path(__file__).resolve().parents[2]
LAYERS = "host,gpu"
JOB_TIMEOUT_S = 420.0
TIMINGS: dict[str, float] = {}


def _say(message: str) -> None:
    print(f"[suite-job] {message}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def job_lab(real_l4_lab: RealLab, tmp_path_factory: pytest.TempPathFactory) -> Any:
    started = time.monotonic()
    lab = real_l4_lab.lab
    addons = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
    assert addons.returncode == 0, addons.output[-6000:]
    TIMINGS["add-ons deploy"] = time.monotonic() - started
    t = time.monotonic()
    wheel = suite_image.build_wheel(REPO, tmp_path_factory.mktemp("suite-wheel"))
    archives = dict([suite_image.probe_archive(_say), suite_image.suite_archive(wheel, __version__, _say)])
    TIMINGS["images"] = time.monotonic() - t
    t = time.monotonic()
    suite_image.import_into(lab.paths, NODE, archives)
    TIMINGS["import"] = time.monotonic() - t
    t = time.monotonic()
    _gfd_labels(lab)
    TIMINGS["GFD labels"] = time.monotonic() - t
    yield lab
    _say(f"timings: {json.dumps({k: round(v, 1) for k, v in TIMINGS.items()})}")


GFD_FEATURES = "/etc/kubernetes/node-feature-discovery/features.d/gfd"  # GFD's default --output-file
PRODUCT_LABEL = "nvidia.com/gpu.product"
GFD_WAIT_S = 300.0


def _gfd_labels(lab: Lab) -> None:
    """The Node's GFD labels, which the suite's discovery reads: written by the real GFD and NFD when they run."""

    def labelled() -> bool:
        return PRODUCT_LABEL in _node(lab)["metadata"].get("labels", {})

    deadline = time.monotonic() + GFD_WAIT_S
    while time.monotonic() < deadline and not labelled():
        time.sleep(2)
    if labelled():
        return
    features = lab.ssh(NODE, f"cat {GFD_FEATURES}", check=False).stdout
    logs = _kubectl(lab.state, "logs", "-n", "gpu-system", "-l", "app.kubernetes.io/name=gpu-feature-discovery",
                    "--all-containers", "--prefix", "--tail=30")  # fmt: skip
    pods = _kubectl(lab.state, "get", "pods", "-A", "-o", "wide").stdout
    raise AssertionError(
        f"no GFD labels on {NODE} after {GFD_WAIT_S:.0f} s\n--- {GFD_FEATURES}\n{features}\n--- GFD logs\n"
        f"{logs.stdout[-4000:]}{logs.stderr}\n--- pods\n{pods}"
    )


def _get(lab: Lab, *args: str) -> dict[str, Any]:
    r = _kubectl(lab.state, "get", *args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _node(lab: Lab) -> dict[str, Any]:
    return _get(lab, "node", NODE)


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    conds = node.get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == verdict_back.CONDITION_TYPE), {})


def _tolerations(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Lab only (module docstring): the GPU node's own taints and the suite's."""
    taints = [t for t in node.get("spec", {}).get("taints", []) if t["key"] != verdict_back.TAINT_KEY]
    own = {"key": verdict_back.TAINT_KEY, "effect": verdict_back.TAINT_EFFECT}
    return [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in taints] + [
        {**own, "operator": "Exists"}
    ]


def _manifests(lab: Lab) -> list[dict[str, Any]]:
    """`gpuready manifests` as a user runs it (the default image: the lab's suite image), plus the tolerations."""
    argv = [str(REPO / ".venv/bin/gpuready"), "manifests", "--layers", LAYERS, "--write-back", "--taint-failed",
            "--taint-max-fraction", "1"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    objects = list(yaml.safe_load_all(out))
    tolerations = _tolerations(_node(lab))
    for obj in objects:
        if obj["kind"] == "Job":
            obj["spec"]["template"]["spec"]["tolerations"] = tolerations
        elif obj["kind"] == "CronJob":
            obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["tolerations"] = tolerations
    return objects


def _pods_of(lab: Lab, job: str) -> list[dict[str, Any]]:
    return _get(lab, "pods", "-n", manifests.DEFAULT_NAMESPACE, "-l", f"job-name={job}")["items"]


def _diagnose(lab: Lab, job: str) -> str:
    pods = _pods_of(lab, job)
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        log = _kubectl(lab.state, "logs", "-n", manifests.DEFAULT_NAMESPACE, name, "--tail=80")
        out.append(
            f"--- {name}: {json.dumps(pod.get('status', {}))[-1500:]}\n{log.stdout[-6000:]}{log.stderr}"
        )
    events = _kubectl(lab.state, "get", "events", "-A", "--sort-by=.lastTimestamp")
    journal = lab.ssh(NODE, "journalctl -u kubelet --no-pager -o cat | tail -25", check=False).stdout
    return "\n".join(out) + f"\n--- events\n{events.stdout[-3000:]}\n--- kubelet\n{journal}"


def _finish(lab: Lab, job: str) -> str:
    """Wait for the Job to complete or fail; 'Complete' or 'Failed'."""

    def done() -> str | None:
        conds = (
            _get(lab, "job", "-n", manifests.DEFAULT_NAMESPACE, job).get("status", {}).get("conditions", [])
        )
        return next(
            (c["type"] for c in conds if c["type"] in ("Complete", "Failed") and c["status"] == "True"), None
        )

    started = time.monotonic()
    try:
        result = wait_for(done, JOB_TIMEOUT_S, f"Job {job} to finish")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(lab, job)}") from None
    TIMINGS[f"job {job}"] = time.monotonic() - started
    return str(result)


def test_the_job_runs_the_suite_in_the_cluster_and_the_healthy_node_passes(job_lab: Lab) -> None:
    objects = _manifests(job_lab)
    job = next(o for o in objects if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"gpuready:{__version__}"
    applied = _kubectl(job_lab.state, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    assert applied.returncode == 0, applied.stderr
    result = _finish(job_lab, manifests.NAME)
    assert result == "Complete", _diagnose(job_lab, manifests.NAME)

    pod = _pods_of(job_lab, manifests.NAME)[0]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == manifests.NAME
    mounts = spec["containers"][0].get("volumeMounts", [])
    assert not [m for m in mounts if "kube" in m["mountPath"] and "serviceaccount" not in m["mountPath"]], (
        mounts
    )
    assert not [e for e in spec["containers"][0].get("env", []) if e["name"] == "KUBECONFIG"]
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    log = _kubectl(job_lab.state, "logs", "-n", manifests.DEFAULT_NAMESPACE, pod["metadata"]["name"]).stdout
    assert "passed" in log and NODE in log, log[-4000:]

    node = _node(job_lab)
    cond = _condition(node)
    assert (cond.get("status"), cond.get("reason")) == ("True", "ChecksPassed"), (cond, log[-3000:])
    _say(f"healthy node: {cond['message']}")
    assert node["metadata"]["labels"].get(verdict_back.LABEL) == "pass"
    assert not verdict_back.has_taint(node)


def _job_from_cronjob(lab: Lab, name: str, expected: str) -> None:
    """A Job made from the CronJob (as `kubectl create job --from` does) ends `expected` ("Complete"/"Failed")."""
    made = _kubectl(lab.state, "create", "job", "-n", manifests.DEFAULT_NAMESPACE, name,
                    f"--from=cronjob/{manifests.NAME}")  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert _finish(lab, name) == expected, _diagnose(lab, name)


def test_a_faulted_node_gets_the_failing_condition_and_the_taint(job_lab: Lab) -> None:
    hosts.inject_fault(job_lab.paths, NODE, "ecc-uncorrectable", gpu=0)
    try:
        _job_from_cronjob(job_lab, "gpuready-conformance-faulted", "Failed")
        node = _node(job_lab)
        cond = _condition(node)
        assert (cond.get("status"), cond.get("reason")) == ("False", "ChecksFailed"), cond
        assert "gpu/test_no_uncorrectable_ecc_errors" in cond["message"], cond["message"]
        _say(f"faulted node: {cond['message']}")
        assert node["metadata"]["labels"].get(verdict_back.LABEL) == "fail"
        assert verdict_back.has_taint(node), node["spec"].get("taints")
    finally:
        hosts.inject_fault(job_lab.paths, NODE, None)

    _job_from_cronjob(job_lab, "gpuready-conformance-repaired", "Complete")
    node = _node(job_lab)
    assert _condition(node).get("status") == "True", _condition(node)
    assert not verdict_back.has_taint(node), node["spec"].get("taints")
