"""Emulated ``dcgmi`` (DCGM 4.x): ``dcgmi diag -r 1|2|3 [-j] [-i <gpus>] [-v]`` and ``dcgmi --version``.

Stdlib only, like the other emulated tools: it runs inside lab hosts with the system's python3 and imports
only its sibling ``nvemu`` (the emulated driver: hardware file, driver state, faults). The answers follow what
DCGM 4.x prints, so that :func:`gpuready.nvidia.dcgm_diag.parse_diag_json` reads the emulator exactly as it
reads real captures (tests/fixtures/dcgm-diag):

* ``-j``: the DCGM 4 document - ``"DCGM Diagnostic"`` -> ``test_categories`` -> ``tests`` -> ``results``
  (``entity_group`` "GPU", ``entity_group_id`` 1, ``entity_id``, ``status``, ``info``, ``warnings`` objects
  with ``error_category``/``error_id``/``error_severity``/``warning``) and ``test_summary``; ``entity_groups``
  and ``metadata`` (``Driver Version Detected``, ``version``) beside it. Layout as jsoncpp writes it in the
  DCGM 4.5.2 captures: tab indents, ``"key" : `` with a line break before objects and arrays, keys sorted.
* without ``-j``: the table DCGM 4.x prints (``Successfully ran diagnostic for group.``, the Metadata block,
  one row per test with ``GPU<n>: <status>`` lines, ``Warning`` rows wrapped at 45 characters), as seen in
  NVIDIA/DCGM#253 (4.2.3, 4.4.1) and #282 (4.4.1). Per-GPU failure rows and ``-v`` ``Info`` rows were not seen
  in a capture and are approximate.
* Tests per level (DCGM 4): 1 = software; 2 = + memory, pcie (the level-2 documents of DCGM 4.2.3-4.5.2 hold
  exactly these three); 3 = + diagnostic, targeted_stress, targeted_power, memory_bandwidth (the DCGM docs'
  level table; level-3 membership was not checked against a 4.x capture). Named tests (``-r memory,pcie``)
  and the aliases quick/short/medium/long work too.
* Exit status: 0 when nothing failed (a Warn alone is still 0), 226 when a test failed (DCGM_ST_NVVS_ERROR,
  -30, as the shell sees it; the DCGM 4.2.3/4.5.2 captures exited 226), 235 when nv-hostengine cannot be
  reached (DCGM_ST_CONNECTION_NOT_VALID, -21; value from dcgm_structs, not seen in a capture).

Fault effects (``gpuready.lab.faults.Effects``, from the hardware file), as real DCGM reports them:

* the software test checks persistence mode like DCGM does (error 29, the exact wording of the real capture):
  a host without persistence mode fails it, as real hosts do;
* ``dcgm_memory_fails`` -> the memory test fails on that GPU with DCGM_FR_FAULTY_MEMORY (52) "Found 1 faulty memory
  elements on GPU <n> Run a field diagnostic on the GPU." (message + next step, the format of the captured
  warning; category/severity numbers from dcgm_errors.h's enums, the severity chosen by us);
* ``bandwidth_factor`` (a fraction of the normal copy rate) and ``pcie_gen_drop``/``pcie_width_divisor`` (link
  trained below its maximum, as the emulated nvidia-smi reports) -> the pcie test fails with DCGM_FR_LOW_BANDWIDTH (30) "Bandwidth
  of GPU <n> in direction d2h of <x> did not exceed minimum required bandwidth of <y>. ..." for d2h and h2d
  (directions and wording from DCGM's pcie plugin). The minimum used here is half the theoretical bandwidth of
  the GPU's maximum link; DCGM's real per-SKU ``min_bandwidth`` values were not looked up;
* ``row_remap_pending`` -> the software test fails with "Page Retirement/Row Remap: GPU <n> had memory errors
  and row remappings are pending ..." (DCGM_FR_PENDING_ROW_REMAP, 85; the sub-check prefix is assumed from the
  persistence message's);
* ``off_bus`` -> the GPU is not visible to DCGM: it is left out of the run (and of
  ``entity_groups``); naming only lost GPUs with ``-i`` is an error (approximate wording);
* ``driver_mismatch`` (or no loaded driver, no hardware file) -> NVML cannot start, so nv-hostengine is not
  running and dcgmi prints the real connection error ("Error: unable to establish a connection to the
  specified host: localhost" / "Error: Unable to connect to host engine. Host engine connection
  invalid/disconnected."). The same happens when ``GPUREADY_LAB_HOSTENGINE_PID`` names a pid file whose
  process is gone (the lab has no nv-hostengine daemon yet; without the variable the engine counts as up).

Measured values (bandwidth, latency, allocated bytes, gigaflops) are plausible fixed fractions of the
hardware file's figures, not measurements.
"""

