"""One GPU's `nvidia-smi -q` record as a tree, rendered both as XML (`-q -x`) and as text (`-q`).

Stdlib only (installed into lab hosts). Real nvidia-smi prints the same record two ways; building it
once keeps the XML element paths and the text labels in step. Element order and names follow real
captures: DTD v13 (drivers 580 and later) and v12 (570/575).

A node is (tag, label, value[, where]): value is a string or a list of nodes; where is "x" for
XML-only, "t" for text-only nodes (the two formats differ in a few places, e.g. retired pages).
"""

from __future__ import annotations

import time

import nvemu

NA = "N/A"


def escape(text: str) -> str:
    """XML character data escaping (xml.sax.saxutils would pull in urllib and cost 30 ms per call)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoteattr(text: str) -> str:
    return '"' + escape(text).replace('"', "&quot;") + '"'


DEPRECATED = "Requested functionality has been deprecated"
LABEL_WIDTH = 55


def _yn(flag: bool) -> str:
    return "Yes" if flag else "No"


def _en(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


class GpuView:
    """What one GPU reports right now: hardware file + driver state + faults."""

    def __init__(self, drv: nvemu.Driver, gpu: dict):
        self.drv = drv
        self.gpu = gpu
        self.state = drv.gpu_state(gpu)
        self.effects = drv.gpu_effects(gpu["index"])
        self.mig_current = bool(self.state["mig_current"]) and gpu.get("mig_capable", False)
        self.mig_pending = bool(self.state["mig_pending"]) and gpu.get("mig_capable", False)

    # ---- values shared by every output format ---------------------------------------------
    @property
    def bus_id(self) -> str:
        return self.gpu["pci_bus_id"]

    def mig_mode(self) -> tuple[str, str]:
        if not self.gpu.get("mig_capable"):
            return NA, NA
        return _en(self.mig_current), _en(self.mig_pending)

    def mig_devices(self) -> list[dict]:
        """MIG devices (one per compute instance), ordered as nvidia-smi numbers them (nvemu.mig_devices)."""
        return nvemu.mig_devices(self.gpu, self.state) if self.mig_current else []

    def memory(self) -> tuple[int, int, int, int]:
        total = self.gpu["memory_mib"]
        reserved = self.gpu.get("reserved_mib", 0)
        used = 0 if not self.mig_current else 12 * len(self.mig_devices())
        return total, reserved, used, total - reserved - used

    def ecc_uncorrected(self) -> int:
        return self.effects["ecc_uncorrected"]

    def pcie_current(self) -> tuple[int, int]:
        return self.drv.pcie_current(self.gpu)

    def retired(self) -> tuple[int, int, bool]:
        """single-bit count, double-bit count, pending (nvemu.retired_pages)."""
        return nvemu.retired_pages(self.effects)

    def remapped(self) -> tuple[int, int, bool]:
        """correctable, uncorrectable, pending (nvemu.remapped_rows)."""
        return nvemu.remapped_rows(self.gpu, self.effects)

    def fabric(self) -> tuple[str, str]:
        if not self.drv.hw.get("system", {}).get("nvswitch"):
            return NA, NA
        # The GPUs join the NVSwitch fabric only once Fabric Manager has configured it.
        if self.drv.host_effects()["fabric_failed"] or not nvemu.fabricmanager_running():
            return "In Progress", NA
        return "Completed", "Success"

    def power_draw(self) -> float:
        return float(self.gpu.get("power_idle_w", 60.0))

    def temperature(self) -> int:
        return int(self.gpu.get("temperature_c", 34))

    def perf_state(self) -> str:
        return "P0"

    def clocks_idle(self) -> bool:
        return True

    def persistence(self) -> bool:
        return self.drv.persistence(self.gpu)

    def compute_mode(self) -> str:
        return self.drv.compute_mode(self.gpu)


def gpu_nodes(view: GpuView, v13: bool) -> list:
    g = view.gpu
    # a VM's GPU: the host's PCIe generation is not visible through the passed-through function
    passthrough = view.drv.hw.get("system", {}).get("virtualization") == "Pass-Through"
    # R590 and later deprecate the applications clocks and add the EDPp line (590.48, 595.80 and 610.43 captures;
    # 580.159.04 on a lent H200 still prints the clocks and no EDPp line)
    r590 = int(view.drv.version.split(".")[0]) >= 590
    c = g.get("clocks", {})
    mig_cur, mig_pend = view.mig_mode()
    total, reserved, used, free = view.memory()
    ecc = g.get("ecc_supported", True)
    unc = view.ecc_uncorrected()
    cur_gen, cur_width = view.pcie_current()
    sbe, dbe, ret_pending = view.retired()
    r_corr, r_unc, r_pending = view.remapped()
    fab_state, fab_status = view.fabric()
    bus, dev = g["pci_bus_id"][9:11], g["pci_bus_id"][12:14]
    ecc_val = (lambda n: str(n)) if ecc else (lambda n: NA)
    draw = f"{view.power_draw():.2f} W"
    limit = f"{g['power_limit_w']:.2f} W"
    temp = view.temperature()
    mem_temp = g.get("memory_temperature_c")

    devices = view.mig_devices()
    mig_list = [("mig_device", "MIG Device", _mig_device_nodes(d, g)) for d in devices]
    mig_nodes: list | str = mig_list or "None"

    if not view.mig_current and g.get("page_retirement"):
        retired_x = [
            (
                "multiple_single_bit_retirement",
                "",
                [("retired_count", "", str(sbe)), ("retired_pagelist", "", "")],
            ),
            ("double_bit_retirement", "", [("retired_count", "", str(dbe)), ("retired_pagelist", "", "")]),
            ("pending_blacklist", "", _yn(ret_pending)),
            ("pending_retirement", "", _yn(ret_pending)),
        ]
        retired_t = [
            ("", "Single Bit ECC", str(sbe)),
            ("", "Double Bit ECC", str(dbe)),
            ("", "Pending Page Blacklist", _yn(ret_pending)),
        ]
    else:
        retired_x = [
            ("multiple_single_bit_retirement", "", [("retired_count", "", NA), ("retired_pagelist", "", NA)]),
            ("double_bit_retirement", "", [("retired_count", "", NA), ("retired_pagelist", "", NA)]),
            ("pending_blacklist", "", NA),
            ("pending_retirement", "", NA),
        ]
        retired_t = [
            ("", "Single Bit ECC", NA),
            ("", "Double Bit ECC", NA),
            ("", "Pending Page Blacklist", NA),
        ]
    retired = [(t, lab, v, "x") for t, lab, v in retired_x] + [(t, lab, v, "t") for t, lab, v in retired_t]

    def inactive(label: str) -> tuple[str, str, str]:
        """The inactive remapped-row counters: every report has them in XML; the text report shows them on the
        boards whose captures do (H200, L40S), not on the H100's (590.48)."""
        return (label, "0", "") if g.get("inactive_remap_rows_text") else ("", "0", "x")

    remapped: list | str
    if view.mig_current or not g.get("row_remapping"):
        remapped = NA
    else:
        hist_max = g.get("row_remap_banks", 2560)
        remapped = [
            ("remapped_row_corr", "Correctable Error", str(r_corr)),
            ("remapped_row_corr_inactive", *inactive("Inactive Correctable Error")),
            ("remapped_row_unc", "Uncorrectable Error", str(r_unc)),
            ("remapped_row_unc_inactive", *inactive("Inactive Uncorrectable Error")),
            ("remapped_row_pending", "Pending", _yn(r_pending)),
            ("remapped_row_failure", "Remapping Failure Occurred", "No"),
            (
                "row_remapper_histogram",
                "Bank Remap Availability Histogram",
                [
                    ("row_remapper_histogram_max", "Max", f"{hist_max - r_unc} bank(s)"),
                    ("row_remapper_histogram_high", "High", f"{r_unc} bank(s)"),
                    ("row_remapper_histogram_partial", "Partial", "0 bank(s)"),
                    ("row_remapper_histogram_low", "Low", "0 bank(s)"),
                    ("row_remapper_histogram_none", "None", "0 bank(s)"),
                ],
            ),
        ]

    if v13:
        temperature = [
            ("gpu_temp", "GPU Current Temp", f"{temp} C"),
            ("gpu_temp_tlimit", "GPU T.Limit Temp", f"{g.get('tlimit_c', 87) - temp} C"),
            ("gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", "-8 C"),
            ("gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", "-2 C"),
            ("gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp", "0 C"),
            ("gpu_target_temperature", "GPU Target Temperature", NA),
            ("memory_temp", "Memory Current Temp", f"{mem_temp} C" if mem_temp else NA),
            (
                "gpu_temp_max_mem_tlimit_threshold",
                "Memory Max Operating T.Limit Temp",
                "0 C" if mem_temp else NA,
            ),
        ]
    else:
        temperature = [
            ("gpu_temp", "GPU Current Temp", f"{temp} C"),
            ("gpu_temp_tlimit", "GPU T.Limit Temp", f"{g.get('tlimit_c', 87) - temp} C"),
            ("gpu_temp_max_threshold", "GPU Shutdown Temp", f"{g.get('shutdown_c', 92)} C"),
            ("gpu_temp_slow_threshold", "GPU Slowdown Temp", f"{g.get('slowdown_c', 89)} C"),
            ("gpu_temp_max_gpu_threshold", "GPU Max Operating Temp", f"{g.get('max_operating_c', 85)} C"),
            ("gpu_target_temperature", "GPU Target Temperature", NA),
            ("memory_temp", "Memory Current Temp", f"{mem_temp} C" if mem_temp else NA),
            ("gpu_temp_max_mem_threshold", "Memory Max Operating Temp", "95 C" if mem_temp else NA),
        ]

    fabric = [
        ("state", "State", fab_state),
        ("status", "Status", fab_status),
        ("cliqueId", "CliqueId", "0" if fab_state != NA else NA),
        ("clusterUuid", "ClusterUUID", "00000000-0000-0000-0000-000000000000" if fab_state != NA else NA),
        (
            "health",
            "Health",
            ([("summary", "Summary", NA)] if v13 else [])
            + [
                ("bandwidth", "Bandwidth", NA),
                ("route_recovery_in_progress", "Route Recovery in progress", NA),
                ("route_unhealthy", "Route Unhealthy", NA),
                ("access_timeout_recovery", "Access Timeout Recovery", NA),
            ]
            + ([("incorrect_configuration", "Incorrect Configuration", NA)] if v13 else [])
            + ([("partition_assigned", "Partition Assigned", NA)] if v13 else []),
        ),
    ]

    ecc_errors: list = [
        (
            "volatile",
            "Volatile",
            [
                ("sram_correctable", "SRAM Correctable", ecc_val(0)),
                ("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", ecc_val(0)),
                ("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", ecc_val(0)),
                ("dram_correctable", "DRAM Correctable", ecc_val(0)),
                ("dram_uncorrectable", "DRAM Uncorrectable", ecc_val(unc)),
            ],
        ),
        (
            "aggregate",
            "Aggregate",
            [
                ("sram_correctable", "SRAM Correctable", ecc_val(0)),
                ("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", ecc_val(0)),
                ("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", ecc_val(0)),
                ("dram_correctable", "DRAM Correctable", ecc_val(0)),
                ("dram_uncorrectable", "DRAM Uncorrectable", ecc_val(unc)),
                ("sram_threshold_exceeded", "SRAM Threshold Exceeded", "No" if ecc else NA),
            ],
        ),
        (
            "aggregate_uncorrectable_sram_sources",
            "Aggregate Uncorrectable SRAM Sources",
            [
                ("sram_l2", "SRAM L2", ecc_val(0)),
                ("sram_sm", "SRAM SM", ecc_val(0)),
                ("sram_microcontroller", "SRAM Microcontroller", ecc_val(0)),
                ("sram_pcie", "SRAM PCIE", ecc_val(0)),
                ("sram_other", "SRAM Other", ecc_val(0)),
            ],
        ),
    ]
    if v13:
        ecc_errors += [
            ("channel_repair_pending", "Channel Repair Pending", "No"),
            ("tpc_repair_pending", "TPC Repair Pending", "No"),
            ("unrepairable_memory", "Unrepairable Memory", "No" if ecc else NA),
        ]

    reasons = [
        ("clocks_event_reason_gpu_idle", "Idle", _active(view.clocks_idle())),
        ("clocks_event_reason_applications_clocks_setting", "Applications Clocks Setting", _active(False)),
        ("clocks_event_reason_sw_power_cap", "SW Power Cap", _active(False)),
        ("clocks_event_reason_hw_slowdown", "HW Slowdown", _active(False)),
        ("clocks_event_reason_hw_thermal_slowdown", "    HW Thermal Slowdown", _active(False)),
        ("clocks_event_reason_hw_power_brake_slowdown", "    HW Power Brake Slowdown", _active(False)),
        ("clocks_event_reason_sync_boost", "Sync Boost", _active(False)),
        ("clocks_event_reason_sw_thermal_slowdown", "SW Thermal Slowdown", _active(False)),
        ("clocks_event_reason_display_clocks_setting", "Display Clock Setting", _active(False)),
    ]

    nodes: list = [
        ("product_name", "Product Name", g["name"]),
        ("product_brand", "Product Brand", g.get("brand", "NVIDIA")),
        ("product_architecture", "Product Architecture", g.get("architecture", NA)),
        ("display_mode", "Display Mode", DEPRECATED if v13 else "Disabled"),
    ]
    if v13:
        nodes.append(("display_attached", "Display Attached", "No"))
    nodes += [
        ("display_active", "Display Active", "Disabled"),
        ("persistence_mode", "Persistence Mode", _en(view.persistence())),
        ("addressing_mode", "Addressing Mode", "None"),
        ("mig_mode", "MIG Mode", [("current_mig", "Current", mig_cur), ("pending_mig", "Pending", mig_pend)]),
        ("mig_devices", "", mig_nodes, "x"),
    ]
    if devices:
        nodes += [(t, lab, v, "t") for t, lab, v in mig_list]
    nodes += [
        ("accounting_mode", "Accounting Mode", "Disabled"),
        ("accounting_mode_buffer_size", "Accounting Mode Buffer Size", "4000"),
        ("driver_model", "Driver Model", [("current_dm", "Current", NA), ("pending_dm", "Pending", NA)]),
        ("serial", "Serial Number", g["serial"]),
        ("uuid", "GPU UUID", g["uuid"]),
    ]
    if v13:
        nodes.append(("pdi", "GPU PDI", "0x" + nvemu.short_hash(g["uuid"])))
    nodes += [
        ("minor_number", "Minor Number", str(g.get("minor_number", g["index"]))),
        ("vbios_version", "VBIOS Version", g.get("vbios_version", NA)),
        ("multigpu_board", "MultiGPU Board", "No"),
        ("board_id", "Board ID", hex(int(g["pci_bus_id"][9:11], 16) << 8)),
        ("board_part_number", "Board Part Number", g.get("board_part_number", NA)),
        ("gpu_part_number", "GPU Part Number", g.get("gpu_part_number", NA)),
        ("gpu_fru_part_number", "FRU Part Number", NA),
        (
            "platformInfo",
            "Platform Info",
            [
                ("chassis_serial_number", "Chassis Serial Number", NA),
                ("slot_number", "Slot Number", NA),
                ("tray_index", "Tray Index", NA),
                ("host_id", "Host ID", NA),
                ("peer_type", "Peer Type", NA),
                ("module_id", "Module Id", str(g.get("module_id", g["index"] + 1))),
                ("gpu_fabric_guid", "GPU Fabric GUID", NA),
            ],
        ),
        (
            "inforom_version",
            "Inforom Version",
            [
                ("img_version", "Image Version", g.get("inforom_image", NA)),
                ("oem_object", "OEM Object", "2.1"),
                ("ecc_object", "ECC Object", "7.16" if ecc else NA),
                ("pwr_object", "Power Management Object", NA),
            ],
        ),
    ]
    # present in the v12 (570) and v13 captures alike
    nodes.append(
        (
            "inforom_bbx_flush",
            "Inforom BBX Object Flush",
            [("latest_timestamp", "Latest Timestamp", NA), ("latest_duration", "Latest Duration", NA)],
        )
    )
    nodes += [
        (
            "gpu_operation_mode",
            "GPU Operation Mode",
            [("current_gom", "Current", NA), ("pending_gom", "Pending", NA)],
        ),
        ("c2c_mode", "GPU C2C Mode", "Disabled" if v13 else NA),
        (
            "gpu_virtualization_mode",
            "GPU Virtualization Mode",
            [
                ("virtualization_mode", "Virtualization Mode", "Pass-Through" if passthrough else "None"),
                ("host_vgpu_mode", "Host VGPU Mode", NA),
                ("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode", NA),
            ],
        ),
    ]
    if not v13:
        nodes.append(
            (
                "gpu_reset_status",
                "GPU Reset Status",
                [
                    ("reset_required", "Reset Required", "Yes" if r_pending else "No"),
                    (
                        "drain_and_reset_recommended",
                        "Drain and Reset Recommended",
                        "Yes" if r_pending else "No",
                    ),
                ],
            )
        )
    nodes += [
        ("gpu_recovery_action", "GPU Recovery Action", "Reset" if r_pending else "None"),
        ("gsp_firmware_version", "GSP Firmware Version", view.drv.version),
        ("ibmnpu", "IBMNPU", [("relaxed_ordering_mode", "Relaxed Ordering Mode", NA)]),
        (
            "pci",
            "PCI",
            [
                ("pci_bus", "Bus", bus, "x"),
                ("", "Bus", "0x" + bus, "t"),
                ("pci_device", "Device", dev, "x"),
                ("", "Device", "0x" + dev, "t"),
                ("pci_domain", "Domain", "0000", "x"),
                ("", "Domain", "0x0000", "t"),
                ("pci_base_class", "Base Classcode", "3", "x"),
                ("", "Base Classcode", "0x3", "t"),
                ("pci_sub_class", "Sub Classcode", "2", "x"),
                ("", "Sub Classcode", "0x2", "t"),
                ("pci_device_id", "Device Id", g["pci_device_id"], "x"),
                ("", "Device Id", "0x" + g["pci_device_id"], "t"),
                ("pci_bus_id", "Bus Id", g["pci_bus_id"]),
                ("pci_sub_system_id", "Sub System Id", g.get("pci_sub_system_id", "000010DE"), "x"),
                ("", "Sub System Id", "0x" + g.get("pci_sub_system_id", "000010DE"), "t"),
                (
                    "pci_gpu_link_info",
                    "GPU Link Info",
                    [
                        (
                            "pcie_gen",
                            "PCIe Generation",
                            [
                                ("max_link_gen", "Max", str(g["max_pcie_gen"])),
                                ("current_link_gen", "Current", str(cur_gen)),
                                ("device_current_link_gen", "Device Current", str(cur_gen)),
                                ("max_device_link_gen", "Device Max", str(g["max_pcie_gen"])),
                                (
                                    "max_host_link_gen",
                                    "Host Max",
                                    NA if passthrough else str(g["max_pcie_gen"]),
                                ),
                            ],
                        ),
                        (
                            "link_widths",
                            "Link Width",
                            [
                                ("max_link_width", "Max", f"{g['max_pcie_width']}x"),
                                ("current_link_width", "Current", f"{cur_width}x"),
                            ],
                        ),
                    ],
                ),
                (
                    "pci_bridge_chip",
                    "Bridge Chip",
                    [("bridge_chip_type", "Type", NA), ("bridge_chip_fw", "Firmware", NA)],
                ),
                ("replay_counter", "Replays Since Reset", "0"),
                ("replay_rollover_counter", "Replay Number Rollovers", "0"),
                ("tx_util", "Tx Throughput", "0 KB/s"),
                ("rx_util", "Rx Throughput", "0 KB/s"),
                ("atomic_caps_outbound", "Atomic Caps Outbound", NA),
                ("atomic_caps_inbound", "Atomic Caps Inbound", NA),
            ],
        ),
        ("fan_speed", "Fan Speed", NA),
        ("performance_state", "Performance State", view.perf_state()),
        ("clocks_event_reasons", "Clocks Event Reasons", reasons),
    ]
    if v13:
        nodes.append(
            (
                "clocks_event_reasons_counters",
                "Clocks Event Reasons Counters",
                [
                    ("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", "0 us"),
                    ("clocks_event_reasons_counters_sync_boost", "Sync Boost", "0 us"),
                    ("clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown", "0 us"),
                    ("clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown", "0 us"),
                    ("clocks_event_reasons_counters_hw_power_brake", "HW Power Braking", "0 us"),
                ],
            )
        )
    bar1 = g.get("bar1_mib", 131072)
    nodes += [
        ("sparse_operation_mode", "Sparse Operation Mode", "Disabled"),
        (
            "fb_memory_usage",
            "FB Memory Usage",
            [
                ("total", "Total", f"{total} MiB"),
                ("reserved", "Reserved", f"{reserved} MiB"),
                ("used", "Used", f"{used} MiB"),
                ("free", "Free", f"{free} MiB"),
            ],
        ),
        (
            "bar1_memory_usage",
            "BAR1 Memory Usage",
            [
                ("total", "Total", f"{bar1} MiB"),
                ("used", "Used", "1 MiB"),
                ("free", "Free", f"{bar1 - 1} MiB"),
            ],
        ),
        (
            "cc_protected_memory_usage",
            "Conf Compute Protected Memory Usage",
            [("total", "Total", "0 MiB"), ("used", "Used", "0 MiB"), ("free", "Free", "0 MiB")],
        ),
        ("compute_mode", "Compute Mode", view.compute_mode()),
        (
            "utilization",
            "Utilization",
            [
                ("gpu_util", "GPU", NA if view.mig_current else "0 %"),
                ("memory_util", "Memory", NA if view.mig_current else "0 %"),
                ("encoder_util", "Encoder", NA if view.mig_current else "0 %"),
                ("decoder_util", "Decoder", NA if view.mig_current else "0 %"),
                ("jpeg_util", "JPEG", NA if view.mig_current else "0 %"),
                ("ofa_util", "OFA", NA if view.mig_current else "0 %"),
            ],
        ),
        (
            "encoder_stats",
            "Encoder Stats",
            [
                ("session_count", "Active Sessions", "0"),
                ("average_fps", "Average FPS", "0"),
                ("average_latency", "Average Latency", "0"),
            ],
        ),
        (
            "fbc_stats",
            "FBC Stats",
            [
                ("session_count", "Active Sessions", "0"),
                ("average_fps", "Average FPS", "0"),
                ("average_latency", "Average Latency", "0"),
            ],
        ),
        (
            "dram_encryption_mode",
            "DRAM Encryption Mode",
            [("current_dram_encryption", "Current", NA), ("pending_dram_encryption", "Pending", NA)],
        ),
        (
            "ecc_mode",
            "ECC Mode",
            [
                ("current_ecc", "Current", _en(True) if ecc else NA),
                ("pending_ecc", "Pending", _en(True) if ecc else NA),
            ],
        ),
        ("ecc_errors", "ECC Errors", ecc_errors),
        ("retired_pages", "Retired Pages", retired),
        ("remapped_rows", "Remapped Rows", remapped),
        ("temperature", "Temperature", temperature),
        (
            "supported_gpu_target_temp",
            "Supported GPU Target Temp",
            [
                ("gpu_target_temp_min", "GPU Target Temp Min", NA),
                ("gpu_target_temp_max", "GPU Target Temp Max", NA),
            ],
            "x",  # XML only: no datacenter capture's text report has it
        ),
        (
            "gpu_power_readings",
            "GPU Power Readings",
            [
                ("power_state", "Power State", view.perf_state(), "x"),
                ("average_power_draw", "Average Power Draw", draw),
                ("instant_power_draw", "Instantaneous Power Draw", draw),
                ("current_power_limit", "Current Power Limit", limit),
                ("requested_power_limit", "Requested Power Limit", limit),
                ("default_power_limit", "Default Power Limit", limit),
                ("min_power_limit", "Min Power Limit", f"{g.get('min_power_limit_w', 100):.2f} W"),
                ("max_power_limit", "Max Power Limit", limit),
            ],
        ),
        (
            "gpu_memory_power_readings",
            "GPU Memory Power Readings ",
            [
                ("average_power_draw", "Average Power Draw", NA),
                ("instant_power_draw", "Instantaneous Power Draw", NA),
            ],
        ),
        (
            "module_power_readings",
            "Module Power Readings",
            [
                ("power_state", "Power State", view.perf_state(), "x"),
                ("average_power_draw", "Average Power Draw", NA),
                ("instant_power_draw", "Instantaneous Power Draw", NA),
                ("current_power_limit", "Current Power Limit", NA),
                ("requested_power_limit", "Requested Power Limit", NA),
                ("default_power_limit", "Default Power Limit", NA),
                ("min_power_limit", "Min Power Limit", NA),
                ("max_power_limit", "Max Power Limit", NA),
            ],
        ),
        ("power_smoothing", "Power Smoothing", NA),
        (
            "power_profiles",
            "Workload Power Profiles",
            [
                ("power_profile_requested_profiles", "Requested Profiles", NA),
                ("power_profile_enforced_profiles", "Enforced Profiles", NA),
            ],
        ),
    ]
    if r590:
        nodes.append(("edpp_multiplier", "EDPp Multiplier", NA))
    app_clocks = (
        [("graphics_clock", "Graphics", DEPRECATED), ("mem_clock", "Memory", DEPRECATED)]
        if r590
        else [
            ("graphics_clock", "Graphics", f"{c.get('max_graphics', 1980)} MHz"),
            ("mem_clock", "Memory", f"{c.get('memory', 2619)} MHz"),
        ]
    )
    nodes += [
        (
            "clocks",
            "Clocks",
            [
                ("graphics_clock", "Graphics", f"{c.get('graphics_idle', 345)} MHz"),
                ("sm_clock", "SM", f"{c.get('graphics_idle', 345)} MHz"),
                ("mem_clock", "Memory", f"{c.get('memory', 2619)} MHz"),
                ("video_clock", "Video", f"{c.get('video_idle', 765)} MHz"),
            ],
        ),
        ("applications_clocks", "Applications Clocks", app_clocks),
        ("default_applications_clocks", "Default Applications Clocks", app_clocks),
        ("deferred_clocks", "Deferred Clocks", [("mem_clock", "Memory", NA)]),
        (
            "max_clocks",
            "Max Clocks",
            [
                ("graphics_clock", "Graphics", f"{c.get('max_graphics', 1980)} MHz"),
                ("sm_clock", "SM", f"{c.get('max_graphics', 1980)} MHz"),
                ("mem_clock", "Memory", f"{c.get('memory', 2619)} MHz"),
                ("video_clock", "Video", f"{c.get('max_video', 1545)} MHz"),
            ],
        ),
        (
            "max_customer_boost_clocks",
            "Max Customer Boost Clocks",
            [("graphics_clock", "Graphics", f"{c.get('max_graphics', 1980)} MHz")],
        ),
        (
            "clock_policy",
            "Clock Policy",
            [("auto_boost", "Auto Boost", NA), ("auto_boost_default", "Auto Boost Default", NA)],
        ),
    ]
    if not v13:
        nodes.append(("voltage", "Voltage", [("graphics_volt", "Graphics", NA)]))
    nodes += [
        ("fabric", "Fabric", fabric),
        ("processes", "Processes", "", "x"),
        ("", "Processes", "None", "t"),
        ("accounted_processes", "", "", "x"),
        ("capabilities", "Capabilities", [("egm", "EGM", "disabled")]),
    ]
    return nodes


