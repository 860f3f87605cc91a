"""report.html: failing nodes first and in red, every message escaped, nothing fetched from the network."""

from __future__ import annotations

import re

from gpuready.conformance.html_report import render_html, sorted_nodes
from gpuready.conformance.report import FleetResults, Measurement, write_reports


def fleet() -> FleetResults:
    results = FleetResults(["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"], "inventory/lab.py")
    results.record("gpu-node-1", "host", "test_driver_version", "pass", seconds=0.2)
    results.record("gpu-node-2", "host", "test_nvidia_smi_runs", "skip", "gpu-node-2: <no nvidia-smi>")
    results.record("gpu-node-3", "host", "test_driver_version", "pass")
    results.record(
        "gpu-node-3",
        "diag",
        "test_host_to_device_bandwidth",
        "fail",
        'gpu-node-3: GPU 0: <script>alert("x")</script> & 12.5 GB/s < 44.11',
        1.5,
        (Measurement("lowest host->device", 12.5, 44.11, "GB/s"),),
    )
    results.record("gpu-node-4", "host", "test_driver_version", "pass")
    return results


def test_failing_node_comes_first_then_unproven_then_passing():
    verdict = fleet().verdict(1)
    assert sorted_nodes(verdict) == ["gpu-node-3", "gpu-node-2", "gpu-node-1", "gpu-node-4"]
    page = render_html(verdict)
    rows = re.findall(r'<tr class="node-(\w+)"><td class="name"><a href="#[^"]+">([^<]+)</a>', page)
    assert rows == [
        ("fail", "gpu-node-3"),
        ("skip", "gpu-node-2"),
        ("pass", "gpu-node-1"),
        ("pass", "gpu-node-4"),
    ]
    sections = re.findall(r'<section class="node-\w+" id="node-([^"]+)">', page)
    assert sections == ["gpu-node-3", "gpu-node-2", "gpu-node-1", "gpu-node-4"]
    # failing in red: the failing row's cells and name
    assert re.search(r"\.fail \{[^}]*color: #8b0000", page)
    assert re.search(r"tr\.node-fail td\.name[^{]*\{[^}]*color: #b00000", page)
    assert '<td class="fail">FAIL</td>' in page


def test_messages_are_escaped_and_figures_shown():
    page = render_html(fleet().verdict(1))
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 12.5 GB/s &lt; 44.11" in page
    assert "gpu-node-2: &lt;no nvidia-smi&gt;" in page
    assert "lowest host-&gt;device: 12.5 GB/s (floor 44.11)" in page


def test_self_contained_no_network_needed(tmp_path):
    write_reports(fleet(), tmp_path, 1)
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert not re.search(r"<(script|link|img|iframe)\b", page, re.I)
    assert not re.search(r"(src|href)\s*=\s*\"(?!#)", page)  # only in-page anchors
    assert "@import" not in page and "url(" not in page


def test_a_run_with_no_nodes_still_renders():
    page = render_html(FleetResults([]).verdict(5))
    assert "verdict: FAIL" in page and "</html>" in page  # exit 5: nothing collected is no pass
