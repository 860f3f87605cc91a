"""The verdict written back (gpuready.conformance.verdict_back), rendered without a cluster: the Node condition, the
label/taint patch, the taint cap, and the metrics file, the last checked by Prometheus's own promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuready.conformance import verdict_back as vb
from gpuready.conformance.report import FleetResults, Measurement
from gpuready.lab.cluster import binaries

NOW = "2026-01-02T03:04:05Z"
BEFORE = "2025-12-01T00:00:00Z"


def results() -> FleetResults:
    r = FleetResults(["good", "bad", "unreached", "idle"], "inventory/lab.py")
    r.record("good", "host", "test_driver", "pass")
    r.record("good", "gpu", "test_count", "pass")
    r.record("good", "workloads", "test_time_slicing", "skip", "not time-sliced")
    r.record(
        "good",
        "diag",
        "test_bandwidth",
        "pass",
        measurements=(
            Measurement("lowest host->device", 52.5, 40.0, "GB/s"),
            Measurement('odd "name"\\', 1, None, "x"),
        ),
    )
    r.record("bad", "host", "test_driver", "pass")
    r.record("bad", "gpu", "test_ecc", "fail", "bad: 3 uncorrectable ECC errors")
    r.record("bad", "node", "test_ready", "skip", "skipped: gpu layer failed on bad: ...")
    r.record("unreached", "host", "test_connection", "skip", "skipped")
    return r  # "idle": no check ran


def verdicts() -> dict[str, vb.NodeVerdict]:
    return {v.node: v for v in vb.node_verdicts(results())}


def node(labels=None, taints=None, conditions=None, rv="7") -> dict:
    return {
        "metadata": {"name": "n", "labels": labels or {}, "resourceVersion": rv},
        "spec": {"taints": taints} if taints is not None else {},
        "status": {"conditions": conditions or []},
    }


def test_verdicts_pass_fail_and_none_for_all_skipped_or_not_run():
    v = verdicts()
    assert (v["good"].verdict, v["bad"].verdict, v["unreached"].verdict, v["idle"].verdict) == (
        "pass",
        "fail",
        None,
        None,
    )
    assert v["bad"].failed == ("gpu/test_ecc",)


def test_condition_body_and_transition_time_kept_only_while_the_status_stays():
    v = verdicts()
    fresh = vb.status_patch(v["bad"], node(), NOW)
    assert fresh == {
        "status": {
            "conditions": [
                {
                    "type": "GPUConformance",
                    "status": "False",
                    "reason": "ChecksFailed",
                    "message": "1 of 3 checks failed: gpu/test_ecc",
                    "lastHeartbeatTime": NOW,
                    "lastTransitionTime": NOW,
                }
            ]
        }
    }
    old_false = {"type": "GPUConformance", "status": "False", "lastTransitionTime": BEFORE}
    kept = vb.status_patch(v["bad"], node(conditions=[old_false]), NOW)["status"]["conditions"][0]
    assert kept["lastTransitionTime"] == BEFORE and kept["lastHeartbeatTime"] == NOW
    flipped = vb.status_patch(v["good"], node(conditions=[old_false]), NOW)["status"]["conditions"][0]
    assert flipped["status"] == "True" and flipped["reason"] == "ChecksPassed"
    assert flipped["lastTransitionTime"] == NOW
    assert flipped["message"] == "all 3 checks that ran passed (1 skipped)"


def test_message_names_failed_checks_and_is_truncated_with_a_count():
    many = vb.NodeVerdict("n", "fail", tuple(f"gpu/test_check_number_{i}" for i in range(200)), passed=5)
    message = vb.condition_message(many)
    assert len(message) <= vb.MESSAGE_MAX
    assert message.startswith("200 of 205 checks failed: gpu/test_check_number_0, gpu/test_check_number_1")
    shown = message.count("gpu/test_check_number_")
    assert message.endswith(f" and {200 - shown} more")
    short = vb.condition_message(many, limit=80)
    assert len(short) <= 80 and short.endswith(" more")


def test_node_patch_label_and_taint_in_one_patch_with_the_resource_version():
    v = verdicts()
    other = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    patch = vb.node_patch(v["bad"], node(taints=[other]), taint=True)
    assert patch == {
        "metadata": {"labels": {"gpuready.io/conformance": "fail"}, "resourceVersion": "7"},
        "spec": {
            "taints": [
                other,
                {"key": "gpuready.io/conformance-failed", "value": "true", "effect": "NoSchedule"},
            ]
        },
    }
    ours = {"key": "gpuready.io/conformance-failed", "value": "true", "effect": "NoSchedule"}
    untaint = vb.node_patch(v["good"], node({"gpuready.io/conformance": "fail"}, [other, ours]), taint=False)
    assert untaint == {
        "metadata": {"labels": {"gpuready.io/conformance": "pass"}, "resourceVersion": "7"},
        "spec": {"taints": [other]},
    }
    # already as wanted: no request at all; taint None: taints untouched
    assert vb.node_patch(v["good"], node({"gpuready.io/conformance": "pass"}, [other]), taint=False) is None
    assert vb.node_patch(v["bad"], node(), taint=None) == {
        "metadata": {"labels": {"gpuready.io/conformance": "fail"}}
    }


def fleet(*verdicts_: str | None) -> list[vb.NodeVerdict]:
    return [vb.NodeVerdict(f"n{i}", v, ("gpu/x",) if v == "fail" else ()) for i, v in enumerate(verdicts_)]


def test_taint_cap_refuses_beyond_floor_of_the_fraction_and_says_so():
    nodes = fleet(*["pass"] * 7, "fail", "fail", "fail")  # 10 nodes, 3 failing
    plan = vb.plan_taints(nodes, tainted_now={"n0"}, fraction=0.1)
    assert plan.cap == 1 and plan.taint == ["n7"] and plan.refused == ["n8", "n9"] and plan.untaint == ["n0"]
    note = plan.note(0.1)
    assert note is not None and "refused to taint 2 failing node(s) (n8, n9)" in note and "at most 1" in note
    # a failing node already tainted keeps it first (no churn); no room left for the others
    assert vb.plan_taints(nodes, {"n9"}, 0.1).taint == ["n9"]
    # within the cap: all tainted, nothing refused
    roomy = vb.plan_taints(nodes, set(), 0.3)
    assert roomy.taint == ["n7", "n8", "n9"] and roomy.refused == [] and roomy.note(0.3) is None
    # fraction 0 (or a fleet too small for one): never a taint
    assert vb.plan_taints(fleet("fail"), set(), 0.1).taint == []


def test_taint_cap_counts_tainted_nodes_without_a_verdict():
    nodes = fleet(None, "fail", *["pass"] * 8)
    plan = vb.plan_taints(nodes, tainted_now={"n0"}, fraction=0.1)
    assert plan.kept == ["n0"] and plan.taint == [] and plan.refused == ["n1"]


def test_fraction_option_type():
    assert vb.fraction("0.25") == 0.25
    for bad in ("-0.1", "1.5", "nan", "x"):
        with pytest.raises(Exception, match=r"fraction|number"):
            vb.fraction(bad)


class FakeCore:
    """The three calls write_back makes, counted; a 409 on the first node patch of ``conflict``."""

    def __init__(self, nodes: dict[str, dict], conflict: str | None = None) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str]] = []
        self.conflict = conflict
        self.patches: dict[str, list[dict]] = {}

    def read_node(self, name, **kw):
        import json
        from types import SimpleNamespace

        from kubernetes.client.exceptions import ApiException

        self.calls.append(("get", name))
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=json.dumps(self.nodes[name]).encode())

    def patch_node_status(self, name, body, **kw):
        self.calls.append(("status", name))
        self.patches.setdefault(name, []).append(body)

    def patch_node(self, name, body, **kw):
        from kubernetes.client.exceptions import ApiException

        self.calls.append(("patch", name))
        if name == self.conflict:
            self.conflict = None
            raise ApiException(status=409, reason="Conflict")
        self.patches.setdefault(name, []).append(body)


class FakeCluster:
    def __init__(self, core: FakeCore) -> None:
        self.core = core
        self.request_timeout = 5.0


def test_write_back_requests_grow_with_nodes_not_checks():
    r = FleetResults([f"n{i}" for i in range(20)])
    for i in range(20):
        for c in range(30):
            r.record(f"n{i}", "gpu", f"test_{c}", "fail" if (i == 3 and c % 2) else "pass")
    core = FakeCore({f"n{i}": node() for i in range(20)}, conflict="n3")
    lines = vb.write_back(
        FakeCluster(core), r, 1, vb.WriteBack(taint_failed=True, taint_max_fraction=0.1), NOW
    )
    kinds = [k for k, _n in core.calls]
    # 20 GETs, 20 status patches, 20 node patches, and for n3's conflict one re-GET and one more patch
    assert (kinds.count("get"), kinds.count("status"), kinds.count("patch")) == (21, 20, 21)
    assert core.patches["n3"][-1]["spec"]["taints"][0]["key"] == "gpuready.io/conformance-failed"
    assert "15 of 30 checks failed" in core.patches["n3"][0]["status"]["conditions"][0]["message"]
    assert any("on 1 failing node(s)" in line for line in lines), lines


def test_write_back_leaves_nodes_without_a_verdict_and_unfinished_runs_alone():
    core = FakeCore({n: node() for n in ("good", "bad", "unreached", "idle")})
    lines = vb.write_back(FakeCluster(core), results(), 1, vb.WriteBack(), NOW)
    assert set(core.patches) == {"good", "bad"}
    assert "2 without a verdict" in lines[0]
    core = FakeCore({n: node() for n in ("good", "bad")})
    lines = vb.write_back(FakeCluster(core), results(), 2, vb.WriteBack(), NOW)
    assert core.calls == [] and "did not finish" in lines[0]


def test_write_back_names_a_node_it_cannot_read():
    core = FakeCore({"good": node()})
    lines = vb.write_back(FakeCluster(core), results(), 1, vb.WriteBack(), NOW)
    assert any("bad: cannot read the Node (404 Not Found)" in line for line in lines), lines


# --- the metrics file -------------------------------------------------------------------------------------------


def test_metrics_text():
    text = vb.render_metrics(results(), 1, 1767323045.5)
    lines = text.splitlines()
    assert 'gpuready_conformance_checks{node="bad",layer="gpu",status="fail"} 1' in lines
    assert 'gpuready_conformance_checks{node="bad",layer="gpu",status="pass"} 0' in lines
    assert 'gpuready_conformance_checks{node="good",layer="workloads",status="skip"} 1' in lines
    assert not any('node="idle"' in line and "checks{" in line for line in lines)
    assert 'gpuready_conformance_node_verdict{node="unreached",verdict="none"} 1' in lines
    assert (
        'gpuready_conformance_measurement{node="good",layer="diag",check="test_bandwidth",'
        'name="lowest host->device",unit="GB/s"} 52.5'
    ) in lines
    assert (
        'gpuready_conformance_measurement_floor{node="good",layer="diag",check="test_bandwidth",'
        'name="lowest host->device",unit="GB/s"} 40'
    ) in lines
    assert 'name="odd \\"name\\"\\\\"' in text
    assert "gpuready_conformance_last_run_timestamp_seconds 1767323045.5" in lines
    assert "gpuready_conformance_last_run_exit_code 1" in lines
    assert text.endswith("\n") and lines.count("# TYPE gpuready_conformance_checks gauge") == 1


def test_metrics_file_is_replaced_whole(tmp_path):
    target = tmp_path / "textfile" / "gpuready.prom"
    vb.write_metrics(target, "a 1\n")
    vb.write_metrics(target, "a 2\n")
    assert target.read_text() == "a 2\n"
    assert [p.name for p in target.parent.iterdir()] == ["gpuready.prom"]  # no temporary left


@pytest.fixture(scope="module")
def promtool() -> Path:
    found = shutil.which("promtool") or binaries.cached_promtool()
    if not found:
        pytest.skip(f"promtool not found: not on PATH and not in the lab cache ({binaries.promtool_cache()})")
    return Path(found)


def test_metrics_file_passes_promtool(promtool, tmp_path):
    text = vb.render_metrics(results(), 1, 1767323045.5)
    done = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    empty = vb.render_metrics(FleetResults(["idle"]), 5, 1767323045.0)
    done = subprocess.run([str(promtool), "check", "metrics"], input=empty, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


class Options:
    def __init__(self, **values) -> None:
        self.values = {"taint_failed": False, "write_back": False, "metrics_file": None, **values}

    def getoption(self, name):
        return self.values[name]


def test_option_problems(tmp_path):
    assert vb.option_problem(Options()) is None
    assert "add --write-back" in (vb.option_problem(Options(taint_failed=True)) or "")
    assert vb.option_problem(Options(taint_failed=True, write_back=True)) is None
    assert "a directory" in (vb.option_problem(Options(metrics_file=str(tmp_path))) or "")
    assert vb.option_problem(Options(metrics_file=str(tmp_path / "new" / "g.prom"))) is None
