"""Emulated `nvbandwidth` (NVIDIA/nvbandwidth v0.8): copy bandwidth computed from the lab machine's hardware file.

Stdlib only (installed into lab hosts next to nvemu.py and gpu_tree.py). It prints what the real tool prints for
the copy-engine testcases the diag layer runs, with ``-j`` (jsoncpp 1.9.5's ``toStyledString``: tab indents,
keys sorted, every non-empty array one element per line, doubles with 17 significant digits) or as plain text;
matrix cells are C++ ``operator<<`` doubles (6 significant digits) in JSON and ``%.2f`` in text.

The figures (GB/s = 10^9 bytes/s), all deterministic:

* host<->device: 85% of the theoretical unidirectional bandwidth of the GPU's *current* PCIe link
  (``GpuView.pcie_current``, the same link ``nvidia-smi`` reports, so a fault's ``pcie_gen_drop``/``pcie_width_divisor`` lowers it). Healthy
  pinned copies measure 0.82-0.88 of theoretical (Gen4 x16: ~26 GB/s of 31.5; Gen5 x16: ~55 of 63).
* GPU<->GPU over NVLink: links x per-link rate x 0.8 (H100 NVSwitch: 18 x 26.562 x 0.8 = 382 GB/s; public 8x H100
  nvbandwidth runs read 370-374). The link count per pair is the one ``nvidia-smi topo -m`` prints: all links
  through NVSwitch, ``links // (GPUs - 1)`` on a directly connected board (HGX A100 4-GPU: NV4, 80 GB/s).
* GPU<->GPU over PCIe (no NVLink, or ``nvlink_down`` on either GPU): 80% of the slower of the two current links
  when both GPUs hang off the same NUMA node; across NUMA nodes peer access is impossible (``N/A``), as on hosts
  where ``nvidia-smi topo -p2p r`` reports the pair as not supported.
* every figure gets a +-1% spread derived from the GPUs' UUIDs (no randomness: same machine, same numbers).

Fault effects (``gpuready.lab.faults.Effects``): ``bandwidth_factor`` scales every figure involving that GPU;
``off_bus`` hides the GPU from CUDA
(fewer devices, later ordinals move up); ``driver_mismatch`` (or a module/library version mismatch) makes
``cuInit`` fail with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, an NVSwitch system whose fabric is not up (Fabric
Manager stopped or ``fabric_failed``) with CUDA_ERROR_SYSTEM_NOT_READY; both print nvbandwidth's
``CU_ASSERT`` message and exit 1. MIG mode is not modelled.

Not emulated (a message on stderr and exit 2, so nobody mistakes it for a measurement): running every testcase
(no ``-t``), ``-l``, ``-p`` and testcases other than the four copy-engine ones below.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys

import nvemu
from gpu_tree import GpuView

VERSION = "v0.8"
GIT_VERSION = "v0.8"  # `git describe --always --tags` of a release checkout
SOURCE_FILE = "/opt/nvbandwidth/nvbandwidth.cpp"  # __FILE__ as the emulated build saw it
CU_INIT_LINE = 270  # line of CU_ASSERT(cuInit(0)) in v0.8's nvbandwidth.cpp
DEFAULT_BUFFER_MIB = 512
EXIT_NOT_EMULATED = 2

# nvbandwidth v0.8's testcases in createTestcases() order: `-t` takes a name or this index.
TESTCASES = (
    "host_to_device_memcpy_ce",
    "device_to_host_memcpy_ce",
    "host_to_device_bidirectional_memcpy_ce",
    "device_to_host_bidirectional_memcpy_ce",
    "device_to_device_memcpy_read_ce",
    "device_to_device_memcpy_write_ce",
    "device_to_device_bidirectional_memcpy_read_ce",
    "device_to_device_bidirectional_memcpy_write_ce",
    "all_to_host_memcpy_ce",
    "all_to_host_bidirectional_memcpy_ce",
    "host_to_all_memcpy_ce",
    "host_to_all_bidirectional_memcpy_ce",
    "all_to_one_write_ce",
    "all_to_one_read_ce",
    "one_to_all_write_ce",
    "one_to_all_read_ce",
    "host_to_device_memcpy_sm",
    "device_to_host_memcpy_sm",
    "host_to_device_bidirectional_memcpy_sm",
    "device_to_host_bidirectional_memcpy_sm",
    "device_to_device_memcpy_read_sm",
    "device_to_device_memcpy_write_sm",
    "device_to_device_bidirectional_memcpy_read_sm",
    "device_to_device_bidirectional_memcpy_write_sm",
    "all_to_host_memcpy_sm",
    "all_to_host_bidirectional_memcpy_sm",
    "host_to_all_memcpy_sm",
    "host_to_all_bidirectional_memcpy_sm",
    "all_to_one_write_sm",
    "all_to_one_read_sm",
    "one_to_all_write_sm",
    "one_to_all_read_sm",
    "host_device_latency_sm",
    "device_to_device_latency_sm",
    "device_local_copy",
)

# The emulated ones: testcase -> the description nvbandwidth prints above its matrix (testcases_ce.cpp).
DESCRIPTIONS = {
    "host_to_device_memcpy_ce": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_host_memcpy_ce": "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_read_ce": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_device_memcpy_write_ce": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
}

# Unidirectional data rate per lane in GB/s: 8b/10b for Gen1-2, 128b/130b for Gen3-5, and for Gen6 236 TLP bytes
# per 256-byte flit (the figure gpuready.nvidia.bandwidth uses for its floors).
PCIE_LANE_GBPS = {
    1: 0.25,
    2: 0.5,
    3: 8 * 128 / 130 / 8,
    4: 16 * 128 / 130 / 8,
    5: 32 * 128 / 130 / 8,
    6: 64 * 236 / 256 / 8,
}
HOST_COPY_EFFICIENCY = 0.85
PCIE_PEER_EFFICIENCY = 0.80
NVLINK_EFFICIENCY = 0.80

USAGE = """\
nvbandwidth CLI:
  -h [ --help ]                  Produce help message
  -b [ --bufferSize ] arg (=512) Memcpy buffer size in MiB
  -l [ --list ]                  List available testcases
  -t [ --testcase ] arg          Testcase(s) to run (by name or index)
  -p [ --testcasePrefixes ] arg  Testcase(s) to run (by prefix))
  -v [ --verbose ]               Verbose output
  -s [ --skipVerification ]      Skips data verification after copy
  -d [ --disableAffinity ]       Disable automatic CPU affinity control
  -i [ --testSamples ] arg (=3)  Iterations of the benchmark
  -m [ --useMean ]               Use mean instead of median for results
  -j [ --json ]                  Print output in json format instead of plain
                                 text.