from __future__ import annotations

import json
import os
import sys

import nvemu

DCGM_VERSION = "4.5.2"

EXIT_OK = 0
EXIT_NVVS_ERROR = 226  # DCGM_ST_NVVS_ERROR (-30) as an exit status
EXIT_CONNECTION = 235  # DCGM_ST_CONNECTION_NOT_VALID (-21)
EXIT_GPU_LOST = 238  # DCGM_ST_GPU_IS_LOST (-18)
EXIT_BADPARAM = 255  # DCGM_ST_BADPARAM (-1)

CONNECT_ERROR = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)

LEVEL_TESTS = {
    1: ("software",),
    2: ("software", "memory", "pcie"),
    3: (
        "software",
        "memory",
        "pcie",
        "diagnostic",
        "targeted_stress",
        "targeted_power",
        "memory_bandwidth",
    ),
}
LEVEL_ALIASES = {"quick": 1, "short": 1, "medium": 2, "long": 3}
CATEGORY = {
    "software": "Deployment",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "pcie": "Integration",
    "targeted_stress": "Stress",
    "targeted_power": "Stress",
    "memory_bandwidth": "Stress",
}
CATEGORY_ORDER = ("Deployment", "Hardware", "Integration", "Stress")

# Unidirectional PCIe GB/s per lane by generation (mirrors gpuready.nvidia.bandwidth, which this stdlib-only
# module cannot import; tests/unit/test_dcgmi_emulator.py checks that the two agree).
PCIE_LANE_GBPS = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 236 / 256 / 8,
}
HEALTHY_D2H, HEALTHY_H2D, HEALTHY_BIDIR = 0.86, 0.85, 1.55  # fractions of the link's theoretical rate
MIN_BANDWIDTH_FRACTION = 0.5

SYSTEM_TRIAGE = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
# dcgm_errors.h enums: categories (8 software other, 10 hardware memory, 1 performance threshold) and
# severities (1 monitor, 2 isolate, 5 config).
E_PERSISTENCE = (8, 29, 5)
E_ROW_REMAP = (10, 85, 6)
E_FAULTY_MEMORY = (10, 52, 2)
E_LOW_BANDWIDTH = (1, 30, 1)

