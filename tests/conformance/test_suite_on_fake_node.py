"""The suite users run (conformance/), in-process, against a fake host: the lab's emulated nvidia-smi and
stand-in tools on PATH, ``--connection local``. A healthy host passes; each lab fault and each missing deploy
step fails exactly the checks that fault touches, with a message naming the node and the cause; later layers
are skipped with the gate reason."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import xml.etree.ElementTree as ET

import pytest
from shims import read_verdict
from sshd import SshServer

from gpuready.conformance.runners import bound_to_session

HOST_CHECKS = [
    "test_connection",
    "test_nvidia_smi_runs",
    "test_driver_version",
    "test_no_driver_library_mismatch",
    "test_persistence_mode",
    "test_fabric_manager_active",
    "test_toolkit_version",
    "test_driver_security_floor",
    "test_toolkit_security_floor",
    "test_containerd_nvidia_handler",
    "test_containerd_cdi",  # skipped: the fake node runs containerd 1.6 in runtime-class mode
    "test_cdi_spec_names_every_device",
    "test_kubelet_active",
]
GPU_CHECKS = [
    "test_gpus_match_spec",
    "test_no_uncorrectable_ecc_errors",
    "test_no_pending_memory_repairs",
    "test_pcie_link_at_max",
    "test_no_xid_errors",
    "test_no_clock_throttling",
    "test_compute_mode",
    "test_nvlink_up",
    "test_mig_layout",
    "test_vector_add",
    "test_images_cuda_within_the_driver",
]
NO_LIBCUDA = "cannot run vectorAdd here: no libcuda.so.1"
# the diag layer on "this machine" (--connection local): no libcuda here, so the copies are not measured; the
# fake node has the lab's emulated dcgmi on PATH
BANDWIDTH_CHECKS = ["test_host_to_device_bandwidth", "test_device_to_host_bandwidth", "test_peer_bandwidth"]
DIAG_CHECKS = [*BANDWIDTH_CHECKS, "test_dcgm_diagnostics"]


def outcomes(report_dir) -> dict[str, tuple[str, str]]:
    """check name -> (status, message) over all layers of gpu-node-1, from verdict.json."""
    node = read_verdict(report_dir)["nodes"]["gpu-node-1"]
    return {
        check: (result["status"], result["message"])
        for layer in node["layers"].values()
        for check, result in layer["checks"].items()
    }


def failed(report_dir) -> dict[str, str]:
    return {check: message for check, (status, message) in outcomes(report_dir).items() if status == "fail"}


def test_healthy_h100_node_passes_host_and_gpu_layers(make_node, run_suite):
    node = make_node("h100-sxm-8")
    node.activate()
    result, report_dir = run_suite(node.inventory())
    result.assert_outcomes(passed=22, skipped=6)  # 2 of them: the CDI checks (runtime-class mode)
    assert result.ret == 0
    got = outcomes(report_dir)
    assert set(got) == set(HOST_CHECKS) | set(GPU_CHECKS) | set(DIAG_CHECKS)
    assert got["test_vector_add"][0] == "skip" and NO_LIBCUDA in got["test_vector_add"][1]
    for check in BANDWIDTH_CHECKS:
        assert got[check][0] == "skip" and "cannot measure bandwidth here" in got[check][1], got[check]
    assert got["test_dcgm_diagnostics"][0] == "pass"
    verdict = read_verdict(report_dir)
    assert verdict["verdict"] == "pass" and verdict["exit_code"] == 0
    assert verdict["nodes"]["gpu-node-1"]["layers"]["host"]["status"] == "pass"
    result.stdout.re_match_lines(
        [
            r"node\s+host\s+gpu\s+node\s+workloads\s+metrics\s+policy\s+diag",
            r"gpu-node-1\s+PASS\s+PASS\s+-\s+-\s+-\s+-\s+PASS",
        ]
    )


def test_each_command_runs_once_per_node(make_node, run_suite):
    node = make_node("h100-sxm-8")
    node.activate()
    calls = node.root / "calls"
    run_suite(node.inventory())
    lines = calls.read_text().splitlines()
    assert lines.count("nvidia-smi -q -x") == 1
    assert len(lines) == len(set(lines)), lines


# fault -> (GPU or None, {check: words its message must contain}); XIDs come with the kernel lines the lab logs.
GPU_FAULTS = {
    "off-bus": {
        "test_gpus_match_spec": ["7 GPU(s) answer of 8 attached", "GPU 0000:2A:00.0", "fallen off the bus"]
    },
    "xid-79": {
        "test_gpus_match_spec": ["7 GPU(s) answer", "GPU 0000:2A:00.0"],
        "test_no_xid_errors": ["XID 79", "PCI:0000:2A:00", "fallen off the bus"],
    },
    "ecc-uncorrectable": {"test_no_uncorrectable_ecc_errors": ["GPU 1:", "uncorrectable ECC"]},
    "row-remap-pending": {
        "test_no_pending_memory_repairs": ["GPU 1:", "row remapping is pending"],
        "test_no_xid_errors": ["XID 63 on GPU 1", "row remapping"],
    },
    "pcie-downgrade": {"test_pcie_link_at_max": ["GPU 1:", "Gen3 (max Gen5)", "x8 (max x16)"]},
    "nvlink-down": {
        "test_nvlink_up": ["GPU 1: NVLink down", "inActive"],
        "test_no_xid_errors": ["XID 74 on GPU 1", "NVLink error"],
    },
}


@pytest.mark.parametrize("fault", sorted(GPU_FAULTS))
def test_gpu_fault_fails_exactly_its_checks(make_node, run_suite, fault):
    node = make_node("h100-sxm-8")
    node.inject(fault, 1)
    node.activate()
    result, report_dir = run_suite(node.inventory())
    assert result.ret == 1
    got = failed(report_dir)
    assert set(got) == set(GPU_FAULTS[fault]), got
    for check, words in GPU_FAULTS[fault].items():
        assert got[check].startswith("gpu-node-1: ")
        for word in words:  # case-insensitive: the kernel prints PCI ids in lower case, nvidia-smi in upper
            assert word.lower() in got[check].lower(), (check, got[check])
    result.stdout.re_match_lines([r"gpu-node-1\s+PASS\s+FAIL\s+-\s+-\s+-"])


def test_without_journalctl_the_xid_check_reads_dmesg(make_node, run_suite):
    """A node without systemd's journal (a lent H200 VM had none: the check was skipped there) still has its XIDs
    checked, from the kernel's ring buffer: passes healthy, names the GPU of an XID 79."""
    healthy = make_node("l4-1")
    healthy.missing.add("journalctl")
    healthy.activate()
    _, report_dir = run_suite(healthy.inventory(), "-m", "gpu")
    checks = read_verdict(report_dir)["nodes"]["gpu-node-1"]["layers"]["gpu"]["checks"]
    assert checks["test_no_xid_errors"]["status"] == "pass", checks["test_no_xid_errors"]
    node = make_node("h100-sxm-8")
    node.missing.add("journalctl")
    node.inject("xid-79", 1)
    node.activate()
    _, report_dir = run_suite(node.inventory(), "-m", "gpu")
    message = failed(report_dir)["test_no_xid_errors"]
    assert "XID 79 on" in message and "pci:0000:2a:00" in message.lower(), message


