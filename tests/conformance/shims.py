"""A one-node GPU host on this machine: the lab's emulated nvidia-smi and dcgmi, and stand-in tools on PATH.

The conformance suite with ``--connection local`` then looks at "this machine" and sees the lab hardware file.
Each stand-in answers like the real tool does: ``systemctl is-active`` prints the state and exits 3 for a unit
that is not active; ``journalctl -g`` exits 1 when nothing matches; ``nvidia-ctk --version`` prints its two
real lines; ``containerd config dump`` prints a dump that real containerd 1.6.20 produced (data/).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from inventories import write_inventory
from static_tools import static_tools
from verdict_schema import read_valid_verdict

from gpuready.lab import faults, hardware

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
GROUP_DATA = REPO / "inventory" / "group_data" / "all.py"

PROFILE_INVENTORY = {
    "h100-sxm-8": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "nvswitch": True},
    "a100-80gb-4": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_count": 4},
    "l4-1": {"gpu_model": "NVIDIA L4", "gpu_count": 1},
    "t4-1": {"gpu_model": "Tesla T4", "gpu_count": 1},
    "l40s-2": {"gpu_model": "NVIDIA L40S", "gpu_count": 2},
}
JOIN = {
    "kube_api_endpoint": "10.0.0.1:6443",
    "kube_ca_cert_hash": "sha256:" + "ab" * 32,
    "kube_join_token_file": "/nonexistent/token",
}
HOST_FAULTS = ("fabricmanager-failed", "driver-mismatch")


@dataclass
class FakeNode:
    """Directory layout: bin/ (tools on PATH), hw.json, state.json, units/<unit> (systemd states), journal."""

    root: Path
    profile: str
    hw: dict
    toolkit_version: str = "1.20.0"
    containerd_dump: str = "containerd-dump-nvidia.toml"
    units: dict[str, str] = field(
        default_factory=lambda: {"kubelet": "active", "nvidia-fabricmanager": "active"}
    )
    journal: list[str] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)
    disabled: set[str] = field(default_factory=set)  # units whose `systemctl is-enabled` says disabled
    driver_version: str | None = None
    boot: int = 1

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def env(self) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "GPUREADY_LAB_HARDWARE": str(self.root / "hw.json"),
            "GPUREADY_LAB_STATE": str(self.root / "state.json"),
            "GPUREADY_LAB_BOOT_ID": f"conformance-test-boot-{self.boot}",
            "GPUREADY_FAKE_NODE": str(self.root),
        }
        if self.units.get("nvidia-fabricmanager") == "active":
            # the emulated driver lets GPUs join the NVSwitch fabric while Fabric Manager's pid is alive
            env["GPUREADY_LAB_FABRICMANAGER_PID"] = str(self.root / "fabricmanager.pid")
        if self.driver_version:
            env["GPUREADY_LAB_DRIVER_VERSION"] = self.driver_version
        return env

    def inject(self, fault: str, gpu: int | None = None) -> None:
        """The fault in the hardware file, its kernel lines in the journal, and a failed Fabric Manager unit
        for ``fabricmanager-failed`` (what the lab does to a host)."""
        gpu = None if fault in HOST_FAULTS else (gpu if gpu is not None else 1)
        self.hw = faults.apply_fault(self.hw, fault, gpu)
        self.journal.extend(faults.journal_messages(self.hw, fault, gpu))
        if fault == "fabricmanager-failed":
            self.units["nvidia-fabricmanager"] = "failed"

    def write(self) -> None:
        self.bin.mkdir(parents=True, exist_ok=True)
        hardware.write_hardware(self.root / "hw.json", self.hw)
        units = self.root / "units"
        units.mkdir(exist_ok=True)
        for unit, state in self.units.items():
            (units / unit).write_text(state + "\n")
            (units / f"{unit}.disabled").unlink(missing_ok=True)
            if unit in self.disabled:
                (units / f"{unit}.disabled").write_text("")
        (self.root / "fabricmanager.pid").write_text(f"{os.getpid()}\n")
        (self.root / "journal").write_text("".join(line + "\n" for line in self.journal))
        log = 'echo "$(basename "$0") $*" >> "$GPUREADY_FAKE_NODE/calls"\n'
        tools = {
            "nvidia-smi": f'#!/bin/sh\nexec "{static_tools()}" nvidia-smi "$@"\n',
            "dcgmi": f'#!/bin/sh\nexec "{static_tools()}" dcgmi "$@"\n',
            "nvidia-ctk": textwrap.dedent(f"""\
                #!/bin/sh
                [ "$1" = --version ] || {{ echo "nvidia-ctk: unsupported here: $*" >&2; exit 2; }}
                echo "NVIDIA Container Toolkit CLI version {self.toolkit_version}"
                echo "commit: 1f8d6a1d0a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d"
                """),
            "containerd": textwrap.dedent(f"""\
                #!/bin/sh
                [ "$1 $2" = "config dump" ] || {{ echo "containerd: unsupported here: $*" >&2; exit 2; }}
                cat "{DATA / self.containerd_dump}"
                """),
            "systemctl": textwrap.dedent("""\
                #!/bin/sh
                unit="$GPUREADY_FAKE_NODE/units/$2"
                case "$1" in
                  is-active)
                    state=$(cat "$unit" 2>/dev/null || echo inactive)
                    echo "$state"
                    [ "$state" = active ] || exit 3 ;;
                  is-enabled)
                    [ -e "$unit" ] || { echo "Failed to get unit file state for $2.service: No such file or directory" >&2; exit 1; }
                    [ -e "$unit.disabled" ] && { echo disabled; exit 1; }
                    echo enabled ;;
                  *) echo "systemctl: unsupported here: $*" >&2; exit 2 ;;
                esac
                """),
            # the kernel's ring buffer, as dmesg prints it (a timestamp before each line)
            "dmesg": textwrap.dedent("""\
                #!/bin/sh
                sed 's/^/[  812.000000] /' "$GPUREADY_FAKE_NODE/journal"
                """),
            "journalctl": textwrap.dedent("""\
                #!/bin/sh
                case "$*" in
                  *-g*) grep -F 'NVRM: Xid' "$GPUREADY_FAKE_NODE/journal" || { echo "-- No entries --"; exit 1; } ;;
                  *-k*) cat "$GPUREADY_FAKE_NODE/journal" ;;
                  *) echo "journalctl: unsupported here: $*" >&2; exit 2 ;;
                esac
                """),
        }
        for name, script in tools.items():
            path = self.bin / name
            if name in self.missing:
                path.unlink(missing_ok=True)
                if shutil.which(name, path="/usr/bin:/bin"):  # this machine has one (journalctl): hide it
                    path.write_text(f'#!/bin/sh\necho "sh: 1: {name}: not found" >&2\nexit 127\n')
                    path.chmod(0o755)
                continue
            path.write_text(script.replace("#!/bin/sh\n", "#!/bin/sh\n" + log, 1))
            path.chmod(0o755)

    def prepare_driver(self) -> None:
        """What the deploy leaves behind: persistence mode on, and the inventory's MIG layout created."""
        env = {**os.environ, **self.env()}
        if "nvidia-smi" in self.missing:
            return
        subprocess.run([str(self.bin / "nvidia-smi"), "-pm", "1"], env=env, capture_output=True, check=False)

    def smi(self, *args: str) -> None:
        env = {**os.environ, **self.env()}
        subprocess.run([str(self.bin / "nvidia-smi"), *args], env=env, capture_output=True, check=True)

    def enable_mig(self, gpus: list[int]) -> None:
        """MIG mode on, then a reboot (a new boot id) to make it current, as on a real A100/H100."""
        for gpu in gpus:
            self.smi("-i", str(gpu), "-mig", "1")
        self.boot += 1

    def create_instances(self, layout: dict[int, list[str]]) -> None:
        for gpu, profiles in layout.items():
            self.smi("mig", "-i", str(gpu), "-cgi", ",".join(profiles), "-C")

    def inventory_data(self, **host_data: object) -> dict:
        # runtime-class mode: the node's containerd is 1.6.20 (its dump in data/), which has no CDI; the CDI checks
        # have their own tests (test_cdi_checks.py, and on the lab's trixie and sid hosts)
        return {**PROFILE_INVENTORY[self.profile], **JOIN, "nvidia_cdi": False, **host_data}

    def inventory(self, **host_data: object) -> Path:
        (self.root / "group_data").mkdir(parents=True, exist_ok=True)
        shutil.copy(GROUP_DATA, self.root / "group_data" / "all.py")
        data = self.inventory_data(**host_data)
        return write_inventory(self.root / "inventory.py", [("gpu-node-1", data)])


def fake_node(root: Path, profile: str = "h100-sxm-8") -> FakeNode:
    return FakeNode(root=root, profile=profile, hw=hardware.make_hardware(profile, 0))


def read_verdict(report_dir: Path) -> dict:
    """verdict.json, validated against the schema the package ships (every suite run a test reads is checked)."""
    return read_valid_verdict(report_dir)