_RANK = {"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}


class UsageError(Exception):
    pass


def _out(text: str) -> None:
    sys.stdout.write(text)


def _warning(meta: tuple[int, int, int], text: str) -> dict:
    category, error_id, severity = meta
    return {"error_category": category, "error_id": error_id, "error_severity": severity, "warning": text}


# ---- the machine ----------------------------------------------------------------------------------
def hostengine_up() -> bool:
    pid_file = os.environ.get("GPUREADY_LAB_HOSTENGINE_PID")
    if not pid_file:
        return True
    try:
        with open(pid_file, encoding="ascii") as f:
            pid = f.read().strip()
    except OSError:
        return False
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


def link_gbps(gen: int, width: int) -> float:
    return PCIE_LANE_GBPS[gen] * width


# ---- the tests --------------------------------------------------------------------------------------
def test_software(drv: nvemu.Driver, gpu: dict) -> dict:
    index = gpu["index"]
    warnings = []
    if not drv.persistence(gpu):
        warnings.append(
            _warning(
                E_PERSISTENCE,
                f"Persistence Mode: Persistence mode for GPU {index} is disabled. Enable persistence mode by "
                'running "nvidia-smi -i <gpuId> -pm 1 " as root.',
            )
        )
    if drv.gpu_effects(index)["row_remap_pending"]:
        warnings.append(
            _warning(
                E_ROW_REMAP,
                f"Page Retirement/Row Remap: GPU {index} had memory errors and row remappings are pending "
                + SYSTEM_TRIAGE,
            )
        )
    return {"status": "Fail" if warnings else "Pass", "warnings": warnings, "info": []}


def test_memory(drv: nvemu.Driver, gpu: dict) -> dict:
    index = gpu["index"]
    if drv.gpu_effects(index)["dcgm_memory_fails"]:
        text = f"Found 1 faulty memory elements on GPU {index} Run a field diagnostic on the GPU."
        return {"status": "Fail", "warnings": [_warning(E_FAULTY_MEMORY, text)], "info": []}
    free = (gpu["memory_mib"] - gpu.get("reserved_mib", 0)) * 1024 * 1024
    return {"status": "Pass", "warnings": [], "info": [f"Allocated {int(free * 0.875)} bytes (87.5%)"]}


def test_pcie(drv: nvemu.Driver, gpu: dict) -> dict:
    index = gpu["index"]
    rate = link_gbps(*drv.pcie_current(gpu))
    rate *= drv.gpu_effects(index)["bandwidth_factor"]
    d2h, h2d, bidir = rate * HEALTHY_D2H, rate * HEALTHY_H2D, rate * HEALTHY_BIDIR
    minimum = link_gbps(gpu["max_pcie_gen"], gpu["max_pcie_width"]) * MIN_BANDWIDTH_FRACTION
    warnings = [
        _warning(
            E_LOW_BANDWIDTH,
            f"Bandwidth of GPU {index} in direction {direction} of {value:.2f} did not exceed minimum required "
            f"bandwidth of {minimum:.2f}. Verify that your minimum bandwidth setting is appropriate for the "
            "topology of each GPU. If so, and errors are consistent, please run a field diagnostic.",
        )
        for direction, value in (("d2h", d2h), ("h2d", h2d))
        if value < minimum
    ]
    info = [
        f"GPU to Host bandwidth:\t\t{d2h:.2f} GB/s",
        f"Host to GPU bandwidth:\t\t{h2d:.2f} GB/s",
        f"bidirectional bandwidth:\t{bidir:.2f} GB/s",
        "GPU to Host latency:\t\t1.563 us",
        "Host to GPU latency:\t\t1.740 us",
        "bidirectional latency:\t\t3.078 us",
    ]
    return {"status": "Fail" if warnings else "Pass", "warnings": warnings, "info": info}


def test_diagnostic(drv: nvemu.Driver, gpu: dict) -> dict:
    flops = gpu.get("sm_count", 100) * 390  # rough FP64-ish figure; only its presence matters
    return {
        "status": "Pass",
        "warnings": [],
        "info": [f"GPU {gpu['index']} calculated at approximately {flops:.2f} gigaflops during this test"],
    }


def test_plain(drv: nvemu.Driver, gpu: dict) -> dict:
    return {"status": "Pass", "warnings": [], "info": []}


TESTS = {
    "software": test_software,
    "memory": test_memory,
    "pcie": test_pcie,
    "diagnostic": test_diagnostic,
    "targeted_stress": test_plain,
    "targeted_power": test_plain,
    "memory_bandwidth": test_plain,
}


def run_tests(drv: nvemu.Driver, gpus: list[dict], names: tuple[str, ...]) -> list[tuple[str, list[tuple]]]:
    """[(category, [(test name, [(gpu, result)], summary)])] in DCGM's category order."""
    by_category: dict[str, list[tuple]] = {}
    for name in names:
        results = [(gpu, TESTS[name](drv, gpu)) for gpu in gpus]
        worst = max((r["status"] for _g, r in results), key=_RANK.__getitem__)
        summary: dict = {"status": worst}
        if worst in ("Fail", "Warn"):
            summary["warnings"] = [w for _g, r in results for w in r["warnings"]]
        by_category.setdefault(CATEGORY[name], []).append((name, results, summary))
    return [(c, by_category[c]) for c in CATEGORY_ORDER if c in by_category]


# ---- output -----------------------------------------------------------------------------------------
def styled_json(value: object, depth: int = 0) -> str:
    """jsoncpp's styled layout as DCGM 4 prints it: tabs, sorted keys, compound values on their own lines."""
    tabs = "\t" * depth
    inner = "\t" * (depth + 1)
    if isinstance(value, dict):
        items = sorted(value.items())
        lines = []
        for i, (key, item) in enumerate(items):
            comma = "," if i < len(items) - 1 else ""
            if isinstance(item, (dict, list)):
                lines.append(f"{inner}{json.dumps(key)} : \n{inner}{styled_json(item, depth + 1)}{comma}")
            else:
                lines.append(f"{inner}{json.dumps(key)} : {json.dumps(item)}{comma}")
        return "{\n" + "\n".join(lines) + f"\n{tabs}}}"
    if isinstance(value, list):
        lines = [
            f"{inner}{styled_json(item, depth + 1)}{',' if i < len(value) - 1 else ''}"
            for i, item in enumerate(value)
        ]
        return "[\n" + "\n".join(lines) + f"\n{tabs}]"
    return json.dumps(value)


def render_json(drv: nvemu.Driver, gpus: list[dict], categories: list) -> str:
    test_categories = []
    for category, tests in categories:
        entries = []
        for name, results, summary in tests:
            rows = []
            for gpu, result in results:
                row = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu["index"]}
                row["status"] = result["status"]
                if result["info"]:
                    row["info"] = list(result["info"])
                if result["warnings"]:
                    row["warnings"] = list(result["warnings"])
                rows.append(row)
            entries.append({"name": name, "results": rows, "test_summary": summary})
        test_categories.append({"category": category, "tests": entries})
    doc = {
        "DCGM Diagnostic": {"test_categories": test_categories},
        "entity_groups": [
            {
                "entities": [
                    {
                        "device_id": gpu["pci_device_id"][:4].lower(),
                        "entity_id": gpu["index"],
                        "serial_num": gpu.get("serial", "<<<NOT_SUPPORTED>>>"),
                    }
                    for gpu in gpus
                ],
                "entity_group": "GPU",
                "entity_group_id": 1,
            }
        ],
        "metadata": {"Driver Version Detected": drv.version, "version": DCGM_VERSION},
    }
    return styled_json(doc) + "\n"


