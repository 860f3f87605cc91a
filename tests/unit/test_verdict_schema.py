"""verdict.json against its JSON Schema (gpuready/conformance/verdict.schema.json, shipped in the package)."""

from __future__ import annotations

import json
import re
import tomllib
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest

import gpuready
from gpuready.conformance.report import (
    SCHEMA_VERSION,
    FleetResults,
    Measurement,
    public_url,
    schema,
    write_reports,
)

REPO = Path(__file__).resolve().parents[2]


def validator() -> jsonschema.protocols.Validator:
    loaded = schema()
    cls = jsonschema.validators.validator_for(loaded)
    cls.check_schema(loaded)  # the schema itself is a valid draft 2020-12 schema
    return cls(loaded)


def fleet() -> FleetResults:
    results = FleetResults(["gpu-node-1", "gpu-node-2", "gpu-node-3"], "inventory/lab.py")
    results.record("gpu-node-1", "host", "test_driver_version", "pass", seconds=0.5)
    results.record(
        "gpu-node-1", "diag", "test_bw", "pass", "", 2.0, (Measurement("lowest h2d", 50.0, None, "GB/s"),)
    )
    results.record("gpu-node-2", "host", "test_driver_version", "fail", "gpu-node-2: driver 1.2 < 3.4", 0.1)
    results.record("gpu-node-2", "gpu", "test_gpus", "skip", "skipped: host layer failed on gpu-node-2")
    return results


def test_the_schema_is_shipped_as_package_data():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "gpuready"
    ]
    assert "conformance/verdict.schema.json" in data
    assert (REPO / "src/gpuready/conformance/verdict.schema.json").is_file()
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert re.fullmatch(schema()["properties"]["schema_version"]["pattern"], SCHEMA_VERSION)


@pytest.mark.parametrize("exit_code", [0, 1, 2, 5])
def test_every_verdict_validates(tmp_path, exit_code):
    results = fleet()
    results.api_server = "https://10.0.0.1:6443"
    write_reports(results, tmp_path, exit_code)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    validator().validate(verdict)
    validator().validate(FleetResults([]).verdict(exit_code))  # no node selected
    validator().validate(FleetResults(["n"]).verdict(exit_code))  # a node with no check


def test_versions_times_durations_and_counts(tmp_path):
    results = fleet()
    write_reports(results, tmp_path, 1)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["schema_version"] == SCHEMA_VERSION
    assert verdict["gpuready_version"] == gpuready.__version__
    started = datetime.fromisoformat(verdict["started_at"])
    finished = datetime.fromisoformat(verdict["finished_at"])
    assert verdict["started_at"].endswith("Z") and started.utcoffset().total_seconds() == 0
    assert started <= finished and verdict["seconds"] >= 0
    node1 = verdict["nodes"]["gpu-node-1"]
    assert node1["layers"]["diag"]["checks"]["test_bw"]["seconds"] == 2.0
    assert node1["layers"]["diag"]["seconds"] == 2.0
    assert node1["counts"] == {"pass": 2, "fail": 0, "skip": 0}
    assert verdict["nodes"]["gpu-node-2"]["layers"]["gpu"] == {
        "status": "skip",
        "counts": {"pass": 0, "fail": 0, "skip": 1},
        "seconds": 0.0,
        "checks": {
            "test_gpus": {
                "status": "skip",
                "message": "skipped: host layer failed on gpu-node-2",
                "seconds": 0.0,
            }
        },
    }
    assert verdict["node_counts"] == {"pass": 1, "fail": 1, "skip": 1}
    assert verdict["counts"] == {"pass": 2, "fail": 1, "skip": 1}


def test_the_api_server_is_recorded_without_credentials():
    results = fleet()
    results.api_server = "https://admin:s3cret@k8s.example.com:6443/prefix?token=abc#x"
    verdict = results.verdict(0)
    assert verdict["api_server"] == "https://k8s.example.com:6443/prefix"
    assert "s3cret" not in json.dumps(verdict) and "abc" not in json.dumps(verdict)
    assert public_url("https://[fd00::1]:6443") == "https://[fd00::1]:6443"
    assert public_url(None) is None and public_url("") is None


@pytest.mark.parametrize(
    "broken",
    [
        lambda v: v.pop("schema_version"),
        lambda v: v.update(verdict="ok"),
        lambda v: v.update(started_at="2025-01-01 12:00"),  # not ISO 8601 UTC
        lambda v: v["nodes"]["gpu-node-1"]["layers"]["host"]["checks"]["test_driver_version"].pop("seconds"),
        lambda v: v["nodes"]["gpu-node-1"]["layers"].update(firmware={}),  # no such layer
        lambda v: v["counts"].update(error=1),
    ],
)
def test_the_schema_refuses_what_readers_could_not_read(broken):
    verdict = fleet().verdict(1)
    validator().validate(verdict)
    broken(verdict)
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(verdict)