"""

# CUresult name and cuGetErrorString text of the errors cuInit returns here.
CUDA_ERROR_NO_DEVICE = ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected")
CUDA_ERROR_SYSTEM_NOT_READY = ("CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized")
CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = (
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    "system has unsupported display driver / cuda driver combination",
)


class InvalidArguments(Exception):
    pass


class NotEmulated(Exception):
    pass


# ---- command line (boost::program_options rules) ------------------------------------------------
LONG = {
    "--help": "h",
    "--bufferSize": "b",
    "--list": "l",
    "--testcase": "t",
    "--testcasePrefixes": "p",
    "--verbose": "v",
    "--skipVerification": "s",
    "--disableAffinity": "d",
    "--testSamples": "i",
    "--useMean": "m",
    "--json": "j",
    "--loopCount": "loopCount",
    "--perfFormatter": "perfFormatter",
}
FLAGS = {"h", "l", "v", "s", "d", "m", "j", "perfFormatter"}
NUMBERS = {"b", "i", "loopCount"}


def parse_args(argv: list[str]) -> dict:
    """Options as nvbandwidth's parser reads them; InvalidArguments where boost would throw."""
    opts: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            if name not in LONG:
                raise InvalidArguments(arg)
            key = LONG[name]
            value = value or None
        elif arg.startswith("-") and len(arg) >= 2 and arg[1] in "hbltpvsdimj":
            key, value = arg[1], arg[2:] or None
        else:
            raise InvalidArguments(arg)  # boost: a positional argument nobody declared
        if key in opts:
            raise InvalidArguments(f"option '{arg}' cannot be specified more than once")
        if key in FLAGS:
            if value is not None:
                # -jv: boost's unix style lets short flags stick together
                if arg.startswith("--") or any(c not in "hlvsdmj" for c in value):
                    raise InvalidArguments(arg)
                for flag in value:
                    if flag in opts:
                        raise InvalidArguments(arg)
                    opts[flag] = True
            opts[key] = True
        elif key in ("t", "p"):  # multitoken: everything up to the next option
            values = [value] if value else []
            while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                values.append(argv[i + 1])
                i += 1
            if not values:
                raise InvalidArguments(arg)
            opts[key] = values
        else:
            if value is None:
                if i + 1 >= len(argv):
                    raise InvalidArguments(arg)
                value = argv[i + 1]
                i += 1
            if key in NUMBERS and not value.isdigit():
                raise InvalidArguments(value)
            opts[key] = int(value)
        i += 1
    return opts