def _mig_device_nodes(d: dict, g: dict) -> list:
    p = d["profile"]
    mem = p["memory_mib"]
    bar1 = int(g.get("bar1_mib", 131072) * p["memory_slices"] / max(g.get("mig_memory_slices", 8), 1))
    return [
        ("index", "Index", str(d["index"])),
        ("gpu_instance_id", "GPU Instance ID", str(d["gi"])),
        ("compute_instance_id", "Compute Instance ID", str(d["ci"])),
        (
            "device_attributes",
            "Device Attributes",
            [
                (
                    "shared",
                    "Shared",
                    [
                        ("multiprocessor_count", "Multiprocessor count", str(d["sm"])),
                        ("copy_engine_count", "Copy Engine count", str(p["copy_engines"])),
                        ("encoder_count", "Encoder count", str(p["encoders"])),
                        ("decoder_count", "Decoder count", str(p["decoders"])),
                        ("ofa_count", "OFA count", str(p["ofa"])),
                        ("jpg_count", "JPG count", str(p["jpeg"])),
                    ],
                )
            ],
        ),
        (
            "ecc_error_count",
            "ECC Errors",
            [("volatile_count", "Volatile", [("sram_uncorrectable", "SRAM Uncorrectable", "0")])],
        ),
        (
            "fb_memory_usage",
            "Shared FB Memory Usage",
            [
                ("total", "Total", f"{mem} MiB"),
                ("reserved", "Reserved", "0 MiB"),
                ("used", "Used", "12 MiB"),
                ("free", "Free", f"{mem - 12} MiB"),
            ],
        ),
        (
            "bar1_memory_usage",
            "Shared BAR1 Memory",
            [("total", "Total", f"{bar1} MiB"), ("used", "Used", "0 MiB"), ("free", "Free", f"{bar1} MiB")],
        ),
    ]


