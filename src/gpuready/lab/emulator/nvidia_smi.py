"""Emulated `nvidia-smi`: answers from the lab machine's hardware file and the driver's state.

Stdlib only (installed into lab hosts as /usr/lib/nvidia-emu/nvidia_smi.py, run by /usr/bin/nvidia-smi).
Output formats, messages and exit codes follow real nvidia-smi captures (drivers 570-590), because
the project's parsers and conformance checks must not be able to tell it from the real tool.
"""

from __future__ import annotations

import os
import sys
import time

import gpu_tree
import nvemu
from gpu_tree import NA, GpuView

USAGE_HINT = "Please run 'nvidia-smi -h' for help."
# the lab's static tools: /usr/bin/nvidia-smi (package_files.WRAPPER) sets where the driver package installs them
STATIC_TOOLS_ENV = nvemu.STATIC_TOOLS_ENV
# the settings the static tools change (static_tools), besides the `mig` and `compute-policy` subcommands
STATIC_FLAGS = {
    "-c",
    "--compute-mode",
    "-mig",
    "--multi-instance-gpu",
    "-pm",
    "--persistence-mode",
    "-r",
    "--gpu-reset",
}


class UsageError(Exception):
    pass


def _out(text: str) -> None:
    sys.stdout.write(text)


def _err(text: str) -> None:
    sys.stderr.write(text)


def lost_message(gpu: dict) -> str:
    bus = gpu["pci_bus_id"][4:]
    return f"Unable to determine the device handle for GPU{bus}: Unknown Error\n"


# ---- device selection ----------------------------------------------------------------------------
select = nvemu.select


def split_lost(drv: nvemu.Driver, gpus: list[dict]) -> tuple[list[dict], list[dict]]:
    ok = [g for g in gpus if not drv.off_bus(g["index"])]
    lost = [g for g in gpus if drv.off_bus(g["index"])]
    return ok, lost


