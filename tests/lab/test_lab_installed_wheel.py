"""The suite as a user without a checkout runs it, on the deployed session lab: the wheel built from this checkout,
alone in a fresh virtualenv with only its plain install's dependencies (tests/installed_wheel.py: no extra), run
from an empty directory with no inventory.

* healthy: ``gpuready check --discover --kubeconfig KC --report-dir R`` (that command, nothing added) passes, and
  its verdict.json validates against the JSON Schema the wheel ships;
* one node faulted (an uncorrectable ECC error on the L4 host, last in the inventory): the run fails on that node
  only, and headless chromium shows the report with that node first, in red (the DOM chromium built and the pixels
  of its screenshot, kept beside the report as ``report.png``).

The file sorts after the modules that bring the deployed lab up and before test_lab_lifecycle.py, which takes it
down (tests/lab/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from chromium_report import chromium, colour_bands, dump_dom, matrix_rows, read_png, screenshot
from installed_wheel import fresh_venv_with_wheel, where_gpuready
from suite_runs import failed, faulted, node_of, wait_until_settled

from gpuready.lab.state import load_state

pytestmark = pytest.mark.lab

FAULT, GPU, PROFILE = "ecc-uncorrectable", 0, "l4-1"  # cleared by clearing the fault (no kernel line left)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv_with_wheel(tmp_path_factory.mktemp("wheel"))


def kubeconfig(deployed_lab: Any) -> str:
    state = load_state(deployed_lab.lab.paths) or {}
    path = (state.get("apiserver") or {}).get("kubeconfig")
    assert path, "the lab records no API server kubeconfig"
    return str(path)


def user_check(installed: Path, cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``gpuready check ARGS`` from the venv, in ``cwd``, with none of the lab's or the checkout's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUREADY_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{installed / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    started = time.monotonic()
    done = subprocess.run([installed / "bin" / "gpuready", "check", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1200)  # fmt: skip
    seconds = time.monotonic() - started
    print(f"gpuready check {' '.join(args)}: exit {done.returncode}, {seconds:.1f} s")
    return done, seconds


def valid_verdict(installed: Path, report_dir: Path) -> dict[str, Any]:
    """verdict.json, validated against the schema file of the wheel that wrote it."""
    (schema_path,) = Path(where_gpuready(installed)).parent.glob("conformance/verdict.schema.json")
    schema = json.loads(schema_path.read_text())
    verdict = json.loads((report_dir / "verdict.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(verdict))
    assert not errors, [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:20]]
    return verdict


def test_the_wheel_alone_passes_the_healthy_lab_with_discover(deployed_lab, installed, tmp_path):
    empty, reports = tmp_path / "empty", tmp_path / "R"
    empty.mkdir()
    wait_until_settled(deployed_lab)
    done, _ = user_check(installed, empty, "--discover", "--kubeconfig", kubeconfig(deployed_lab),
                         "--report-dir", str(reports))  # fmt: skip
    out = done.stdout[-4000:] + done.stderr[-2000:]
    assert (reports / "verdict.json").is_file(), out
    verdict = valid_verdict(installed, reports)
    assert failed(verdict) == {}, out
    assert done.returncode == 0, out
    assert verdict["verdict"] == "pass", out
    state = load_state(deployed_lab.lab.paths) or {}
    assert sorted(verdict["nodes"]) == sorted(state["hosts"]), "every lab host is in the verdict"
    for node, data in verdict["nodes"].items():
        layers = {layer: d["status"] for layer, d in data["layers"].items()}
        print(f"{node}: {layers}")
        # the layers every GPU node runs, each proven (a layer whose checks all skipped is 'skip', no pass)
        assert {layers.get(x) for x in ("host", "gpu", "node", "workloads")} == {"pass"}, (node, layers)
    assert str(installed) in where_gpuready(installed)
    assert list(empty.iterdir()) == [], "gpuready check wrote into the directory it ran from"


def test_a_faulted_node_is_first_and_red_in_the_report_chromium_shows(deployed_lab, installed, tmp_path):
    chromium()  # skips, naming the package, where there is none
    node = node_of(deployed_lab, PROFILE)
    reports = tmp_path / "R"
    with faulted(deployed_lab, node, FAULT, GPU):
        done, _ = user_check(installed, tmp_path, "--discover", "--kubeconfig", kubeconfig(deployed_lab),
                             "--report-dir", str(reports), "-m", "host or gpu")  # fmt: skip
    out = done.stdout[-4000:] + done.stderr[-2000:]
    verdict = valid_verdict(installed, reports)
    bad = failed(verdict)
    assert list(bad) == [node], out
    assert any("ECC" in message and message.startswith(f"{node}: ") for message in bad[node].values()), bad
    assert done.returncode == 1, out
    healthy = [n for n in verdict["nodes"] if n != node]
    assert list(verdict["nodes"])[-1] == node, "the faulted node is not last in the inventory: proves nothing"

    page = reports / "report.html"
    assert matrix_rows(dump_dom(page, tmp_path)) == [("fail", node), *(("pass", n) for n in healthy)]
    png = screenshot(page, reports / "report.png")
    print(f"screenshot: {png}")
    bands = colour_bands(read_png(png))
    badge, first, *rest = bands[: 1 + len(verdict["nodes"])]
    assert badge[2] == {"fail"}, bands
    assert "fail" in first[2], f"the matrix's first row is not red: {bands}"
    assert all("fail" not in row[2] and "pass" in row[2] for row in rest), f"a healthy node's row: {bands}"