# ---- output formats -----------------------------------------------------------------------------
def cxx_double(value: float) -> str:
    """``std::ostream << double`` with default flags: 6 significant digits, like printf's %g."""
    return f"{value:g}"


def json_double(value: float) -> str:
    """jsoncpp 1.9.5's valueToString(double): %.17g, with '.0' added where that leaves no '.' or exponent."""
    if value != value:
        return "null"
    if value in (float("inf"), float("-inf")):
        return "1e+9999" if value > 0 else "-1e+9999"
    text = f"{value:.17g}"
    return text if ("." in text or "e" in text) else text + ".0"


def styled_json(value: object) -> str:
    """jsoncpp 1.9.5 ``Value::toStyledString()`` (StreamWriterBuilder defaults, checked against libjsoncpp)."""
    out: list[str] = []
    state = {"indented": True}

    def newline(depth: int) -> None:
        out.append("\n" + "\t" * depth)

    def with_indent(text: str, depth: int) -> None:
        if not state["indented"]:
            newline(depth)
        out.append(text)
        state["indented"] = False

    def write(v: object, depth: int) -> None:
        if isinstance(v, dict):
            if not v:
                out.append("{}")
                return
            with_indent("{", depth)
            for n, key in enumerate(sorted(v)):
                with_indent(json.dumps(key), depth + 1)
                out.append(" : ")
                write(v[key], depth + 1)
                if n < len(v) - 1:
                    out.append(",")
            with_indent("}", depth)
        elif isinstance(v, list):
            if not v:
                out.append("[]")
                return
            with_indent("[", depth)
            for n, item in enumerate(v):
                if not state["indented"]:
                    newline(depth + 1)
                state["indented"] = True
                write(item, depth + 1)
                state["indented"] = False
                if n < len(v) - 1:
                    out.append(",")
            with_indent("]", depth)
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(json_double(v))
        elif v is None:
            out.append("null")
        else:
            out.append(json.dumps(str(v)))

    write(value, 0)
    return "".join(out) + "\n"


# ---- the machine as CUDA sees it ----------------------------------------------------------------
def _spread(*parts: str) -> float:
    """A deterministic factor in [0.99, 1.01) from the given identifiers."""
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return 0.99 + 0.02 * int.from_bytes(digest[:4], "big") / 2**32


