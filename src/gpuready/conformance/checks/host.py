"""Host layer: the driver, the services and the container runtime a GPU node needs before it can run GPU pods.

Each function judges one check from command outputs (see the ``*_COMMAND`` constants for what to run) and
returns the problems found. A failure that starts elsewhere is left to the check that owns it: with a
driver/library mismatch ``nvidia-smi`` cannot report anything, so only :func:`driver_library_mismatch` fails
and the checks that need nvidia-smi's report raise :class:`~gpuready.conformance.checks.CannotCheck`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuready.conformance.checks import CannotCheck, Output, exit_problem, not_found
from gpuready.nvidia import cdi, security
from gpuready.nvidia.containerd_config import (
    NVIDIA_RUNTIME_BINARY,
    RUNC_TYPE,
    ContainerdConfigError,
    cdi_settings,
    nvidia_runtime_of,
)
from gpuready.nvidia.errors import ParseError
from gpuready.nvidia.smi import LOST_GPU, SmiReport, parse_list, parse_query_xml
from gpuready.spec.model import NodeSpec

NVIDIA_SMI_COMMAND = "nvidia-smi -q -x"
TOOLKIT_COMMAND = "nvidia-ctk --version"
CONTAINERD_COMMAND = "containerd config dump"
CDI_SPEC_COMMAND = cdi.spec_command()
SMI_LIST_COMMAND = "nvidia-smi -L"
FABRIC_MANAGER = "nvidia-fabricmanager"
KUBELET = "kubelet"

MISMATCH = "Driver/library version mismatch"
# nvidia-smi's exit status when it could not reach a GPU ("GPU is lost"): its report of the other GPUs is whole.
EXIT_GPU_LOST = 15
SMI_ACCEPTED = (0, EXIT_GPU_LOST)


def units(node: NodeSpec) -> list[str]:
    """The systemd units the host layer asks testinfra about on ``node``."""
    return [*([FABRIC_MANAGER] if node.nvswitch else []), *([KUBELET] if node.join.enabled else [])]


def commands(node: NodeSpec) -> list[str]:
    """What the host layer runs on ``node`` (run fleet-wide at once before its checks): its tools, and for each
    unit the two questions testinfra's ``host.service(unit)`` asks systemd (so it reads them from the cache)."""
    asked = [
        f"systemctl {question} {unit}" for unit in units(node) for question in ("is-active", "is-enabled")
    ]
    cdi_mode = [CDI_SPEC_COMMAND, SMI_LIST_COMMAND] if node.cdi else []
    return [NVIDIA_SMI_COMMAND, TOOLKIT_COMMAND, CONTAINERD_COMMAND, *cdi_mode, *asked]


@dataclass(frozen=True)
class Unit:
    """A systemd unit as testinfra's ``host.service(name)`` sees it, with systemctl's word for its state."""

    name: str
    running: bool
    enabled: bool | None  # None: systemd knows no such unit file
    state: str  # what `systemctl is-active <name>` printed: active, inactive, failed, activating, ...
    systemd: bool = True  # False: systemctl could not be run at all


def _unit_problems(unit: Unit, what: str, consequence: str = "") -> list[str]:
    if not unit.systemd:
        return [f"cannot ask systemd: `systemctl is-active {unit.name}`: {unit.state}"]
    if not unit.running:
        return [f"{what} is {unit.state} (`systemctl is-active {unit.name}`){consequence}"]
    if unit.enabled is False:
        return [
            f"{what} is active but not enabled: it will not start after a reboot "
            f"(`systemctl is-enabled {unit.name}`)"
        ]
    return []


_TOOLKIT_VERSION = re.compile(r"NVIDIA Container Toolkit CLI version (\S+)")


# the suite's per-node cache key of the parsed report (the host and gpu layers share it)
SMI_REPORT = "smi-report"


def _read_report(out: Output) -> SmiReport:
    """``nvidia-smi -q -x``'s report; the GPUs it says it could not reach (exit 15) are the only ones it may leave
    out: a report listing fewer GPUs than ``attached_gpus`` otherwise is a ParseError (output cut short)."""
    stdout = out.stdout
    if LOST_GPU.search(stdout):  # printed before the XML, where a driver writes them to stdout
        stdout = "\n".join(line for line in stdout.splitlines() if not LOST_GPU.search(line))
    return parse_query_xml(stdout, unlisted=len(LOST_GPU.findall(out.text)))