LEFT, RIGHT, WRAP = 27, 48, 45
RULE = "+" + "-" * LEFT + "+" + "-" * RIGHT + "+"


def _row(left: str, right: str) -> str:
    return "|" + (" " + left).ljust(LEFT) + "|" + (" " + right).ljust(RIGHT) + "|"


def _section(name: str, first: bool) -> str:
    label = f"-----  {name}  ".ljust(LEFT, "-")
    return f"|{label}+{'-' * RIGHT}|" if first else f"+{label}+{'-' * RIGHT}+"


def _wrapped(label: str, text: str) -> list[str]:
    chunks = [text[i : i + WRAP] for i in range(0, len(text), WRAP)] or [""]
    return [_row(label if i == 0 else "", chunk) for i, chunk in enumerate(chunks)]


def render_table(drv: nvemu.Driver, gpus: list[dict], categories: list, verbose: bool) -> str:
    ids = ", ".join(gpu["pci_device_id"][:4].lower() for gpu in gpus)
    lines = [
        "Successfully ran diagnostic for group.",
        RULE,
        _row("Diagnostic", "Result"),
        "+" + "=" * LEFT + "+" + "=" * RIGHT + "+",
        _section("Metadata", True),
        _row("DCGM Version", DCGM_VERSION),
        _row("Driver Version Detected", drv.version),
        *_wrapped("GPU Device IDs Detected", ids),
    ]
    for c_index, (category, tests) in enumerate(categories):
        lines.append(_section(category, c_index == 0))
        for name, results, summary in tests:
            lines.append(_row(name, summary["status"]))
            for _gpu, result in results:
                for warning in result["warnings"]:
                    lines += _wrapped("Warning", warning["warning"])
                if verbose:
                    for info in result["info"]:
                        lines += _wrapped("Info", info.replace("\t", " "))
            lines += [_row("", f"GPU{gpu['index']}: {result['status']}") for gpu, result in results]
    lines.append(RULE)
    return "\n".join(lines) + "\n"