class Machine:
    """CUDA devices (visible GPUs in PCI order) and the bandwidth of every copy path between them."""

    def __init__(self, drv: nvemu.Driver):
        self.drv = drv
        self.devices = drv.visible_gpus()
        self.nvswitch = bool(drv.hw.get("system", {}).get("nvswitch"))
        self.total_gpus = len(drv.hw["gpus"])

    def effects(self, gpu: dict) -> nvemu.Effects:
        return self.drv.gpu_effects(gpu["index"])

    def pcie_gbps(self, gpu: dict) -> float:
        gen, width = GpuView(self.drv, gpu).pcie_current()
        return PCIE_LANE_GBPS.get(gen, PCIE_LANE_GBPS[1]) * width

    def slow(self, *gpus: dict) -> float:
        return min([self.effects(g).least("bandwidth_factor", 1.0) for g in gpus], default=1.0)

    def host(self, gpu: dict, direction: str) -> float:
        rate = self.pcie_gbps(gpu) * HOST_COPY_EFFICIENCY * self.slow(gpu)
        return rate * _spread(gpu["uuid"], direction)

    def nvlinks(self, a: dict, b: dict) -> int:
        """NVLinks between two GPUs, by the rule `nvidia-smi topo -m` prints (0 when either GPU's are down)."""
        links = min(a.get("nvlink_links", 0), b.get("nvlink_links", 0))
        if not links or self.effects(a).flag("nvlink_down") or self.effects(b).flag("nvlink_down"):
            return 0
        if self.nvswitch:
            return links
        return links // max(self.total_gpus - 1, 1)

    def peer(self, dst: dict, src: dict) -> float | None:
        """GB/s of a copy from ``src`` into ``dst`` run in dst's context; None where peer access is impossible."""
        links = self.nvlinks(dst, src)
        if links:
            per_link = min(dst.get("nvlink_gbps", 25), src.get("nvlink_gbps", 25))
            rate = links * per_link * NVLINK_EFFICIENCY
        elif dst.get("numa_node", 0) == src.get("numa_node", 0):
            rate = min(self.pcie_gbps(dst), self.pcie_gbps(src)) * PCIE_PEER_EFFICIENCY
        else:
            return None
        return rate * self.slow(dst, src) * _spread(dst["uuid"], src["uuid"])

    def matrix(self, testcase: str) -> list[list[float | None]] | None:
        """The testcase's matrix (rows of GB/s, None = N/A), or None where nvbandwidth waives it."""
        if testcase == "host_to_device_memcpy_ce":
            return [[self.host(g, "h2d") for g in self.devices]]
        if testcase == "device_to_host_memcpy_ce":
            return [[self.host(g, "d2h") for g in self.devices]]
        # device_to_device_memcpy_read_ce: row reads from column; _write_ce: row writes to column.
        read = testcase.endswith("_read_ce")
        rows = [
            [None if a is b else (self.peer(a, b) if read else self.peer(b, a)) for b in self.devices]
            for a in self.devices
        ]
        if all(v is None for row in rows for v in row):
            return None  # filterHasAccessiblePeerPairs: no pair at all
        return rows

    def device_info(self) -> list[str]:
        """getDeviceDisplayInfo() per ordinal: name and PCI domain:bus:device in lower-case hex."""
        out = []
        for gpu in self.devices:
            domain, bus, rest = gpu["pci_bus_id"].split(":")
            device = rest.split(".")[0]
            out.append(f"{gpu['name']} ({int(domain, 16):08x}:{int(bus, 16):02x}:{int(device, 16):02x})")
        return out


def cuinit_error(drv: nvemu.Driver) -> tuple[str, str] | None:
    """What cuInit(0) returns on this machine, None for CUDA_SUCCESS."""
    try:
        drv.check_loaded()
    except nvemu.NvmlError as exc:
        return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH if exc.code == nvemu.EXIT_MISMATCH else CUDA_ERROR_NO_DEVICE
    visible = drv.visible_gpus()
    if not visible:
        return CUDA_ERROR_NO_DEVICE
    # NVSwitch GPUs are unusable until Fabric Manager has set up the fabric (nvidia-smi: fabric "In Progress").
    if drv.hw.get("system", {}).get("nvswitch") and GpuView(drv, visible[0]).fabric()[0] != "Completed":
        return CUDA_ERROR_SYSTEM_NOT_READY
    return None


