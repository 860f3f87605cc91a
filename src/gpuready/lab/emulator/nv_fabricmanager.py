"""Emulated `nv-fabricmanager`: NVIDIA Fabric Manager for NVSwitch systems.

Stdlib only (installed into lab hosts). Forks like the real one (its unit is Type=forking) and writes its log
in the real format (``[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message``) to the log file named in the config.
It fails to start on a machine without NVSwitches and with a lab fault whose effects include
``fabric_failed``, logging what the real daemon logs when its NVSwitch/GPU initialisation fails.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import nvemu

DEFAULT_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
PID_FILE = os.environ.get("GPUREADY_LAB_FABRICMANAGER_PID", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")


def read_config(path: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                conf[key.strip()] = value.strip()
    return conf


class Log:
    def __init__(self, path: str):
        self.path = path
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    def write(self, level: str, message: str) -> None:
        stamp = time.strftime("%b %d %Y %H:%M:%S")
        line = f"[{stamp}] [{level}] [tid {os.getpid()}] {message}\n"
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        else:
            sys.stderr.write(line)


def main(argv: list[str]) -> int:
    version = nvemu.library_version()
    if "--version" in argv or "-v" in argv:
        print(f"Fabric Manager version is : {version}")
        return 0
    config = DEFAULT_CONFIG
    if "-c" in argv:
        config = argv[argv.index("-c") + 1]
    conf = read_config(config)
    log = Log(conf.get("LOG_FILE_NAME", "/var/log/fabricmanager.log"))
    log.write("INFO", f"Fabric Manager version {version} is running with the following configuration options")
    for key in sorted(conf):
        log.write("INFO", f"{key} = {conf[key]}")
    try:
        drv = nvemu.Driver()
        drv.check_loaded()
        drv.close()
    except (nvemu.NvmlError, OSError) as exc:
        log.write("ERROR", f"failed to initialize NVML: {exc}")
        print(
            "Fabric Manager failed to start. Check /var/log/fabricmanager.log for details.", file=sys.stderr
        )
        return 1
    system = drv.hw.get("system", {})
    if not system.get("nvswitch"):
        log.write(
            "ERROR",
            "request to query NVSwitch device information from NVSwitch driver failed with "
            "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]",
        )
        log.write("ERROR", "fabric manager failed to open NVSwitch devices, no NVSwitch devices found")
        print("Fabric Manager failed to start: no NVSwitch devices found.", file=sys.stderr)
        return 1
    if drv.host_effects()["fabric_failed"]:
        log.write(
            "INFO",
            f"number of devices specified in topology file NVSwitches: {system['nvswitch_count']}, "
            f"GPUs: {len(drv.hw['gpus'])}",
        )
        log.write(
            "ERROR",
            "detected number of NVSwitches don't match with any supported system topology, "
            "aborting fabric manager",
        )
        log.write("ERROR", "fabric manager initialization failed")
        print(
            "Fabric Manager failed to start. Check /var/log/fabricmanager.log for details.", file=sys.stderr
        )
        return 1
    nvemu.daemonize(PID_FILE)
    held = nvemu.hold_pid_file(PID_FILE)  # noqa: F841 - the lock lasts as long as the daemon
    log.write(
        "INFO", f"Connected to {system['nvswitch_count']} NVSwitch devices and {len(drv.hw['gpus'])} GPUs"
    )
    log.write("INFO", "Successfully configured all the available NVSwitches to route GPU NVLink traffic.")
    log.write("INFO", "NVLink training completed successfully. Fabric state: Completed")
    nvemu.wait_forever()
    log.write("INFO", "Fabric Manager is exiting")
    with contextlib.suppress(OSError):
        os.unlink(PID_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