# ---- command line -----------------------------------------------------------------------------------
def _take(args: list[str], i: int, opt: str) -> str:
    if i + 1 >= len(args):
        raise UsageError(f"Missing a value for argument: {opt}")
    return args[i + 1]


def _tests_for(run: str) -> tuple[str, ...]:
    run = run.strip().lower()
    if run.isdigit():
        level = int(run)
        if level not in LEVEL_TESTS:
            raise UsageError(f"Invalid run level {run}: this emulator runs levels 1-3")
        return LEVEL_TESTS[level]
    if run in LEVEL_ALIASES:
        return LEVEL_TESTS[LEVEL_ALIASES[run]]
    names = [n.strip().replace(" ", "_") for n in run.split(",") if n.strip()]
    unknown = [n for n in names if n not in TESTS or n == "software"]
    if unknown or not names:
        raise UsageError(f"Requested test(s) not found: {', '.join(unknown) or run}")
    return tuple(names)


def _gpu_ids(value: str) -> str:
    """DCGM entity lists ('0,1', 'gpu:0,gpu:1') to the id list nvemu.select takes."""
    ids = []
    for token in value.split(","):
        token = token.strip()
        if token.lower().startswith("gpu:"):
            token = token[4:]
        if token:
            ids.append(token)
    if not ids:
        raise UsageError(f"Invalid entity list '{value}'")
    return ",".join(ids)


def cmd_diag(args: list[str]) -> int:
    run: str | None = None
    as_json = verbose = False
    ids: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-r", "--run"):
            run = _take(args, i, arg)
            i += 1
        elif arg in ("-i", "--entity-id", "--gpuList"):
            ids = _gpu_ids(_take(args, i, arg))
            i += 1
        elif arg in ("-j", "--json"):
            as_json = True
        elif arg in ("-v", "--verbose"):
            verbose = True
        elif arg in ("-p", "--parameters", "-c", "--configfile", "--host", "--iterations", "--timeout"):
            _take(args, i, arg)  # accepted; the emulated tests take no parameters
            i += 1
        else:
            raise UsageError(f"Couldn't find match for argument: {arg}")
        i += 1
    if run is None:
        raise UsageError("Required argument missing: run")
    names = _tests_for(run)
    try:
        drv = nvemu.Driver()
    except nvemu.NvmlError:
        _out(CONNECT_ERROR)
        return EXIT_CONNECTION
    try:
        try:
            drv.check_loaded()
        except nvemu.NvmlError:
            # nv-hostengine cannot initialise NVML, so it is not running for dcgmi to reach.
            _out(CONNECT_ERROR)
            return EXIT_CONNECTION
        if not hostengine_up():
            _out(CONNECT_ERROR)
            return EXIT_CONNECTION
        try:
            chosen = nvemu.select(drv, ids)
        except LookupError as e:
            _out(f"Error: Invalid entity id '{e.args[0]}'. Use 'dcgmi discovery -l' to list GPUs.\n")
            return EXIT_BADPARAM
        gpus = [g for g in chosen if not drv.off_bus(g["index"])]
        if not gpus:
            entities = ",".join(str(g["index"]) for g in chosen)
            _out(
                f"Error: Unable to complete diagnostic for entities {entities}. Return: (-18) : GPU is lost\n"
            )
            return EXIT_GPU_LOST
        categories = run_tests(drv, gpus, names)
        _out(render_json(drv, gpus, categories) if as_json else render_table(drv, gpus, categories, verbose))
        failed = any(s["status"] == "Fail" for _c, tests in categories for _n, _r, s in tests)
        return EXIT_NVVS_ERROR if failed else EXIT_OK
    finally:
        drv.close()


def main(argv: list[str]) -> int:
    try:
        if argv[:1] in (["--version"], ["-v"]) and len(argv) == 1:
            _out(f"\ndcgmi  version: {DCGM_VERSION}\n\n")
            return EXIT_OK
        if argv[:1] == ["diag"]:
            return cmd_diag(argv[1:])
        raise UsageError(
            "this emulated dcgmi supports 'dcgmi diag -r <level> [-j] [-i <gpus>]' and 'dcgmi --version'"
        )
    except UsageError as e:
        sys.stderr.write(f"Error: {e}\n")
        return EXIT_BADPARAM


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