# ---- renderers ---------------------------------------------------------------------------------
def _xml_lines(nodes: list, depth: int, out: list[str]) -> None:
    pad = "\t" * depth
    for node in nodes:
        tag, _label, value = node[0], node[1], node[2]
        where = node[3] if len(node) > 3 else ""
        if where == "t" or not tag:
            continue
        if isinstance(value, list):
            out.append(f"{pad}<{tag}>")
            _xml_lines(value, depth + 1, out)
            out.append(f"{pad}</{tag}>")
        elif tag in ("processes", "accounted_processes"):
            out.append(f"{pad}<{tag}>")
            out.append(f"{pad}</{tag}>")
        elif tag == "mig_devices":
            out.append(f"{pad}<{tag}>")
            out.append(f"{pad}\t{escape(value)}")
            out.append(f"{pad}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>{escape(value)}</{tag}>")


def render_xml(drv: nvemu.Driver, views: list[GpuView], v13: bool) -> str:
    header = '<?xml version="1.0" ?>' if v13 else '<?xml version="1.0"?>'
    dtd = "nvsmi_device_v13.dtd" if v13 else "nvsmi_device_v12.dtd"
    out = [
        header,
        f'<!DOCTYPE nvidia_smi_log SYSTEM "{dtd}">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{time.asctime()}</timestamp>",
        f"\t<driver_version>{drv.version}</driver_version>",
        f"\t<cuda_version>{nvemu.cuda_version(drv.version)}</cuda_version>",
        f"\t<attached_gpus>{len(drv.hw['gpus'])}</attached_gpus>",
    ]
    for view in views:
        out.append(f"\t<gpu id={quoteattr(view.bus_id)}>")
        _xml_lines(gpu_nodes(view, v13), 2, out)
        out.append("\t</gpu>")
        out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def _text_lines(nodes: list, depth: int, out: list[str]) -> None:
    for node in nodes:
        _tag, label, value = node[0], node[1], node[2]
        where = node[3] if len(node) > 3 else ""
        if where == "x" or not label:
            continue
        indent = "    " * depth
        if label.startswith("    "):  # sub-reason lines are indented one more level in real output
            indent += "    "
            label = label.strip()
        if isinstance(value, list):
            out.append(f"{indent}{label}")
            _text_lines(value, depth + 1, out)
        else:
            out.append(f"{indent}{label}".ljust(LABEL_WIDTH) + f": {value}")