# ---- simple views ------------------------------------------------------------------------------
def cmd_list(drv: nvemu.Driver, gpus: list[dict]) -> int:
    rc = 0
    for gpu in gpus:
        if drv.off_bus(gpu["index"]):
            _out(lost_message(gpu))
            rc = nvemu.EXIT_GPU_LOST
            continue
        _out(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        for dev in GpuView(drv, gpu).mig_devices():
            _out(f"  MIG {dev['name']:<11} Device {dev['index']:>2}: (UUID: {dev['uuid']})\n")
    return rc


def cmd_version(drv: nvemu.Driver) -> int:
    v = drv.version
    _out(
        f"NVIDIA-SMI version  : {v}\n"
        f"NVML version        : {'.'.join(v.split('.')[:2])}\n"
        f"DRIVER version      : {v}\n"
        f"CUDA Version        : {nvemu.cuda_version(v)}\n"
    )
    return 0


SEP = "+-----------------------------------------+------------------------+----------------------+"
WIDE = "+-----------------------------------------------------------------------------------------+"
MIG_SEP = "+------------------+----------------------------------+-----------+-----------------------+"


def cmd_table(drv: nvemu.Driver, gpus: list[dict]) -> int:
    ok, lost = split_lost(drv, gpus)
    if not ok:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    v = drv.version
    lines = [
        time.asctime() + "       ",
        WIDE,
        f"| NVIDIA-SMI {v:<23}Driver Version: {v:<15}CUDA Version: {nvemu.cuda_version(v):<9}|",
        SEP,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    mig_rows: list[str] = []
    any_mig = False
    for gpu in ok:
        view = GpuView(drv, gpu)
        total, _reserved, used, _free = view.memory()
        pm = "On" if view.persistence() else "Off"
        name = gpu["name"] if len(gpu["name"]) <= 29 else gpu["name"][:26] + "..."
        if not gpu.get("ecc_supported", True):
            ecc = "N/A"
        elif view.mig_current:
            ecc = "On"
        else:
            ecc = str(view.ecc_uncorrected())
        util = "N/A" if view.mig_current else "0%"
        mig_mode = view.mig_mode()[0]
        lines += [
            f"| {gpu['index']:>3}  {name:<29}{pm:>4}  | {view.bus_id:>18} Off | {ecc:>20} |",
            f"| N/A   {view.temperature():>2}C    {view.perf_state()}{int(view.power_draw()):>15}W / "
            f"{int(gpu['power_limit_w']):>4}W |{used:>8}MiB / {total:>6}MiB | {util:>7}      Default |",
            f"|                                         |                        | {mig_mode:>20} |",
            SEP,
        ]
        if view.mig_current:
            any_mig = True
            for dev in view.mig_devices():
                p = dev["profile"]
                bar1 = int(
                    gpu.get("bar1_mib", 131072) * p["memory_slices"] / max(gpu.get("mig_memory_slices", 8), 1)
                )
                mig_rows += [
                    f"| {gpu['index']:>2}  {dev['gi']:>3} {dev['ci']:>3} {dev['index']:>3}  |"
                    f"{12:>16}MiB / {p['memory_mib']:>5}MiB    | {dev['sm']:<3}{0:>6} |"
                    f"{p['copy_engines']:>3}{p['encoders']:>4}{p['decoders']:>5}{p['ofa']:>5}{p['jpeg']:>5} |",
                    f"|                  |{0:>16}MiB / {bar1:>5}MiB    |           |                       |",
                    MIG_SEP,
                ]
    lines.append("")
    if any_mig:
        lines += [
            WIDE,
            "| MIG devices:                                                                            |",
            MIG_SEP,
            "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
            "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
            "|                  |                                  |        ECC|                       |",
            "|==================+==================================+===========+=======================|",
        ]
        if mig_rows:
            lines += mig_rows
        else:
            lines += [
                "|  No MIG devices found                                                                   |",
                WIDE,
            ]
        lines.append("")
    lines += [
        WIDE,
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        WIDE,
    ]
    for gpu in lost:
        _out(lost_message(gpu))
    _out("\n".join(lines) + "\n")
    return nvemu.EXIT_GPU_LOST if lost else 0


def cmd_query(drv: nvemu.Driver, gpus: list[dict], xml: bool, groups: list[str] | None) -> int:
    ok, lost = split_lost(drv, gpus)
    if not ok:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    v13 = int(drv.version.split(".")[0]) >= 580
    views = [GpuView(drv, g) for g in ok]
    for gpu in lost:
        _err(lost_message(gpu))
    if xml:
        _out(gpu_tree.render_xml(drv, views, v13))
    else:
        _out(gpu_tree.render_text(drv, views, v13, groups))
    return nvemu.EXIT_GPU_LOST if lost else 0


# ---- --query-gpu -------------------------------------------------------------------------------
def _unit(value: str, unit: str) -> str:
    return f"{value} {unit}" if unit and value not in ("[N/A]",) else value


def _na(value: str) -> str:
    return "[N/A]" if value == NA else value


def _reasons_active(view: GpuView) -> str:
    return "0x0000000000000001" if view.clocks_idle() else "0x0000000000000000"


def query_fields(view: GpuView, drv: nvemu.Driver, count: int) -> dict:
    """field -> (unit, value). Names and units as `nvidia-smi --help-query-gpu` lists them."""
    g = view.gpu
    total, reserved, used, free = view.memory()
    gen, width = view.pcie_current()
    mig_cur, mig_pend = view.mig_mode()
    ecc = g.get("ecc_supported", True)
    unc = view.ecc_uncorrected()
    sbe, dbe, ret_pending = view.retired()
    r_corr, r_unc, r_pending = view.remapped()
    fab_state, fab_status = view.fabric()
    c = g.get("clocks", {})
    row_ok = g.get("row_remapping") and not view.mig_current
    ret_ok = g.get("page_retirement") and not view.mig_current
    util = "[N/A]" if view.mig_current else "0"
    ecc_str = str(unc) if ecc else "[N/A]"
    fields = {
        "timestamp": ("", time.strftime("%Y/%m/%d %H:%M:%S.000")),
        "driver_version": ("", drv.version),
        "count": ("", str(count)),
        "name": ("", g["name"]),
        "serial": ("", g["serial"]),
        "uuid": ("", g["uuid"]),
        "pci.bus_id": ("", g["pci_bus_id"]),
        "pci.domain": ("", "0x0000"),
        "pci.bus": ("", "0x" + g["pci_bus_id"][9:11]),
        "pci.device": ("", "0x" + g["pci_bus_id"][12:14]),
        "pci.device_id": ("", "0x" + g["pci_device_id"]),
        "pci.sub_device_id": ("", "0x" + g.get("pci_sub_system_id", "000010DE")),
        "pcie.link.gen.current": ("", str(gen)),
        "pcie.link.gen.gpucurrent": ("", str(gen)),
        "pcie.link.gen.max": ("", str(g["max_pcie_gen"])),
        "pcie.link.gen.gpumax": ("", str(g["max_pcie_gen"])),
        "pcie.link.gen.hostmax": ("", str(g["max_pcie_gen"])),
        "pcie.link.width.current": ("", str(width)),
        "pcie.link.width.max": ("", str(g["max_pcie_width"])),
        "index": ("", str(g["index"])),
        "display_mode": ("", "[Requested functionality has been deprecated]"),
        "display_active": ("", "Disabled"),
        "persistence_mode": ("", "Enabled" if view.persistence() else "Disabled"),
        "accounting.mode": ("", "Disabled"),
        "vbios_version": ("", g.get("vbios_version", "[N/A]")),
        "gpu_recovery_action": ("", "Reset" if r_pending else "None"),
        "fan.speed": ("%", "[N/A]"),
        "pstate": ("", view.perf_state()),
        "clocks_event_reasons.supported": ("", "0x00000000000001FF"),
        "clocks_event_reasons.active": ("", _reasons_active(view)),
        "clocks_event_reasons.gpu_idle": ("", gpu_tree._active(view.clocks_idle())),
        "clocks_event_reasons.applications_clocks_setting": ("", "Not Active"),
        "clocks_event_reasons.sw_power_cap": ("", "Not Active"),
        "clocks_event_reasons.hw_slowdown": ("", "Not Active"),
        "clocks_event_reasons.hw_thermal_slowdown": ("", "Not Active"),
        "clocks_event_reasons.hw_power_brake_slowdown": ("", "Not Active"),
        "clocks_event_reasons.sw_thermal_slowdown": ("", "Not Active"),
        "clocks_event_reasons.sync_boost": ("", "Not Active"),
        "memory.total": ("MiB", str(total)),
        "memory.reserved": ("MiB", str(reserved)),
        "memory.used": ("MiB", str(used)),
        "memory.free": ("MiB", str(free)),
        "compute_mode": ("", view.compute_mode()),
        "compute_cap": ("", g.get("compute_capability", "[N/A]")),
        "utilization.gpu": ("%", util),
        "utilization.memory": ("%", util),
        "ecc.mode.current": ("", "Enabled" if ecc else "[N/A]"),
        "ecc.mode.pending": ("", "Enabled" if ecc else "[N/A]"),
        "ecc.errors.corrected.volatile.total": ("", "0" if ecc else "[N/A]"),
        "ecc.errors.corrected.aggregate.total": ("", "0" if ecc else "[N/A]"),
        "ecc.errors.uncorrected.volatile.dram": ("", ecc_str),
        "ecc.errors.uncorrected.volatile.device_memory": ("", ecc_str),
        "ecc.errors.uncorrected.volatile.total": ("", ecc_str),
        "ecc.errors.uncorrected.aggregate.dram": ("", ecc_str),
        "ecc.errors.uncorrected.aggregate.device_memory": ("", ecc_str),
        "ecc.errors.uncorrected.aggregate.total": ("", ecc_str),
        "retired_pages.single_bit_ecc.count": ("", str(sbe) if ret_ok else "[N/A]"),
        "retired_pages.double_bit.count": ("", str(dbe) if ret_ok else "[N/A]"),
        "retired_pages.pending": ("", ("Yes" if ret_pending else "No") if ret_ok else "[N/A]"),
        "remapped_rows.correctable": ("", str(r_corr) if row_ok else "[N/A]"),
        "remapped_rows.uncorrectable": ("", str(r_unc) if row_ok else "[N/A]"),
        "remapped_rows.pending": ("", ("Yes" if r_pending else "No") if row_ok else "[N/A]"),
        "remapped_rows.failure": ("", "No" if row_ok else "[N/A]"),
        "temperature.gpu": ("", str(view.temperature())),
        "temperature.memory": (
            "",
            str(g["memory_temperature_c"]) if g.get("memory_temperature_c") else "N/A",
        ),
        "power.management": ("", "[Requested functionality has been deprecated]"),
        "power.draw": ("W", f"{view.power_draw():.2f}"),
        "power.draw.average": ("W", f"{view.power_draw():.2f}"),
        "power.draw.instant": ("W", f"{view.power_draw():.2f}"),
        "power.limit": ("W", f"{g['power_limit_w']:.2f}"),
        "enforced.power.limit": ("W", f"{g['power_limit_w']:.2f}"),
        "power.default_limit": ("W", f"{g['power_limit_w']:.2f}"),
        "power.min_limit": ("W", f"{g.get('min_power_limit_w', 100):.2f}"),
        "power.max_limit": ("W", f"{g['power_limit_w']:.2f}"),
        "clocks.current.graphics": ("MHz", str(c.get("graphics_idle", 345))),
        "clocks.current.sm": ("MHz", str(c.get("graphics_idle", 345))),
        "clocks.current.memory": ("MHz", str(c.get("memory", 2619))),
        "clocks.current.video": ("MHz", str(c.get("video_idle", 765))),
        "clocks.max.graphics": ("MHz", str(c.get("max_graphics", 1980))),
        "clocks.max.sm": ("MHz", str(c.get("max_graphics", 1980))),
        "clocks.max.memory": ("MHz", str(c.get("memory", 2619))),
        "mig.mode.current": ("", _na(mig_cur)),
        "mig.mode.pending": ("", _na(mig_pend)),
        "fabric.state": ("", fab_state),
        "fabric.status": ("", fab_status),
    }
    return fields


# Other spellings nvidia-smi accepts for the same property.
ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "id": "index",
    "pcie.link.gen.gpu_current": "pcie.link.gen.gpucurrent",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks_throttle_reasons.supported": "clocks_event_reasons.supported",
    "clocks_throttle_reasons.gpu_idle": "clocks_event_reasons.gpu_idle",
    "clocks_throttle_reasons.hw_slowdown": "clocks_event_reasons.hw_slowdown",
    "clocks_throttle_reasons.sw_power_cap": "clocks_event_reasons.sw_power_cap",
    "clocks_throttle_reasons.hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown": "clocks_event_reasons.sw_thermal_slowdown",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "temperature.memory": "temperature.memory",
    "ecc.errors.uncorrected.volatile.device_memory": "ecc.errors.uncorrected.volatile.device_memory",
    "memory.total": "memory.total",
    "power.limit": "power.limit",
}


def cmd_query_gpu(drv: nvemu.Driver, gpus: list[dict], fields_arg: str, fmt: str) -> int:
    opts = [o.strip() for o in fmt.split(",")]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        _out(f'"{fmt}" is not a valid format.\n{USAGE_HINT}\n')
        return 2
    names = [f.strip() for f in fields_arg.split(",") if f.strip()]
    sample = query_fields(GpuView(drv, drv.hw["gpus"][0]), drv, len(drv.hw["gpus"]))
    for name in names:
        if ALIASES.get(name, name) not in sample:
            _out(f'Field "{name}" is not a valid field to query.\n\n{USAGE_HINT}\n')
            return 2
    ok, lost = split_lost(drv, gpus)
    if not ok:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    lines = []
    if "noheader" not in opts:
        header = []
        for name in names:
            # The header names the canonical property: `--query-gpu=gpu_name` prints "name".
            canonical = ALIASES.get(name, name)
            unit = sample[canonical][0]
            header.append(f"{canonical} [{unit}]" if unit else canonical)
        lines.append(", ".join(header))
    for gpu in gpus:
        if drv.off_bus(gpu["index"]):
            lines.append(lost_message(gpu).rstrip("\n"))
            continue
        values = query_fields(GpuView(drv, gpu), drv, len(drv.hw["gpus"]))
        row = []
        for name in names:
            unit, value = values[ALIASES.get(name, name)]
            row.append(value if "nounits" in opts else _unit(value, unit))
        lines.append(", ".join(row))
    _out("\n".join(lines) + "\n")
    return nvemu.EXIT_GPU_LOST if lost else 0


# ---- changes: -c, -mig, -pm, -r, compute-policy, mig: static_tools ----------------------------------------
def static_tools(argv: list[str]) -> int:
    """Every command that changes the driver state (``-c``, ``-mig``, ``-pm``, ``-r``, ``compute-policy``,
    ``mig``): what gpuready's deploy, NVIDIA's DRA driver and MPS control daemon change on a GPU. One
    implementation, the lab's static tools' (gpuready/lab/silicon/tools: smi.go, mig.go, over the machine package
    that the mock NVML's nvmlDeviceSetComputeMode, nvmlDeviceSetMigMode and nvmlDeviceCreateGpuInstance write
    through too), which must answer where no Python runs anyway. This nvidia-smi only reads."""
    sys.stdout.flush()
    tools = os.environ.get(STATIC_TOOLS_ENV)
    if not tools:
        _err(
            f"nvidia-smi {' '.join(argv)}: {STATIC_TOOLS_ENV} is not set: run the emulator as /usr/bin/nvidia-smi\n"
        )
        return 1
    os.execv(tools, [tools, "nvidia-smi", *argv])
    return 1  # not reached


# ---- nvlink / topo ----------------------------------------------------------------------------
def cmd_nvlink_status(drv: nvemu.Driver, gpus: list[dict]) -> int:
    rc = 0
    for gpu in gpus:
        if drv.off_bus(gpu["index"]):
            _out(lost_message(gpu))
            rc = nvemu.EXIT_GPU_LOST
            continue
        _out(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})\n")
        view = GpuView(drv, gpu)
        links = gpu.get("nvlink_links", 0)
        if view.mig_current:
            _out("Nvlink queries are not supported for Devices in MIG mode\n")
        elif links == 0:
            continue
        elif view.effects["nvlink_down"]:
            _out("NVML: Unable to retrieve NVLink information as all links are inActive\n")
        else:
            speed = f"{gpu.get('nvlink_gbps', 25):g}"
            for link in range(links):
                _out(f"\t Link {link}: {speed} GB/s\n")
    return rc


TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def cmd_topo(drv: nvemu.Driver) -> int:
    gpus = drv.visible_gpus()
    if not gpus:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    nvswitch = drv.hw.get("system", {}).get("nvswitch")
    head = "".join(f"GPU{g['index']}\t" for g in gpus)
    lines = [f"\t\x1b[4m{head}CPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"]
    for a in gpus:
        cells = []
        for b in gpus:
            if a is b:
                cells.append(" X ")
                continue
            links = a.get("nvlink_links", 0)
            down = drv.gpu_effects(a["index"])["nvlink_down"] or drv.gpu_effects(b["index"])["nvlink_down"]
            if links and not down and nvswitch:
                cells.append(f"NV{links}")
            elif links and not down and len(gpus) > 1:
                cells.append(f"NV{links // (len(drv.hw['gpus']) - 1)}")
            elif a.get("numa_node", 0) == b.get("numa_node", 0):
                cells.append("NODE")
            else:
                cells.append("SYS")
        row = "\t".join(
            [f"GPU{a['index']}", *cells, a.get("cpu_affinity", "0-7"), str(a.get("numa_node", 0))]
        )
        lines.append(row + "\t\tN/A")
    _out("\n".join(lines) + "\n" + TOPO_LEGEND)
    return 0


# ---- argument handling -------------------------------------------------------------------------
def _take(args: list[str], i: int, opt: str) -> str:
    if i + 1 >= len(args):
        raise UsageError(f'Option "{opt}" requires a value.')
    return args[i + 1]


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except UsageError as exc:
        _out(f"{exc}\n\n{USAGE_HINT}\n")
        return 2
    except nvemu.NvmlError as exc:
        _out(f"{exc}\n")
        return exc.code
    except BrokenPipeError:  # `nvidia-smi -L | head -1`: stop quietly, as the real tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str]) -> int:
    if argv[:1] in (["mig"], ["compute-policy"]) or STATIC_FLAGS & set(argv):
        return static_tools(argv)
    if argv[:1] == ["nvlink"]:
        return _nvlink(argv[1:])
    if argv[:1] == ["topo"]:
        if argv[1:2] not in (["-m"], ["--matrix"]):
            raise UsageError("Invalid combination of input arguments.")
        drv = nvemu.Driver()
        drv.check_loaded()
        return cmd_topo(drv)
    ids = None
    action = "table"
    xml = False
    groups: list[str] | None = None
    query = fmt = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-i", "--id"):
            ids = _take(argv, i, arg)
            i += 1
        elif arg.startswith("--id="):
            ids = arg.split("=", 1)[1]
        elif arg in ("-L", "--list-gpus"):
            action = "list"
        elif arg in ("-q", "--query"):
            action = "query"
        elif arg in ("-x", "--xml-format"):
            xml = True
        elif arg in ("-d", "--display"):
            groups = [g.strip().upper() for g in _take(argv, i, arg).split(",")]
            for group in groups:
                if group not in gpu_tree.DISPLAY_GROUPS:
                    raise UsageError(f'"{group}" is not a valid display type.')
            i += 1
        elif arg.startswith("--query-gpu="):
            action, query = "query-gpu", arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg in ("--version", "-v"):
            action = "version"
        else:
            raise UsageError(
                f"Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n{arg}"
            )
        i += 1

    drv = nvemu.Driver()
    drv.check_loaded()
    if action == "version":
        return cmd_version(drv)
    try:
        gpus = select(drv, ids)
    except LookupError:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    if not drv.visible_gpus():
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    if action == "list":
        return cmd_list(drv, gpus)
    if action == "query":
        return cmd_query(drv, gpus, xml, groups)
    if action == "query-gpu":
        if fmt is None:
            raise UsageError('"--format" must be specified with "--query-gpu".')
        return cmd_query_gpu(drv, gpus, query or "", fmt)
    return cmd_table(drv, gpus)


def _nvlink(argv: list[str]) -> int:
    ids = None
    status = False
    i = 0
    while i < len(argv):
        if argv[i] in ("-s", "--status"):
            status = True
        elif argv[i] in ("-i", "--id"):
            ids = _take(argv, i, argv[i])
            i += 1
        else:
            raise UsageError("Invalid combination of input arguments.")
        i += 1
    if not status:
        raise UsageError("Invalid combination of input arguments.")
    drv = nvemu.Driver()
    drv.check_loaded()
    try:
        gpus = select(drv, ids)
    except LookupError:
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    if not drv.visible_gpus():
        _out("No devices were found\n")
        return nvemu.EXIT_NOT_FOUND
    return cmd_nvlink_status(drv, gpus)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