# host-side breakage -> (the one failing host check, words in its message)
HOST_BREAKAGE = {
    "fabricmanager-failed": (
        "test_fabric_manager_active",
        ["Fabric Manager is failed", "nvidia-fabricmanager"],
    ),
    "driver-mismatch": (
        "test_no_driver_library_mismatch",
        ["Failed to initialize NVML: Driver/library version mismatch"],
    ),
    "no-nvidia-smi": ("test_nvidia_smi_runs", ["nvidia-smi not found"]),
    "wrong-driver": ("test_driver_version", ["driver version is 595.91.07, the inventory pins 580.178.04"]),
    "no-toolkit": ("test_toolkit_version", ["nvidia-ctk not found"]),
    "wrong-toolkit": ("test_toolkit_version", ["Toolkit is 1.19.1, the inventory pins 1.20.0"]),
    # the pin itself is vulnerable: the version checks pass, the security floors name the bulletins
    "vulnerable-driver": (
        "test_driver_security_floor",
        ["NVIDIA driver 580.95.05 is affected by", "CVE-2025-33219", "(fixed in 580.178.04)", "a_id/5747"],
    ),
    "vulnerable-toolkit": (
        "test_toolkit_security_floor",
        [
            "NVIDIA Container Toolkit 1.17.3 is affected by",
            "CVE-2025-23266",
            "(fixed in 1.19.1)",
            "a_id/5659",
        ],
    ),
    "no-nvidia-handler": ("test_containerd_nvidia_handler", ["containerd has no 'nvidia' runtime handler"]),
    "kubelet-inactive": ("test_kubelet_active", ["kubelet is inactive (`systemctl is-active kubelet`)"]),
    # testinfra's host.service("kubelet").is_enabled: running now, but not after the next reboot
    "kubelet-disabled": (
        "test_kubelet_active",
        [
            "kubelet is active but not enabled: it will not start after a reboot (`systemctl is-enabled kubelet`)"
        ],
    ),
}