def cu_assert_message(error: tuple[str, str], expression: str, line: int) -> str:
    name, text = error
    return f"[{name}] {text} in expression {expression} in int main(int, char**)() : {SOURCE_FILE}:{line}\n"


# ---- running --------------------------------------------------------------------------------------
def cuda_version(driver: str) -> int:
    major, minor = nvemu.cuda_version(driver).split(".")
    return int(major) * 1000 + int(minor) * 10


def resolve(selection: list[str]) -> list[tuple[str, str | None]]:
    """(the token as given, its testcase or None where nvbandwidth finds none: by index when it is a number)."""
    out: list[tuple[str, str | None]] = []
    for token in selection:
        if token.lstrip("-").isdigit():
            index = int(token)
            out.append((token, TESTCASES[index] if 0 <= index < len(TESTCASES) else None))
        else:
            out.append((token, token if token in TESTCASES else None))
    for _given, name in out:
        if name is not None and name not in DESCRIPTIONS:
            raise NotEmulated(f"testcase {name} is not emulated (emulated: {', '.join(DESCRIPTIONS)})")
    return out


def _summary(matrix: list[list[float | None]]) -> tuple[float, float, float, float]:
    """sum, min, max, average exactly as nvbandwidth folds N/A cells in (as 0.0)."""
    total, low, high, count = 0.0, sys.float_info.max, sys.float_info.min, 0
    for row in matrix:
        for v in row:
            x = 0.0 if v is None else v
            total += x
            low, high = min(low, x), max(high, x)
            count += x > 0
    return total, low, high, (total / count if count else float("nan"))


def run_json(machine: Machine, drv: nvemu.Driver, cases: list[tuple[str, str | None]], opts: dict) -> dict:
    body: dict = {
        "version": VERSION,
        "git_version": GIT_VERSION,
        "CUDA Runtime Version": cuda_version(drv.version),
        "Driver Version": drv.version,
        "GPU Device list": [
            f"{n}: {info}: ({socket.gethostname()})" for n, info in enumerate(machine.device_info())
        ],
    }
    if opts.get("b", DEFAULT_BUFFER_MIB) < DEFAULT_BUFFER_MIB:
        body["warning"] = (
            "NOTE: You have chosen a buffer size that is smaller than the default buffer size. It is suggested "
            "to use the default buffer size (64MB) to achieve maximal peak bandwidth."
        )
    testcases: list[dict[str, object]] = []
    for given, name in cases:
        if name is None:
            testcases.append({"name": given, "status": "ERROR"})
            continue
        matrix = machine.matrix(name)
        if matrix is None:
            testcases.append({"name": name, "status": "Waived"})
            continue
        total, low, high, average = _summary(matrix)
        entry: dict[str, object] = {
            "name": name,
            "status": "Passed",
            "bandwidth_description": DESCRIPTIONS[name],
            "bandwidth_matrix": [["N/A" if v is None else cxx_double(v) for v in row] for row in matrix],
            "sum": total,
        }
        if opts.get("v"):
            entry.update({"min": low, "max": high, "average": average})
        testcases.append(entry)
    body["testcases"] = testcases
    return {"nvbandwidth": body}


