"""The GPU alert rules, proven with Prometheus's own promtool: what the add-on deploy writes is a valid rule file,
and each alert fires on its fault series and not on healthy ones (``promtool test rules``, 1-minute evaluation).

promtool comes from Debian's ``prometheus`` package, unpacked into the lab cache by `make control-plane` (which
`make test` runs first; ``python -m gpuready.lab.cluster.binaries``), or from PATH. Without it these tests are
skipped with that reason (shown by -ra), never silently.

Input series carry the labels dcgm-exporter gives them with Kubernetes mapping on, in the order
``gpuready.lab.dcgm_exporter.scrape`` renders them; a GPU no pod holds has empty container/namespace/pod labels,
which Prometheus stores as absent (both spellings are tested).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuready.deploy.addons import (
    GPU_TEMP_ALERT_C,
    AddonSettings,
    prometheus_rule_groups,
    prometheus_rules,
)
from gpuready.lab.cluster import binaries
from gpuready.spec import load_fleet

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "example.py"
ALERTS = (
    "GPUUnderutilised",
    "GPUXidError",
    "GPURowRemapFailure",
    "GPUUncorrectableRemappedRows",
    "GPUTemperatureHigh",
)

GPU = {
    "gpu": "3",
    "UUID": "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9",
    "pci_bus_id": "00000000:3B:00.0",
    "device": "nvidia3",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "nvidia-dcgm-exporter-s228n",
    "DCGM_FI_DRIVER_VERSION": "570.195.03",
}
POD = {"container": "trainer", "namespace": "ml-team", "pod": "train-7f9c4"}
NO_POD_EMPTY = {"container": "", "namespace": "", "pod": ""}  # as the exporter writes it
HELD = {**GPU, **POD}
WHERE = (
    "GPU 3 (NVIDIA H100 80GB HBM3, GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9) on nvidia-dcgm-exporter-s228n"
)


# --- promtool and the file the deploy writes --------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> Path:
    found = shutil.which("promtool") or binaries.cached_promtool()
    if not found:
        pytest.skip(
            f"promtool not found: not on PATH and not in the lab cache ({binaries.promtool_cache()}); "
            "`make control-plane` (run by `make test`) unpacks it from Debian's prometheus package "
            "(python -m gpuready.lab.cluster.binaries)"
        )
    return Path(found)


def deployed_text(settings: AddonSettings) -> str:
    """reports/gpu-alerts.yaml, byte for byte as deploys/cluster_addons.py writes it."""
    return yaml.safe_dump(prometheus_rules(settings), sort_keys=False)


def rule_file(settings: AddonSettings) -> str:
    """The rule file Prometheus loads from that PrometheusRule (the Operator serves its ``spec`` as one)."""
    manifest = yaml.safe_load(deployed_text(settings))
    assert manifest["kind"] == "PrometheusRule" and set(manifest["spec"]) == {"groups"}
    return yaml.safe_dump(manifest["spec"], sort_keys=False)


def example_settings() -> list[AddonSettings]:
    return sorted({AddonSettings.from_node(n) for n in load_fleet(EXAMPLE).nodes.values()}, key=repr)


def run_promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "settings",
    [AddonSettings(), *example_settings()],
    ids=lambda s: f"namespace={s.namespace}",
)
def test_promtool_checks_the_deployed_rules(promtool, tmp_path, settings):
    (tmp_path / "rules.yaml").write_text(rule_file(settings))
    result = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    rules = sum(len(g["rules"]) for g in prometheus_rule_groups())
    assert result.returncode == 0 and f"SUCCESS: {rules} rules found" in result.stdout, (
        result.stdout + result.stderr
    )
    assert {r["alert"] for g in prometheus_rule_groups() for r in g["rules"]} == set(ALERTS)


def test_promtool_refuses_a_broken_rule(promtool, tmp_path):
    """The check has teeth: a rule with a bad expression is refused."""
    groups = yaml.safe_load(rule_file(AddonSettings()))
    groups["groups"][0]["rules"][0]["expr"] = 'DCGM_FI_DEV_GPU_UTIL{pod!=""} <'
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    result = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode != 0, result.stdout


# --- promtool test rules: each alert on fault and healthy series ------------------------------------------------


def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def quiet(at: str, *alerts: str) -> list[dict[str, Any]]:
    """None of `alerts` (all of them by default) is firing at `at`."""
    return [{"eval_time": at, "alertname": a, "exp_alerts": []} for a in alerts or ALERTS]


def annotations(alert: str, summary: str) -> dict[str, str]:
    (rule,) = [r for g in prometheus_rule_groups() for r in g["rules"] if r["alert"] == alert]
    return {"summary": summary, "description": rule["annotations"]["description"]}


def firing(at: str, alert: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    """Exactly one `alert` is firing at `at`, with these labels and this rendered summary."""
    severity = "critical" if alert == "GPURowRemapFailure" else "warning"
    expected = {
        "exp_labels": {**labels, "severity": severity},
        "exp_annotations": annotations(alert, summary),
    }
    return {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}


IDLE_SUMMARY = f"{WHERE} is allocated to ml-team/train-7f9c4 but under 10% busy"
SCENARIOS: dict[str, tuple[list[dict[str, str]], list[dict[str, Any]]]] = {
    # GPUUnderutilised
    "idle GPU held by a pod fires at 30 minutes, not before": (
        [series("DCGM_FI_DEV_GPU_UTIL", HELD, "4x45")],
        [
            *quiet("0m", "GPUUnderutilised"),
            *quiet("29m", "GPUUnderutilised"),
            firing("30m", "GPUUnderutilised", HELD, IDLE_SUMMARY),
            firing("45m", "GPUUnderutilised", HELD, IDLE_SUMMARY),
        ],
    ),
    "just under 10% counts as idle, 10% does not": (
        [
            series("DCGM_FI_DEV_GPU_UTIL", HELD, "9x40"),
            series("DCGM_FI_DEV_GPU_UTIL", {**HELD, "gpu": "4", "device": "nvidia4"}, "10x40"),
        ],
        [firing("35m", "GPUUnderutilised", HELD, IDLE_SUMMARY)],
    ),
    "busy GPU held by a pod never fires": (
        [series("DCGM_FI_DEV_GPU_UTIL", HELD, "85x90")],
        quiet("30m", "GPUUnderutilised") + quiet("90m", "GPUUnderutilised"),
    ),
    "a GPU going idle after a busy hour fires 30 minutes later": (
        [series("DCGM_FI_DEV_GPU_UTIL", HELD, "95x59 2x45")],
        [*quiet("89m", "GPUUnderutilised"), firing("90m", "GPUUnderutilised", HELD, IDLE_SUMMARY)],
    ),
    "one busy sample restarts the 30 minutes": (
        [series("DCGM_FI_DEV_GPU_UTIL", HELD, "2x19 60 2x45")],
        [
            *quiet("30m", "GPUUnderutilised"),
            *quiet("50m", "GPUUnderutilised"),
            firing("51m", "GPUUnderutilised", HELD, IDLE_SUMMARY),
        ],
    ),
    "idle GPU no pod holds never fires (labels absent)": (
        [series("DCGM_FI_DEV_GPU_UTIL", GPU, "0x90")],
        quiet("30m", "GPUUnderutilised") + quiet("90m", "GPUUnderutilised"),
    ),
    "idle GPU no pod holds never fires (labels empty, as the exporter writes them)": (
        [series("DCGM_FI_DEV_GPU_UTIL", {**GPU, **NO_POD_EMPTY}, "0x90")],
        quiet("30m", "GPUUnderutilised") + quiet("90m", "GPUUnderutilised"),
    ),
    "a pod that lets the GPU go after 20 idle minutes stops the alert": (
        [
            series("DCGM_FI_DEV_GPU_UTIL", HELD, "0x20 stale"),
            series("DCGM_FI_DEV_GPU_UTIL", GPU, "_x21 0x70"),
        ],
        quiet("31m", "GPUUnderutilised") + quiet("90m", "GPUUnderutilised"),
    ),
    # GPUXidError
    "an XID fires at once, naming the code and the pod": (
        [series("DCGM_FI_DEV_XID_ERRORS", HELD, "0x9 79x10")],
        [
            *quiet("9m", "GPUXidError"),
            firing("10m", "GPUXidError", HELD, f"{WHERE} reported XID 79 held by ml-team/train-7f9c4"),
        ],
    ),
    "an XID on a GPU no pod holds names no pod": (
        [series("DCGM_FI_DEV_XID_ERRORS", {**GPU, **NO_POD_EMPTY}, "0 48x5")],
        [firing("1m", "GPUXidError", GPU, f"{WHERE} reported XID 48")],
    ),
    # GPURowRemapFailure and GPUUncorrectableRemappedRows
    "a failed row remap fires at once": (
        [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", HELD, "0x4 1x10")],
        [
            *quiet("4m", "GPURowRemapFailure"),
            firing(
                "5m",
                "GPURowRemapFailure",
                HELD,
                f"{WHERE} failed to remap a memory row held by ml-team/train-7f9c4",
            ),
        ],
    ),
    "rows remapped after uncorrectable errors fire at once": (
        [series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", GPU, "0x4 2x10")],
        [
            *quiet("4m", "GPUUncorrectableRemappedRows"),
            firing(
                "5m",
                "GPUUncorrectableRemappedRows",
                GPU,
                f"{WHERE} has 2 rows remapped after uncorrectable ECC errors",
            ),
        ],
    ),
    # GPUTemperatureHigh
    f"above {GPU_TEMP_ALERT_C} C for 5 minutes fires, not before": (
        [series("DCGM_FI_DEV_GPU_TEMP", HELD, "60x4 92x20")],
        [
            *quiet("9m", "GPUTemperatureHigh"),
            firing(
                "10m",
                "GPUTemperatureHigh",
                HELD,
                f"{WHERE} is at 92 C, above {GPU_TEMP_ALERT_C} C held by ml-team/train-7f9c4",
            ),
        ],
    ),
    "a brief peak does not fire": (
        [series("DCGM_FI_DEV_GPU_TEMP", HELD, "60x4 95x3 60x20")],
        quiet("8m", "GPUTemperatureHigh") + quiet("20m", "GPUTemperatureHigh"),
    ),
    # every alert on a healthy, busy, pod-held GPU (all default counters as the lab exporter renders them)
    "a healthy busy GPU fires nothing": (
        [
            series("DCGM_FI_DEV_GPU_UTIL", HELD, "97x120"),
            series("DCGM_FI_DEV_XID_ERRORS", HELD, "0x120"),
            series("DCGM_FI_DEV_ROW_REMAP_FAILURE", HELD, "0x120"),
            series("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", HELD, "0x120"),
            series("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", HELD, "3x120"),
            series("DCGM_FI_DEV_GPU_TEMP", HELD, f"{GPU_TEMP_ALERT_C}x120"),
        ],
        quiet("1m") + quiet("40m") + quiet("120m"),
    ),
}


def promtool_test(promtool: Path, work: Path, rules: str, scenario: str) -> subprocess.CompletedProcess[str]:
    inputs, checks = SCENARIOS[scenario]
    (work / "rules.yaml").write_text(rules)
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"name": scenario, "interval": "1m", "input_series": inputs, "alert_rule_test": checks}],
    }
    (work / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    return run_promtool(promtool, "test", "rules", "test.yaml", cwd=work)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_promtool_rule_tests(promtool, tmp_path, scenario):
    result = promtool_test(promtool, tmp_path, rule_file(AddonSettings()), scenario)
    assert result.returncode == 0, result.stdout + result.stderr


def mutated(expr: str) -> str:
    groups = yaml.safe_load(rule_file(AddonSettings()))
    groups["groups"][0]["rules"][0]["expr"] = expr
    return yaml.safe_dump(groups, sort_keys=False)


@pytest.mark.parametrize(
    ("expr", "scenario"),
    [
        # the rule before it was proven: a 30-minute average under a 30-minute `for` waits ~an hour after work ends
        (
            'avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[30m]) < 10',
            "a GPU going idle after a busy hour fires 30 minutes later",
        ),
        ("DCGM_FI_DEV_GPU_UTIL < 10", "idle GPU no pod holds never fires (labels absent)"),
        ('DCGM_FI_DEV_GPU_UTIL{pod!=""} < 90', "busy GPU held by a pod never fires"),
    ],
    ids=["30m-average", "no-pod-matcher", "threshold-90"],
)
def test_the_rule_tests_catch_a_wrong_idle_rule(promtool, tmp_path, expr, scenario):
    result = promtool_test(promtool, tmp_path, mutated(expr), scenario)
    assert result.returncode != 0 and "FAILED:" in result.stdout + result.stderr, (
        f"{expr!r} passed {scenario!r}:\n{result.stdout}{result.stderr}"
    )