def _break(node, breakage: str) -> dict[str, str]:
    """Break the node; returns the inventory data the breakage needs (a pin of the broken version)."""
    if breakage == "vulnerable-driver":
        node.driver_version = "580.95.05"
        return {"nvidia_driver_version": "580.95.05"}
    if breakage == "vulnerable-toolkit":
        node.toolkit_version = "1.17.3"
        return {"nvidia_container_toolkit_version": "1.17.3"}
    if breakage in ("fabricmanager-failed", "driver-mismatch"):
        node.inject(breakage)
    elif breakage == "no-nvidia-smi":
        node.missing.add("nvidia-smi")
    elif breakage == "wrong-driver":
        node.driver_version = "595.91.07"
    elif breakage == "no-toolkit":
        node.missing.add("nvidia-ctk")
    elif breakage == "wrong-toolkit":
        node.toolkit_version = "1.19.1"
    elif breakage == "no-nvidia-handler":
        node.containerd_dump = "containerd-dump-debian-default.toml"
    elif breakage == "kubelet-inactive":
        node.units["kubelet"] = "inactive"
    elif breakage == "kubelet-disabled":
        node.disabled.add("kubelet")
    return {}


@pytest.mark.parametrize("breakage", sorted(HOST_BREAKAGE))
def test_host_breakage_fails_its_check_and_gates_the_gpu_layer(make_node, run_suite, breakage):
    node = make_node("h100-sxm-8")
    pins = _break(node, breakage)
    node.activate()
    result, report_dir = run_suite(node.inventory(**pins))
    assert result.ret == 1
    check, words = HOST_BREAKAGE[breakage]
    got = failed(report_dir)
    assert list(got) == [check], got
    for word in words:
        assert word in got[check], got[check]
    first = got[check].removeprefix("gpu-node-1: ")
    gpu_layer = read_verdict(report_dir)["nodes"]["gpu-node-1"]["layers"]["gpu"]
    assert gpu_layer["status"] == "skip"
    assert {c["message"] for c in gpu_layer["checks"].values()} == {
        f"skipped: host layer failed on gpu-node-1: {first}"
    }
    result.stdout.re_match_lines([r"gpu-node-1\s+FAIL\s+SKIP\s+-\s+-\s+-"])


def test_mig_node_with_its_layout_passes_and_a_missing_instance_fails(make_node, run_suite):
    layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    node = make_node("a100-80gb-4")
    node.activate()
    node.create_mig({0: layout, 1: layout[:3]})
    inventory = node.inventory(gpu_sharing="mig", mig_layout={0: layout, 1: layout})
    _result, report_dir = run_suite(inventory)
    got = failed(report_dir)
    assert list(got) == ["test_mig_layout"], got
    assert "GPU 1: GPU instances" in got["test_mig_layout"] and "missing 1g.10gb" in got["test_mig_layout"]
    assert "GPU 0" not in got["test_mig_layout"]


def test_mig_enabled_where_the_inventory_wants_whole_gpus_fails(make_node, run_suite):
    node = make_node("a100-80gb-4")
    node.activate()
    node.create_mig({2: ["7g.80gb"]})
    _result, report_dir = run_suite(node.inventory())
    assert failed(report_dir) == {
        "test_mig_layout": "gpu-node-1: GPU 2: MIG mode is enabled, the inventory wants a whole GPU"
    }


def test_l4_node_without_nvswitch_skips_the_nvswitch_checks(make_node, run_suite):
    node = make_node("l4-1")
    node.activate()
    result, report_dir = run_suite(node.inventory())
    got = outcomes(report_dir)
    assert got["test_fabric_manager_active"][0] == "skip"
    assert "no NVSwitch" in got["test_fabric_manager_active"][1]
    assert got["test_nvlink_up"][0] == "skip"
    assert result.ret == 0