def run_text(machine: Machine, drv: nvemu.Driver, cases: list[tuple[str, str | None]], opts: dict) -> str:
    cuda = cuda_version(drv.version)
    lines = [f"nvbandwidth Version: {VERSION}", f"Built from Git version: {GIT_VERSION}", ""]
    if opts.get("b", DEFAULT_BUFFER_MIB) < DEFAULT_BUFFER_MIB:
        lines.append(
            "NOTE: You have chosen a buffer size that is smaller than the default buffer size. It is suggested "
            "to use the default buffer size (64MB) to achieve maximal peak bandwidth."
        )
    lines += [
        f"CUDA Runtime Version: {cuda}",
        f"CUDA Driver Version: {cuda}",
        f"Driver Version: {drv.version}",
        "",
    ]
    lines.append(socket.gethostname())
    lines += [f"Device {n}: {info}" for n, info in enumerate(machine.device_info())]
    lines.append("")
    for given, name in cases:
        if name is None:
            problem = (
                "index " + given + " out of bound!" if given.lstrip("-").isdigit() else given + " not found!"
            )
            lines.append(f"ERROR: Testcase {problem}")
            continue
        matrix = machine.matrix(name)
        if matrix is None:
            lines.append("Waived: ")
            continue
        lines += [f"Running {name}.", DESCRIPTIONS[name]]
        lines.append("  " + "".join(f"{c:>10}" for c in range(len(matrix[0]))))
        for r, row in enumerate(matrix):
            lines.append(f"{r:>2}" + "".join(f"{'N/A' if v is None else f'{v:.2f}':>10}" for v in row))
        total, low, high, average = _summary(matrix)
        lines += ["", f"SUM {name} {total:.2f}"]
        if opts.get("v"):
            lines += [f"MIN {name} {low:.2f}", f"MAX {name} {high:.2f}", f"AVG {name} {average:.2f}"]
        lines.append("")
    lines += [
        "NOTE: The reported results may not reflect the full capabilities of the platform.",
        "Performance can vary with software drivers, hardware clocks, and system topology.",
        "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    try:
        opts = parse_args(argv)
    except InvalidArguments:
        # Before -j takes effect: plain text on stdout, whatever the flags.
        sys.stdout.write(
            f"nvbandwidth Version: {VERSION}\nBuilt from Git version: {GIT_VERSION}\n\n"
            f"ERROR: Invalid Arguments \n{''.join(a + ' ' for a in ['nvbandwidth', *argv])}:\n\n{USAGE}\n"
        )
        return 1
    as_json = bool(opts.get("j"))
    if opts.get("h"):
        if not as_json:  # the help goes through OUTPUT, which -j silences
            sys.stdout.write(
                f"nvbandwidth Version: {VERSION}\nBuilt from Git version: {GIT_VERSION}\n\n{USAGE}\n"
            )
        return 0
    try:
        if opts.get("l") or opts.get("p"):
            raise NotEmulated("-l and -p are not emulated; name testcases with -t")
        if "t" not in opts:
            raise NotEmulated("running every testcase is not emulated; name testcases with -t")
        cases = resolve(opts["t"])
    except NotEmulated as exc:
        sys.stderr.write(f"nvbandwidth (gpuready lab emulator): {exc}\n")
        return EXIT_NOT_EMULATED

    header = {"version": VERSION, "git_version": GIT_VERSION}
    error: tuple[str, str] | None
    try:
        drv = nvemu.Driver()
    except nvemu.NvmlError:
        error = CUDA_ERROR_NO_DEVICE
        drv = None
    else:
        error = cuinit_error(drv)
    if error is not None or drv is None:
        message = cu_assert_message(error or CUDA_ERROR_NO_DEVICE, "cuInit(0)", CU_INIT_LINE)
        if as_json:
            sys.stdout.write(styled_json({"nvbandwidth": {**header, "error": message}}) + "\n")
        else:
            sys.stdout.write(f"nvbandwidth Version: {VERSION}\nBuilt from Git version: {GIT_VERSION}\n\n")
            sys.stderr.write(message + "\n")
        return 1

    machine = Machine(drv)
    if as_json:
        sys.stdout.write(styled_json(run_json(machine, drv, cases, opts)) + "\n")
    else:
        sys.stdout.write(run_text(machine, drv, cases, opts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