def smi_report(out: Output) -> SmiReport:
    """nvidia-smi's report, or CannotCheck when nvidia-smi gave none (``test_nvidia_smi_runs`` owns that). The
    checks that judge the report take it parsed: the suite parses it once per node (SMI_REPORT). The exit status
    is looked at first: only 0 and 15 (a GPU is lost, the others are reported) give a report to judge."""
    if not_found(out):
        raise CannotCheck("nvidia-smi not found; test_nvidia_smi_runs reports it")
    if MISMATCH in out.text:
        raise CannotCheck(f"nvidia-smi cannot report: {MISMATCH}; test_no_driver_library_mismatch reports it")
    if problem := exit_problem(out, NVIDIA_SMI_COMMAND, SMI_ACCEPTED):
        raise CannotCheck(f"{problem}; test_nvidia_smi_runs reports it")
    try:
        return _read_report(out)
    except ParseError:
        raise CannotCheck(
            f"nvidia-smi gave no report ({out.first_line()}); test_nvidia_smi_runs reports it"
        ) from None


def nvidia_smi_runs(out: Output) -> list[str]:
    """nvidia-smi starts, initialises NVML and prints a complete report.

    Exit 15 ("GPU is lost") with a readable report passes here: the driver works, and the GPU count check of
    the gpu layer names the missing GPU. Any other non-zero exit fails, whatever was printed: a report cut short
    by a timeout can still be well-formed.
    """
    if not_found(out):
        return ["nvidia-smi not found (is the NVIDIA driver installed?)"]
    if MISMATCH in out.text:
        raise CannotCheck(f"nvidia-smi stops at '{MISMATCH}'; test_no_driver_library_mismatch reports it")
    if "No devices were found" in out.text:
        return [
            f"nvidia-smi finds no GPU (exit {out.rc}: No devices were found): every GPU fell off the bus or none is "
            "bound to the nvidia driver (see the kernel log)"
        ]
    if problem := exit_problem(out, NVIDIA_SMI_COMMAND, SMI_ACCEPTED):
        return [problem]
    try:
        _read_report(out)
    except ParseError as exc:
        return [f"`{NVIDIA_SMI_COMMAND}` printed an unreadable report: {exc}"]
    return []


def driver_version(node: NodeSpec, report: SmiReport) -> list[str]:
    if report.driver_version != node.versions.driver:
        return [
            f"driver version is {report.driver_version}, the inventory pins {node.versions.driver} "
            "(nvidia_driver_version)"
        ]
    return []


def driver_library_mismatch(out: Output) -> list[str]:
    """The loaded kernel module and the user-space libraries are the same version (no upgrade without reboot)."""
    if not_found(out):
        raise CannotCheck("nvidia-smi not found; test_nvidia_smi_runs reports it")
    for line in out.text.splitlines():
        if MISMATCH in line:
            return [
                f"{line.strip()}: the loaded kernel module is not the installed driver's (reboot after the upgrade)"
            ]
    return []


def persistence_mode(report: SmiReport) -> list[str]:
    off = [str(gpu.index) for gpu in report.gpus if gpu.persistence_mode is False]
    if off:
        return [f"persistence mode is off on GPU {', '.join(off)} (is nvidia-persistenced running?)"]
    return []


def fabric_manager(node: NodeSpec, unit: Unit) -> list[str]:
    """Fabric Manager runs, and starts at boot, on an NVSwitch system."""
    if not node.nvswitch:
        raise CannotCheck("not applicable: the inventory says this node has no NVSwitch (nvswitch = False)")
    return _unit_problems(unit, "Fabric Manager", "; on NVSwitch systems CUDA cannot start without it")


def toolkit_version(node: NodeSpec, out: Output) -> list[str]:
    if not_found(out):
        return ["nvidia-ctk not found (is the NVIDIA Container Toolkit installed?)"]
    match = _TOOLKIT_VERSION.search(out.stdout)
    if match is None:
        return [f"`{TOOLKIT_COMMAND}` printed no version (exit {out.rc}): {out.first_line()}"]
    if problem := exit_problem(out, TOOLKIT_COMMAND):  # a version, and a failure: the binary is not sound
        return [problem]
    if match.group(1) != node.versions.toolkit:
        return [
            f"NVIDIA Container Toolkit is {match.group(1)}, the inventory pins {node.versions.toolkit} "
            "(nvidia_container_toolkit_version)"
        ]
    return []