def test_inventory_model_differs_from_the_hardware(make_node, run_suite):
    node = make_node("l4-1")
    node.activate()
    _result, report_dir = run_suite(node.inventory(gpu_model="NVIDIA L40S", gpu_count=2))
    message = failed(report_dir)["test_gpus_match_spec"]
    assert "1 GPU(s) answer, the inventory says 2" in message
    assert "GPU 0 is NVIDIA L4, the inventory says NVIDIA L40S" in message


def test_fleet_xml_has_one_testsuite_per_node_with_failure_messages(make_node, run_suite):
    node = make_node("h100-sxm-8")
    node.inject("pcie-downgrade", 1)
    node.activate()
    _result, report_dir = run_suite(node.inventory())
    root = ET.parse(report_dir / "fleet.xml").getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["gpu-node-1"]
    cases = {c.get("name"): c for c in suites[0].findall("testcase")}
    assert len(cases) == 28
    failure = cases["gpu / test_pcie_link_at_max"].find("failure")
    assert failure is not None and "Gen3 (max Gen5)" in failure.get("message")
    assert cases["gpu / test_vector_add"].find("skipped") is not None


def test_pytest_junitxml_keeps_working(make_node, run_suite, pytester):
    node = make_node("l4-1")
    node.activate()
    junit = pytester.path / "pytest-junit.xml"
    _result, _report_dir = run_suite(node.inventory(), f"--junitxml={junit}")
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert int(suite.get("tests")) == 28
    assert any(c.get("name") == "test_driver_version[gpu-node-1]" for c in suite.iter("testcase"))


# --- two nodes: the other node passes, gating is per node -----------------------------------------------------

TWO_NODE_CONFTEST = """
import json, os
import pytest
from gpuready.conformance.plugin import SUITE
from gpuready.conformance.runners import NodeRunner, TimedLocalBackend

ENVS = json.loads({envs!r})

@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    suite = session.config.stash[SUITE]
    suite.runner_factory = lambda node, connection, timeout: NodeRunner(
        node.name, TimedLocalBackend(timeout, env={{**os.environ, **ENVS[node.name]}})
    )
"""


def test_two_nodes_one_broken_the_other_passes(make_node, pytester, suite_dir):
    good = make_node("h100-sxm-8")
    bad = make_node("l4-1")
    bad.missing.add("nvidia-smi")
    good.activate()
    bad.activate()
    envs = {"gpu-node-1": good.env(), "gpu-node-2": bad.env()}
    (suite_dir / "conftest.py").write_text(TWO_NODE_CONFTEST.format(envs=json.dumps(envs)))
    inventory = good.root / "two.py"
    good.inventory()  # group_data beside it
    inventory.write_text(
        textwrap.dedent(f"""\
            gpu_nodes = ([
                ('gpu-node-1', {{**{good.inventory_data()!r}}}),
                ('gpu-node-2', {{**{bad.inventory_data()!r}}}),
            ], {{}})
            """)
    )
    report_dir = pytester.path / "report"
    # the conftest above runs each node's commands locally with that node's tools, whatever --connection says
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(inventory), "--report-dir", str(report_dir)
    )
    verdict = read_verdict(report_dir)
    assert verdict["nodes"]["gpu-node-1"]["verdict"] == "pass"
    assert verdict["nodes"]["gpu-node-2"]["verdict"] == "fail"
    gpu2 = verdict["nodes"]["gpu-node-2"]["layers"]
    assert gpu2["host"]["checks"]["test_nvidia_smi_runs"]["message"].startswith(
        "gpu-node-2: nvidia-smi not found"
    )
    assert gpu2["gpu"]["status"] == "skip"
    assert gpu2["gpu"]["checks"]["test_mig_layout"]["message"].startswith(
        "skipped: host layer failed on gpu-node-2: nvidia-smi not found"
    )
    result.stdout.re_match_lines(
        [r"gpu-node-1\s+PASS\s+PASS\s+-\s+-\s+-", r"gpu-node-2\s+FAIL\s+SKIP\s+-\s+-\s+-"]
    )


