"""--write-back, --taint-failed and --metrics-file against the lab's real API server: the suite's node layer
(test_ready and test_inventory_labels, which read only the Node objects) run in-process on fresh virtual nodes,
one of them faulted by a missing inventory label. The verdict lands as the GPUConformance condition (through
nodes/status), the gpuready.io/conformance label and, asked for, the taint, within --taint-max-fraction."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from inventories import write_inventory
from kube_fleet import copy_suite
from kubernetes import client
from shims import GROUP_DATA, JOIN, PROFILE_INVENTORY

from gpuready.conformance import verdict_back as vb
from gpuready.lab.cluster import binaries
from gpuready.spec import load_fleet

POOL = {"gpuready.io/pool": "training"}


def test_verdict_condition_label_taint_and_the_cap(pytester, lab_cluster, api, virtual_nodes, tmp_path):
    copy_suite(pytester, "test_node.py")
    core = client.CoreV1Api(api)
    names = virtual_nodes(3, "cpu")
    (tmp_path / "group_data").mkdir()
    shutil.copy(GROUP_DATA, tmp_path / "group_data" / "all.py")
    entries = [(n, {**PROFILE_INVENTORY["l4-1"], **JOIN, "node_labels": POOL}) for n in names]
    fleet = load_fleet(write_inventory(tmp_path / "inventory.py", entries))
    good, other, bad = names

    def label(name, present):
        labels = fleet.nodes[name].node_labels
        core.patch_node(
            name, {"metadata": {"labels": {k: (v if present else None) for k, v in labels.items()}}}
        )

    for name in names:
        label(name, present=name != bad)  # the fault: the inventory's labels missing on `bad`

    def node(name):
        return json.loads(core.read_node(name, _preload_content=False).data)

    def verdict_of(name):
        obj = node(name)
        cond = next((c for c in obj["status"]["conditions"] if c["type"] == "GPUConformance"), None)
        tainted = any(t["key"] == vb.TAINT_KEY for t in obj["spec"].get("taints") or [])
        return cond, obj["metadata"]["labels"].get(vb.LABEL), tainted

    def run(*args):
        return pytester.runpytest_inprocess(
            "conformance", "--inventory", str(tmp_path / "inventory.py"), "--kubeconfig", str(lab_cluster.kubeconfig),
            "--command-timeout", "30", "-m", "node", "-k", "test_ready or test_inventory_labels",
            "-p", "no:cacheprovider", "--write-back", "--taint-failed", *args,
        )  # fmt: skip

    # 1. one of three failing, the cap floor(0.34 x 3) = 1: tainted
    prom = tmp_path / "textfile" / "gpuready.prom"
    result = run("--taint-max-fraction", "0.34", "--metrics-file", str(prom))
    assert result.ret == 1
    cond, value, tainted = verdict_of(good)
    assert (cond["status"], cond["reason"], value, tainted) == ("True", "ChecksPassed", "pass", False)
    assert cond["message"] == "all 2 checks that ran passed"
    cond, value, tainted = verdict_of(bad)
    assert (cond["status"], cond["reason"], value, tainted) == ("False", "ChecksFailed", "fail", True)
    assert cond["message"] == "1 of 2 checks failed: node/test_inventory_labels"
    first_transition, first_heartbeat = cond["lastTransitionTime"], cond["lastHeartbeatTime"]
    result.stdout.fnmatch_lines(
        ["*--taint-failed: gpuready.io/conformance-failed:NoSchedule on 1 failing node(s)*"]
    )
    text = prom.read_text()
    assert f'gpuready_conformance_checks{{node="{bad}",layer="node",status="fail"}} 1' in text
    promtool = shutil.which("promtool") or binaries.cached_promtool()
    if promtool:
        done = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr

    # 2. a second node fails: the cap (1) is taken by the node already tainted; the other is refused and named
    label(other, present=False)
    time.sleep(1.1)  # the times have a resolution of one second
    result = run("--taint-max-fraction", "0.34")
    result.stdout.fnmatch_lines([f"*refused to taint 1 failing node(s) ({other})*allows at most 1 tainted*"])
    cond, value, tainted = verdict_of(other)
    assert (cond["status"], value, tainted) == ("False", "fail", False)
    cond, value, tainted = verdict_of(bad)
    assert tainted and cond["lastTransitionTime"] == first_transition  # still False: no transition
    assert cond["lastHeartbeatTime"] != first_heartbeat

    # 3. both fixed: the taint comes off, the condition turns True
    label(other, present=True)
    label(bad, present=True)
    result = run("--taint-max-fraction", "0.34")
    assert result.ret == 0
    for name in names:
        cond, value, tainted = verdict_of(name)
        assert (cond["status"], value, tainted) == ("True", "pass", False), name