def _advisories(what: str, knob: str, version: str, found: list[security.Advisory]) -> list[str]:
    if not found:
        return []
    sources = ", ".join(sorted({a.source for a in found}))
    return [
        f"{what} {version} is affected by {security.describe(found, version)}: pin a fixed release ({knob}); "
        f"NVIDIA's bulletins: {sources}"
    ]


def toolkit_security(out: Output) -> list[str]:
    """The running Container Toolkit is not below a fix of an NVIDIA security bulletin (container escapes)."""
    if out.rc != 0:
        raise CannotCheck("no toolkit version to judge; test_toolkit_version reports why")
    match = _TOOLKIT_VERSION.search(out.stdout)
    if match is None:
        raise CannotCheck("no toolkit version to judge; test_toolkit_version reports why")
    version = match.group(1)
    return _advisories(
        "NVIDIA Container Toolkit",
        "nvidia_container_toolkit_version",
        version,
        security.toolkit_advisories(version),
    )


def driver_security(report: SmiReport) -> list[str]:
    """The loaded driver is not below its branch's fix of an NVIDIA GPU display driver security bulletin."""
    version = report.driver_version
    return _advisories("NVIDIA driver", "nvidia_driver_version", version, security.driver_advisories(version))


def containerd_nvidia_handler(out: Output) -> list[str]:
    """containerd's merged config has an ``nvidia`` runc handler that runs nvidia-container-runtime and kept
    runc's options (SystemdCgroup); merged, because a drop-in can be shadowed or lose options when merged."""
    if problem := _dump_problem(out):
        return [problem]
    try:
        nvidia = nvidia_runtime_of(out.stdout)
        runc = nvidia_runtime_of(out.stdout, "runc")
    except ContainerdConfigError as exc:
        return [f"`{CONTAINERD_COMMAND}` printed no readable config: {exc}"]
    if nvidia is None:
        return [
            f"containerd has no 'nvidia' runtime handler (`{CONTAINERD_COMMAND}`); pods with "
            "runtimeClassName: nvidia cannot start"
        ]
    problems = []
    options = nvidia.get("options") or {}
    if nvidia.get("runtime_type") != RUNC_TYPE:
        problems.append(
            f"the 'nvidia' handler has runtime_type {nvidia.get('runtime_type')!r}, expected {RUNC_TYPE!r}"
        )
    binary = options.get("BinaryName")
    if not isinstance(binary, str) or not binary.endswith("nvidia-container-runtime"):
        problems.append(
            f"the 'nvidia' handler runs BinaryName {binary!r}, expected {NVIDIA_RUNTIME_BINARY!r}"
        )
    runc_options = (runc or {}).get("options") or {}
    # kubeadm's kubelet uses the systemd cgroup driver; runc's own setting is the one the node was built with
    expected = runc_options.get("SystemdCgroup", True)
    if options.get("SystemdCgroup", False) != expected:
        problems.append(
            f"the 'nvidia' handler has SystemdCgroup = {options.get('SystemdCgroup')!r} but runc has {expected!r}: "
            "runc's options were not kept"
        )
    return problems


def _dump_problem(out: Output) -> str | None:
    if not_found(out):
        return "containerd not found"
    if out.rc != 0:
        return f"`{CONTAINERD_COMMAND}` failed (exit {out.rc}): {out.first_line()}"
    return None


def containerd_cdi(out: Output) -> list[str]:
    """CDI mode: containerd's live config injects CDI devices (``enable_cdi``) from the toolkit's spec directory."""
    if problem := _dump_problem(out):
        return [problem]
    try:
        enabled, dirs = cdi_settings(out.stdout)
    except ContainerdConfigError as exc:
        return [f"`{CONTAINERD_COMMAND}` printed no readable config: {exc}"]
    problems = []
    if not enabled:
        problems.append(
            "containerd has CDI off (enable_cdi = false in its CRI plugin): GPU pods get no devices in CDI mode "
            "(nvidia_cdi = True); the node deploy turns it on"
        )
    spec_dir = cdi.SPEC_PATH.rsplit("/", 1)[0]
    if spec_dir not in dirs:
        problems.append(
            f"containerd's cdi_spec_dirs {dirs} do not include {spec_dir}, where nvidia-cdi-refresh writes the spec"
        )
    return problems


