"""``diag_tools`` on a real lab host: the node deploy installs DCGM 4 (the lab's CUDA repository serves it under the
real package names) with nvidia-dcgm running, and nvbandwidth, which that repository also has; a second deploy
changes nothing; the suite's diag layer then runs on that node, nothing skipped, and passes. The other hosts keep
the default (off); everything the test installed is removed afterwards."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyinfra_runs import REPO, run_pyinfra
from suite_runs import failed, node_of, run_suite

pytestmark = pytest.mark.lab

PACKAGES = "datacenter-gpu-manager-4-core datacenter-gpu-manager-4-cuda13 nvbandwidth"


def diag_inventory(tmp_path: Path, node: str) -> Path:
    """inventory/lab.py with ``diag_tools = True`` on ``node`` only (group_data beside it, as a user's has)."""
    (tmp_path / "group_data").mkdir(parents=True)
    shutil.copy(REPO / "inventory" / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    path = tmp_path / "inv.py"
    path.write_text(
        f"exec(open({str(REPO / 'inventory' / 'lab.py')!r}).read())\n"
        f"for _name, _data in gpu_nodes[0]:\n"
        f"    if _name == {node!r}:\n"
        f"        _data['diag_tools'] = True\n"
    )
    return path


def test_diag_tools_installs_dcgm_and_nvbandwidth_and_the_diag_layer_runs(deployed_lab, tmp_path):
    lab = deployed_lab.lab
    node = node_of(deployed_lab, "h100-sxm-8")
    inventory = diag_inventory(tmp_path / "inventory", node)
    try:
        first = run_pyinfra(lab, "--limit", node, inventory=str(inventory))
        assert first.returncode == 0, first.output[-3000:]
        changed = " / ".join(sorted(op.rsplit(" | ", 1)[-1] for op in first.changed_operations()))
        for step in ("Install DCGM (datacenter-gpu-manager-4-core, datacenter-gpu-manager-4-cuda13)",
                     "Install nvbandwidth where a repository has it", "Enable nvidia-dcgm"):  # fmt: skip
            assert step in changed, changed
        installed = lab.ssh(node, f"dpkg-query -W -f '${{Package}}\\n' {PACKAGES}").stdout.split()
        assert sorted(installed) == sorted(PACKAGES.split())
        assert lab.ssh(
            node, "systemctl is-active nvidia-dcgm; systemctl is-enabled nvidia-dcgm"
        ).stdout.split() == [
            "active",
            "enabled",
        ]
        second = run_pyinfra(lab, "--limit", node, inventory=str(inventory))
        assert second.returncode == 0, second.output[-3000:]
        assert second.total[:2] == (0, 0), second.changed_operations()

        report = tmp_path / "report"
        verdict = run_suite(deployed_lab, report, "-m", "diag", "--nodes", node,
                            source=("--inventory", str(inventory)))  # fmt: skip
        assert failed(verdict) == {}
        checks = verdict["nodes"][node]["layers"]["diag"]["checks"]
        statuses = {check: result["status"] for check, result in checks.items()}
        assert statuses == {
            "test_host_to_device_bandwidth": "pass",
            "test_device_to_host_bandwidth": "pass",
            "test_peer_bandwidth": "pass",
            "test_dcgm_diagnostics": "pass",
        }, {check: (r["status"], r.get("message")) for check, r in checks.items()}
    finally:
        lab.ssh(node, f"systemctl disable --now nvidia-dcgm; apt-get purge -y -q {PACKAGES}", check=False)
