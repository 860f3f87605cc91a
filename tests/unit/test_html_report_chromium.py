"""report.html in a real browser: Debian's headless chromium opens the report of a fleet with one faulted node
(written by the report code itself, write_reports), and both the DOM it built and a screenshot of the page show
that node first in the nodes x layers table, in red, and the healthy nodes after it in green.

The screenshot stays beside the report (``<tmp>/reports/report.png``), to look at. The same check on a real lab
run with a fault injected: tests/lab/test_lab_installed_wheel.py. Skipped, with the reason, without chromium."""

from __future__ import annotations

from chromium_report import chromium, colour_bands, dump_dom, matrix_rows, read_png, screenshot

from gpuready.conformance.report import FleetResults, write_reports

NODES = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
FAULTED = "gpu-node-2"  # in the middle of the inventory: first in the report only because it failed
HEALTHY = [n for n in NODES if n != FAULTED]


def faulted_fleet() -> FleetResults:
    """Three H100 nodes through host, gpu and node; one lost a GPU to XID 79, as the lab's ``xid-79`` fault does."""
    results = FleetResults(NODES, "inventory/lab.py")
    for node in NODES:
        results.record(node, "host", "test_driver_version", "pass", seconds=0.4)
        results.record(node, "node", "test_allocatable", "pass", seconds=0.1)
        if node == FAULTED:
            results.record(node, "gpu", "test_gpus_match_spec", "fail",
                           f"{node}: 7 GPU(s) answer of 8 attached: GPU 0000:2A:00.0 is missing", 1.2)  # fmt: skip
            results.record(node, "gpu", "test_no_xid_errors", "fail",
                           f"{node}: XID 79 on PCI:0000:2A:00: GPU has fallen off the bus", 0.3)  # fmt: skip
        else:
            results.record(node, "gpu", "test_gpus_match_spec", "pass", seconds=1.1)
            results.record(node, "gpu", "test_no_xid_errors", "pass", seconds=0.2)
    return results


def test_the_faulted_node_is_first_and_red_in_chromium(tmp_path):
    chromium()  # skips, naming the package, where there is none
    reports = tmp_path / "reports"
    write_reports(faulted_fleet(), reports, 1)
    page = reports / "report.html"

    # the DOM chromium built: the faulted node's row first, then the healthy ones in inventory order
    assert matrix_rows(dump_dom(page, tmp_path)) == [("fail", FAULTED), *(("pass", n) for n in HEALTHY)]

    png = screenshot(page, reports / "report.png")
    print(f"screenshot: {png}")
    bands = colour_bands(read_png(png))
    # top to bottom: the overall FAIL badge, then the matrix's rows: the faulted node's holds the failing red
    # (its verdict and gpu cells) beside its passing layers; the healthy nodes' rows after it hold only green
    assert len(bands) >= 1 + len(NODES), bands
    badge, first, *rest = bands[: 1 + len(NODES)]
    assert badge[2] == {"fail"}, bands
    assert "fail" in first[2], f"the matrix's first row is not red: {bands}"
    assert all(row[2] == {"pass"} for row in rest), (
        f"a row after the faulted node's is not all green: {bands}"
    )