def cdi_spec(spec_out: Output, smi_list: Output, smi_query: Output | None = None) -> list[str]:
    """CDI mode: the toolkit's CDI spec exists, parses, names every GPU and MIG device ``nvidia-smi -L`` lists (a
    missing or stale device is a container that containerd refuses: "unresolvable CDI devices") and mounts the
    running driver's libraries (a spec from before a driver change mounts files that are gone)."""
    if smi_list.rc != 0:
        raise CannotCheck(
            f"`{SMI_LIST_COMMAND}` failed: no devices to compare (test_nvidia_smi_runs says why)"
        )
    if problem := exit_problem(spec_out, "cat <the CDI spec files>"):
        return [problem]
    try:
        specs = cdi.parse_specs(spec_out.stdout)
    except cdi.SpecError as exc:
        return [f"the CDI spec cannot be read: {exc}"]
    ours = [s for s in specs if s.kind == cdi.KIND]
    if not ours:
        return [
            f"no CDI spec of kind {cdi.KIND} ({cdi.SPEC_PATH} or {cdi.STATIC_SPEC_PATH}): a container given "
            f"{cdi.KIND} devices (the nvidia runtime in CDI mode, `--device {cdi.KIND}=...`) cannot start; pods "
            "of NVIDIA's device plugin are not affected (it writes a spec of its own, k8s.device-plugin.nvidia.com); "
            f"is {cdi.REFRESH_PATH_UNIT} enabled? (`systemctl start {cdi.REFRESH_SERVICE}` writes it)"
        ]
    named = {name for spec in ours for name in spec.devices}
    report = _query_report(smi_query)
    try:
        # -L prints no total: a listing cut short between two GPUs reads as fewer GPUs unless compared with -q's
        listed = parse_list(smi_list.stdout, expected=len(report.gpus) if report is not None else None)
        wanted = cdi.expected_devices(listed)
    except ParseError as exc:
        raise CannotCheck(f"`{SMI_LIST_COMMAND}` printed no device list: {exc}") from None
    missing = [name for name in wanted if name not in named]
    paths = ", ".join(s.path for s in ours)
    problems = _stale_driver(ours, report, paths)
    if not missing:
        return problems
    shown = "; ".join(f"{cdi.qualified(name)} ({wanted[name]})" for name in missing[:6])
    more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
    return [
        f"the CDI spec ({paths}) lacks {len(missing)} device(s) nvidia-smi reports: {shown}{more}; a pod given "
        f"one fails with 'unresolvable CDI devices'. Regenerate it: `systemctl start {cdi.REFRESH_SERVICE}` "
        "(after a MIG change the spec goes stale until refreshed)",
        *problems,
    ]


def _query_report(smi_query: Output | None) -> SmiReport | None:
    """The ``-q -x`` report beside ``-L``, when there is a whole one (test_nvidia_smi_runs judges the rest)."""
    if smi_query is None or exit_problem(smi_query, NVIDIA_SMI_COMMAND, SMI_ACCEPTED):
        return None
    try:
        return _read_report(smi_query)
    except ParseError:
        return None


def _stale_driver(specs: list[cdi.Spec], report: SmiReport | None, paths: str) -> list[str]:
    if report is None:
        return []
    running = report.driver_version
    mounted = sorted({v for spec in specs for v in spec.driver_versions})
    if not mounted or mounted == [running]:
        return []
    return [
        f"the CDI spec ({paths}) mounts the libraries of driver {', '.join(mounted)} but driver {running} is "
        f"loaded: it predates the driver change (is {cdi.REFRESH_PATH_UNIT} active?); regenerate it with "
        f"`systemctl start {cdi.REFRESH_SERVICE}`"
    ]


def kubelet_active(node: NodeSpec, unit: Unit) -> list[str]:
    """The kubelet runs, and starts at boot, on a node that joined."""
    if not node.join.enabled:
        raise CannotCheck("not applicable: the inventory does not join this node (kube_join = False)")
    return _unit_problems(unit, "kubelet")