def test_unreachable_node_fails_its_connection_check_once(make_node, pytester, suite_dir):
    node = make_node("l4-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    inventory = node.inventory(ssh_hostname="127.0.0.1", ssh_port=port, ssh_user="nobody")
    result = pytester.runpytest_inprocess(
        "conformance",
        "--inventory",
        str(inventory),
        "--report-dir",
        str(pytester.path / "report"),
        "--command-timeout",
        "5",
    )
    assert result.ret == 1
    verdict = read_verdict(pytester.path / "report")["nodes"]["gpu-node-1"]["layers"]
    statuses = {check: r["status"] for check, r in verdict["host"]["checks"].items()}
    assert statuses.pop("test_connection") == "fail"
    assert set(statuses.values()) == {"skip"}
    message = verdict["host"]["checks"]["test_connection"]["message"]
    assert message.startswith(f"gpu-node-1: cannot connect over SSH to nobody@127.0.0.1:{port}")
    assert verdict["gpu"]["status"] == "skip"


def test_single_gpu_node_whose_gpu_fell_off_fails_the_host_layer(make_node, run_suite):
    node = make_node("l4-1")
    node.inject("off-bus", 0)
    node.activate()
    _result, report_dir = run_suite(node.inventory())
    got = failed(report_dir)
    assert list(got) == ["test_nvidia_smi_runs"]
    assert "nvidia-smi finds no GPU (exit 6: No devices were found)" in got["test_nvidia_smi_runs"]


# --- over SSH: the default connection, strict host keys, against an in-process SSH server ---------------------------


def _ssh_inventory(node, server, known_hosts_line: str):
    key = node.root / "id_ecdsa"
    server.client_key.write_private_key_file(str(key))
    known = node.root / "known_hosts"
    known.write_text(known_hosts_line)
    return node.inventory(
        ssh_hostname="127.0.0.1",
        ssh_port=server.port,
        ssh_user="tester",
        ssh_key=str(key),
        ssh_known_hosts_file=str(known),
    )


def _on_fake_node(node):
    env = {**os.environ, **node.env()}

    def execute(command: str) -> tuple[int, bytes, bytes]:
        # as sshd runs it: standard input is the session's, open while the session lasts (the runner's commands
        # end when it closes: runners.bound_to_session)
        session_in, keep_open = os.pipe()
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command], env=env, stdin=session_in, capture_output=True, check=False
            )
        finally:
            os.close(session_in)
            os.close(keep_open)
        return done.returncode, done.stdout, done.stderr

    return execute


def test_over_ssh_the_suite_sees_the_same_node(make_node, pytester, suite_dir):
    node = make_node("h100-sxm-8")
    node.inject("nvlink-down", 3)
    node.activate()
    with SshServer(_on_fake_node(node)) as server:
        inventory = _ssh_inventory(node, server, server.known_hosts_line())
        result = pytester.runpytest_inprocess(
            "conformance", "--inventory", str(inventory), "--report-dir", str(pytester.path / "report")
        )
    got = failed(pytester.path / "report")
    assert set(got) == {"test_nvlink_up", "test_no_xid_errors"}
    assert "GPU 3: NVLink down" in got["test_nvlink_up"]
    assert outcomes(pytester.path / "report")["test_vector_add"][0] == "skip"  # local only
    result.assert_outcomes(
        passed=19, failed=2, skipped=7
    )  # vectorAdd (local only), the CDI checks, diag (gated)
    smi = bound_to_session("nvidia-smi -q -x")  # as the runner sends it: it ends with its session
    assert server.commands.count(smi) == 1


def test_over_ssh_an_unknown_host_key_fails_the_connection_check(make_node, pytester, suite_dir):
    node = make_node("l4-1")
    node.activate()
    with SshServer(_on_fake_node(node)) as server:
        inventory = _ssh_inventory(node, server, "")
        pytester.runpytest_inprocess(
            "conformance", "--inventory", str(inventory), "--report-dir", str(pytester.path / "report")
        )
    got = failed(pytester.path / "report")
    assert list(got) == ["test_connection"]
    assert "not found in known_hosts (host keys are always checked" in got["test_connection"]
    assert server.commands == []


def test_an_image_newer_than_the_drivers_cuda_fails_the_gpu_layer(make_node, run_suite):
    """nvidia-smi on the node says CUDA 13.0 (driver 580); an inventory image built for CUDA 13.1 would fail there
    with "CUDA driver version is insufficient": the gpu layer says so before any pod runs."""
    node = make_node("h100-sxm-8")
    node.activate()
    newer = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda13.1.0-ubuntu24.04"
    result, report_dir = run_suite(node.inventory(vectoradd_image=newer))
    assert result.ret == 1
    got = failed(report_dir)
    assert list(got) == ["test_images_cuda_within_the_driver"], got
    assert got["test_images_cuda_within_the_driver"] == (
        f"gpu-node-1: vectoradd_image {newer} needs CUDA 13.1, the driver here supports CUDA 13.0 "
        "(nvidia-smi, driver 580.178.04)"
    )