# -d groups of `nvidia-smi -q -d ...`, as top-level sections of the record.
DISPLAY_GROUPS = {
    "MEMORY": {"FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"},
    "UTILIZATION": {"Utilization"},
    "ECC": {"ECC Mode", "ECC Errors"},
    "TEMPERATURE": {"Temperature"},
    "POWER": {"GPU Power Readings", "GPU Memory Power Readings ", "Module Power Readings"},
    "CLOCK": {
        "Clocks",
        "Applications Clocks",
        "Default Applications Clocks",
        "Deferred Clocks",
        "Max Clocks",
        "Max Customer Boost Clocks",
        "Clock Policy",
    },
    "COMPUTE": {"Compute Mode"},
    "PIDS": {"Processes"},
    "PERFORMANCE": {
        "Performance State",
        "Clocks Event Reasons",
        "Clocks Event Reasons Counters",
        "Sparse Operation Mode",
    },
    "PAGE_RETIREMENT": {"Retired Pages"},
    "ROW_REMAPPER": {"Remapped Rows"},
    "ACCOUNTING": {"Accounting Mode", "Accounting Mode Buffer Size"},
    "ENCODER_STATS": {"Encoder Stats"},
    "FBC_STATS": {"FBC Stats"},
    "SUPPORTED_GPU_TARGET_TEMP": {"Supported GPU Target Temp"},
    "VOLTAGE": {"Voltage"},
    "RESET_STATUS": {"GPU Reset Status", "GPU Recovery Action"},
    "GSP_FIRMWARE_VERSION": {"GSP Firmware Version"},
    "POWER_SMOOTHING": {"Power Smoothing"},
    "POWER_PROFILES": {"Workload Power Profiles"},
}


def render_text(drv: nvemu.Driver, views: list[GpuView], v13: bool, groups: list[str] | None) -> str:
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        "Timestamp".ljust(LABEL_WIDTH) + f": {time.asctime()}",
        "Driver Version".ljust(LABEL_WIDTH) + f": {drv.version}",
        "CUDA Version".ljust(LABEL_WIDTH) + f": {nvemu.cuda_version(drv.version)}",
        "",
        "Attached GPUs".ljust(LABEL_WIDTH) + f": {len(drv.hw['gpus'])}",
    ]
    wanted: set[str] | None = None
    if groups:
        wanted = set()
        for group in groups:
            wanted |= DISPLAY_GROUPS[group]
    for view in views:
        out.append(f"GPU {view.bus_id}")
        nodes = gpu_nodes(view, v13)
        if wanted is not None:
            nodes = [n for n in nodes if n[1] in wanted]
        _text_lines(nodes, 1, out)
        out.append("")
    return "\n".join(out) + "\n"