SITE_CHECKS = """
\"\"\"Checks of our own, beside the layer files: they get the node and its testinfra host, and land in the
node's report under the host layer.\"\"\"
import pytest

pytestmark = pytest.mark.host


def test_site_hostname_file(node, host):
    assert host.file("/etc/hostname").exists


def test_site_ntp_daemon(node, host):
    assert host.exists("chronyd-gpuready-site"), f"{node.name}: chrony is not installed"
"""


def test_a_site_check_file_beside_the_layers_lands_in_the_per_node_report(make_node, run_suite, suite_dir):
    node = make_node("l4-1")
    node.activate()
    (suite_dir / "test_site_checks.py").write_text(SITE_CHECKS)
    result, report_dir = run_suite(node.inventory())
    host_layer = read_verdict(report_dir)["nodes"]["gpu-node-1"]["layers"]["host"]
    assert host_layer["checks"]["test_site_hostname_file"]["status"] == "pass"
    ntp = host_layer["checks"]["test_site_ntp_daemon"]
    assert ntp["status"] == "fail" and "gpu-node-1: chrony is not installed" in ntp["message"], ntp
    assert result.ret == 1


SITE_DIR_CHECKS = """
import os


def test_sees_its_own_node(node, host):
    seen = host.run("printenv GPUREADY_FAKE_NODE").stdout.strip()
    assert os.path.basename(seen) == {{"gpu-node-1": "node-h100-sxm-8", "gpu-node-2": "node-l4-1"}}[node.name], (
        f"{{node.name}}: the site check ran on {{seen}}"
    )


def test_ntp_daemon(node, host):
    assert host.exists("chronyd-gpuready-site"), f"{{node.name}}: chrony is not installed"
"""


def test_a_site_directory_runs_once_per_node_on_that_node(make_node, pytester, suite_dir, tmp_path):
    """``--site DIR``: a directory of the user's own, outside the suite, no marker. Each check runs once per node,
    its ``host`` is that node (not testinfra's local host), and its results are the node's "site" layer: in
    verdict.json, the JUnit suite of the node and the table."""
    h100, l4 = make_node("h100-sxm-8"), make_node("l4-1")
    h100.activate()
    l4.activate()
    envs = {"gpu-node-1": h100.env(), "gpu-node-2": l4.env()}
    (suite_dir / "conftest.py").write_text(TWO_NODE_CONFTEST.format(envs=json.dumps(envs)))
    inventory = h100.root / "two.py"
    h100.inventory()
    inventory.write_text(
        f"gpu_nodes = ([('gpu-node-1', {h100.inventory_data()!r}), ('gpu-node-2', {l4.inventory_data()!r})], {{}})\n"
    )
    site = tmp_path / "site-checks"
    site.mkdir()
    (site / "test_site.py").write_text(SITE_DIR_CHECKS.format())
    report_dir = pytester.path / "report"
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(inventory), "--report-dir", str(report_dir), "--site", str(site), "-m",
        "host or site",
    )  # fmt: skip
    verdict = read_verdict(report_dir)
    for name in ("gpu-node-1", "gpu-node-2"):
        checks = verdict["nodes"][name]["layers"]["site"]["checks"]
        assert checks["test_sees_its_own_node"]["status"] == "pass", checks
        assert checks["test_ntp_daemon"] == {**checks["test_ntp_daemon"], "status": "fail"}
        assert f"{name}: chrony is not installed" in checks["test_ntp_daemon"]["message"], checks
        assert verdict["nodes"][name]["layers"]["host"]["status"] == "pass"
    assert (
        result.ret == 1 and result.parseoutcomes()["failed"] == 2
    )  # test_ntp_daemon on each node, nothing else
    result.stdout.re_match_lines([r"node\s+host\s+gpu.*diag\s+site", r"gpu-node-1\s+PASS\s+-.*FAIL"])


def test_a_site_directory_that_does_not_exist_is_a_usage_error(pytester, suite_dir, tmp_path):
    result = pytester.runpytest_inprocess("conformance", "--site", str(tmp_path / "nowhere"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--site {tmp_path / 'nowhere'}: not a directory*"])
