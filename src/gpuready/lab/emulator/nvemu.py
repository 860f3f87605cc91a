"""Shared machinery of the emulated NVIDIA driver: the machine, the driver's own state, faults.

Stdlib only: installed as /usr/lib/nvidia-emu/nvemu.py by the libnvidia-ml1 package (it stands in for
NVML, the library every NVIDIA tool links against). The machine (GPUs, faults) is a read-only
hardware file the lab writes; what a real driver keeps in the kernel (MIG mode, GPU/compute
instances, persistence mode, the loaded module version) lives in a state file that is reset when the
boot id changes, as a reboot resets a real GPU.

In a container the tools see only what the container runtime gave it. On a real node the nvidia runtime (or CDI)
mounts the host's nvidia-smi and libraries and only the container's device nodes, and NVML finds the GPUs whose
``/dev/nvidiaN`` it can open, numbered from 0, and on them the MIG devices whose GPU and compute instance
capabilities (``/dev/nvidia-caps/nvidia-capM``) it was given (every one with the MIG monitor or configuration
capability). ``GPUREADY_LAB_CONTAINER_DEVICES`` (lab-internal; the lab's runc wrapper sets it in every GPU
container, the node agent when a pod runs the host's nvidia-smi) names those device nodes: their paths, comma
separated (empty: none). The rule is package machine's (``lab/silicon/machine/contain.go``), which the mock NVML and
CUDA apply as well; ``Driver._contain`` applies its selection. With it set these tools change nothing in the
driver's state.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import typing

HOST_MACHINE_DIR = "/opt/gpuready-lab/machine"
DEFAULT_HARDWARE = HOST_MACHINE_DIR + "/hardware.json"
DEFAULT_STATE = "/var/lib/nvidia-emu/state.json"
DRIVER_DIR = "/usr/lib/nvidia-emu"
# Used when the tools run outside a lab host (unit tests) and no package wrote driver-version.
DEFAULT_DRIVER_VERSION = "580.178.04"
CUDA_BY_BRANCH = {"595": "13.2", "590": "13.1", "580": "13.0", "575": "12.9", "570": "12.8", "550": "12.4"}

# nvidia-smi exit codes (nvidia-smi(1), RETURN VALUE), which NVML init's failures give the Python tools too.
EXIT_NO_DRIVER = 9
EXIT_MISMATCH = 18

CONTAINER_DEVICES = "GPUREADY_LAB_CONTAINER_DEVICES"
# Where the Python tools find the lab's static Go tools (gpuready/lab/silicon/tools; the launcher sets it on a host).
STATIC_TOOLS_ENV = "GPUREADY_LAB_STATIC_TOOLS"
# /proc/driver/nvidia-caps/mig-minors: config 1, monitor 2, then per GPU 15 GPU instances, each with its access
# minor followed by 8 compute instances' (gpu0/gi1/access is 12, gpu0/gi1/ci0/access 13).
GIS_PER_GPU = 15
CIS_PER_GI = 8


def gi_minor(gpu_minor: int, gi: int) -> int:
    return 3 + (gpu_minor * GIS_PER_GPU + gi) * (1 + CIS_PER_GI)


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


# How the effects of several faults on one GPU (or on the host) combine, and each effect's value without a fault:
# flags OR, counts add, the worst of a PCIe field or a bandwidth factor, the largest XID. The one table of the
# rules: gpuready.lab.faults.Effects (where each effect is documented) combines by it too; package machine's
# Effects.combine is its Go twin (tests/unit/test_fault_catalogue.py keeps the three in step).
COMBINE: dict[str, tuple[typing.Callable[[list], object], object]] = {
    "off_bus": (any, False),
    "xid": (max, 0),
    "ecc_uncorrected": (sum, 0),
    "dbe_remapped": (sum, 0),
    "row_remap_pending": (any, False),
    "retired_pages_pending": (any, False),
    "pcie_gen_drop": (max, 0),
    "pcie_width_divisor": (max, 1),
    "nvlink_down": (any, False),
    "bandwidth_factor": (min, 1.0),
    "dcgm_memory_fails": (any, False),
    "fabric_failed": (any, False),
    "driver_mismatch": (any, False),
}


def combine(effects: list[dict]) -> dict:
    """The effects of several faults together, by COMBINE's rules; every effect is in the result."""
    return {
        name: rule([none, *(e[name] for e in effects if name in e)]) for name, (rule, none) in COMBINE.items()
    }


class Effects:
    """The combined effects of the faults on one GPU (or the host), ``effects["name"]``: each hardware-file fault
    line carries its effects (gpuready.lab.faults.Effects, where every field is documented); the tools render
    these, never a fault's name."""

    def __init__(self, lines: list[dict]):
        self._values = combine([line.get("effects") or {} for line in lines])

    def __getitem__(self, name: str) -> typing.Any:
        return self._values[name]


# What the driver reports, derived from a GPU's hardware entry and its combined effects (Effects, or
# gpuready.lab.faults.Effects.as_dict()): the one Python derivation, which dcgmi, kernel_files'
# sysfs link and the node agent's dcgm-exporter read. Package machine's View is its Go twin (the mock NVML and CUDA,
# nvidia-smi); tests/unit/test_mock_nvml.py checks these functions against what NVML reports.
def pcie_link(gpu: dict, effects: typing.Any) -> tuple[int, int]:
    """The trained PCIe link (generation, width): the maximum, at least gen 1 and x1 after the faults."""
    gen = max(1, gpu["max_pcie_gen"] - effects["pcie_gen_drop"])
    return gen, max(1, gpu["max_pcie_width"] // max(1, effects["pcie_width_divisor"]))


def remapped_rows(gpu: dict, effects: typing.Any) -> tuple[int, int, bool]:
    """Remapped rows (GPUs with row remapping): correctable, uncorrectable, a remap pending."""
    unc, pending = (1, True) if effects["row_remap_pending"] else (0, False)
    if gpu.get("row_remapping"):
        unc += effects["dbe_remapped"]
    return 0, unc, pending


class NvmlError(Exception):
    """An error the real tools report before doing anything (NVML init, driver not loaded)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def hardware_path() -> str:
    return os.environ.get("GPUREADY_LAB_HARDWARE", DEFAULT_HARDWARE)


def state_path() -> str:
    return os.environ.get("GPUREADY_LAB_STATE", DEFAULT_STATE)


def load_hardware() -> dict:
    with open(hardware_path(), encoding="utf-8") as f:
        return json.load(f)


def boot_id() -> str:
    override = os.environ.get("GPUREADY_LAB_BOOT_ID")
    if override:
        return override
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unknown-boot"


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def library_version() -> str:
    """Version of the user-space driver (NVML) installed now: what a freshly started tool links."""
    env = os.environ.get("GPUREADY_LAB_DRIVER_VERSION")
    if env:
        return env
    return _read_text(os.path.join(DRIVER_DIR, "driver-version")) or DEFAULT_DRIVER_VERSION


def installed_kmod_version() -> str | None:
    """Version of the kernel module package on disk; None when no kernel module package is installed."""
    env = os.environ.get("GPUREADY_LAB_DRIVER_VERSION")
    if env:
        return env
    if not os.path.isdir(DRIVER_DIR):
        return DEFAULT_DRIVER_VERSION
    return _read_text(os.path.join(DRIVER_DIR, "kmod-version"))


def cuda_version(driver: str) -> str:
    return CUDA_BY_BRANCH.get(driver.split(".")[0], "13.0")


def _atomic_write(path: str, data: str) -> None:
    """Replace `path` with `data`, readable by every user (0644, not mkstemp's 0600): any user may query NVML
    and read a pid file, and the lab's GPU pods run their tools as non-root users."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    import tempfile  # here, not at the top: only a change needs it, and every tool call pays for its imports

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fresh_gpu_state(mig_enabled: bool) -> dict:
    return {"mig_current": mig_enabled, "mig_pending": mig_enabled, "persistence": False, "gis": []}


class Driver:
    """The emulated driver for one command: hardware, state and fault view, saved on demand."""

    def __init__(self) -> None:
        try:
            self.hw = load_hardware()
        except (OSError, ValueError):
            # No machine file: this host has no (emulated) GPU for the driver to talk to.
            raise NvmlError(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                "Make sure that the latest NVIDIA driver is installed and running.",
                EXIT_NO_DRIVER,
            ) from None
        self.path = state_path()
        nodes = os.environ.get(CONTAINER_DEVICES)
        self._lock: typing.TextIO | None = None
        if nodes is None:
            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            try:
                self._lock = open(self.path + ".lock", "a+")  # noqa: SIM115 - held for the command's lifetime
                fcntl.flock(self._lock, fcntl.LOCK_EX)
            except OSError:  # an unprivileged user may look at the GPUs but changes nothing
                self._lock = None
        self.state = self._load_state()
        self.version = library_version()
        if nodes is not None:
            self._contain()

    def _contain(self) -> None:
        """What NVML in this container finds (the module docstring); never saved. The rule (which device nodes reveal
        which GPUs and MIG instances) is package machine's (lab/silicon/machine/contain.go), which the mock NVML and
        CUDA apply too: the static tools print its selection (``nvidia-emu-tools visible``), applied here."""
        import subprocess  # here: only a container's tools need it

        tools = os.environ.get(STATIC_TOOLS_ENV, "")
        try:
            seen = json.loads(
                subprocess.run([tools, "visible"], capture_output=True, check=True, text=True).stdout
            )
        except (OSError, subprocess.CalledProcessError, ValueError) as exc:
            raise NvmlError(
                f"{CONTAINER_DEVICES} is set, but {STATIC_TOOLS_ENV}={tools!r} failed: {exc}", 1
            ) from None
        by_index = {gpu["index"]: gpu for gpu in self.hw["gpus"]}
        gpus: list[dict] = []
        faults = [f for f in self.hw.get("faults", []) if f.get("gpu") is None]
        for index, visible in enumerate(seen["gpus"]):
            gpu = by_index[visible["host_index"]]
            faults += [{**f, "gpu": index} for f in self.hw.get("faults", []) if f.get("gpu") == gpu["index"]]
            cis = {int(gi): set(ids) for gi, ids in visible["gis"].items()}
            st = self.gpu_state(gpu)
            st["gis"] = [
                {**gi, "cis": [c for c in gi["cis"] if c["id"] in cis[gi["id"]]]}
                for gi in st["gis"]
                if gi["id"] in cis
            ]
            gpus.append({**gpu, "index": index, "minor_number": gpu.get("minor_number", gpu["index"])})
        self.hw = {**self.hw, "gpus": gpus, "faults": faults}

    @classmethod
    def snapshot(cls, hw: dict, state_text: str | None, current_boot: str | None) -> Driver:
        """A read-only driver over given hardware and state text, for the lab's machine side (kernel_files).

        The machine renders /dev/nvidia* and /proc/driver/nvidia from the same reading of the state the tools
        in the host use (a reboot resets it), without taking the host's lock or writing its state file.
        current_boot None: take the state as this boot's.
        """
        drv = cls.__new__(cls)
        drv.hw = hw
        drv.path = ""
        drv._lock = None
        drv.version = library_version()
        raw = json.loads(state_text) if state_text and state_text.strip() else {}
        drv.state = drv._state_from(raw, current_boot or raw.get("boot_id") or "unknown-boot")
        return drv

    def _load_state(self) -> dict:
        raw = _read_text(self.path)
        return self._state_from(json.loads(raw) if raw else {}, boot_id())

    def _state_from(self, state: dict, current: str) -> dict:
        gpus = state.get("gpus", {})
        if state.get("boot_id") != current:
            # A reboot: pending MIG mode becomes current, instances, persistence and the loaded module
            # are gone, exactly as after a real reboot.
            new_gpus = {}
            for gpu in self.hw["gpus"]:
                old = gpus.get(gpu["uuid"])
                pending = bool(old["mig_pending"]) if old else False
                new_gpus[gpu["uuid"]] = _fresh_gpu_state(pending and gpu.get("mig_capable", False))
            state = {"boot_id": current, "kmod": None, "gpus": new_gpus}
        for gpu in self.hw["gpus"]:
            state["gpus"].setdefault(gpu["uuid"], _fresh_gpu_state(False))
        return state

    def close(self) -> None:
        """Release the state lock; long-running daemons must not hold it while they wait."""
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def save(self) -> None:
        if self._lock is None:
            return
        _atomic_write(self.path, json.dumps(self.state, indent=1, sort_keys=True))

    # --- driver checks -------------------------------------------------------------------------
    def check_loaded(self) -> None:
        """Raise NvmlError like NVML init does: no module, library/module mismatch."""
        if self.host_effects()["driver_mismatch"]:
            raise NvmlError("Failed to initialize NVML: Driver/library version mismatch", EXIT_MISMATCH)
        kmod = self.state.get("kmod")
        if not kmod:
            installed = installed_kmod_version()
            if installed is None:
                raise NvmlError(
                    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                    "Make sure that the latest NVIDIA driver is installed and running.",
                    EXIT_NO_DRIVER,
                )
            # First use in this boot loads the module on disk (nvidia-modprobe does this on real hosts).
            self.state["kmod"] = installed
            self.save()
            kmod = installed
        if kmod != self.version:
            raise NvmlError("Failed to initialize NVML: Driver/library version mismatch", EXIT_MISMATCH)

    # --- faults --------------------------------------------------------------------------------
    def host_effects(self) -> Effects:
        """The effects of the host-wide faults."""
        return Effects([f for f in self.hw.get("faults", []) if f.get("gpu") is None])

    def gpu_effects(self, index: int) -> Effects:
        """The effects of the faults injected on GPU ``index``."""
        return Effects([f for f in self.hw.get("faults", []) if f.get("gpu") == index])

    def off_bus(self, index: int) -> bool:
        return self.gpu_effects(index)["off_bus"]

    def pcie_current(self, gpu: dict) -> tuple[int, int]:
        """The trained PCIe link (generation, width) of the GPU (pcie_link)."""
        return pcie_link(gpu, self.gpu_effects(gpu["index"]))

    def visible_gpus(self) -> list[dict]:
        return [g for g in self.hw["gpus"] if not self.off_bus(g["index"])]

    def gpu_state(self, gpu: dict) -> dict:
        return self.state["gpus"][gpu["uuid"]]

    def persistence(self, gpu: dict) -> bool:
        return bool(self.gpu_state(gpu)["persistence"]) or persistenced_running()

    def mig_current(self, gpu: dict) -> bool:
        return bool(self.gpu_state(gpu)["mig_current"]) and gpu.get("mig_capable", False)

    def mig_devices(self, gpu: dict) -> list[dict]:
        """The GPU's MIG devices (mig_devices), none with MIG mode off."""
        return mig_devices(gpu, self.gpu_state(gpu)) if self.mig_current(gpu) else []

    def compute_mode(self, gpu: dict) -> str:
        """As nvidia-smi names it (Default, Exclusive_Process, Prohibited); the driver's default until set."""
        return str(self.gpu_state(gpu).get("compute_mode", "Default"))


def _alive(pid_file: str) -> bool:
    """The pid file names a live process, or (in a GPU container, where the pid is the host's) its daemon holds
    the file's lock (hold_pid_file; the Go machine's alive does the same)."""
    pid = _read_text(pid_file)
    if not (pid and pid.isdigit()):
        return False
    if os.path.exists(f"/proc/{pid}"):
        return True
    try:
        with open(pid_file, encoding="ascii") as f:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def persistenced_running() -> bool:
    return _alive(
        os.environ.get("GPUREADY_LAB_PERSISTENCED_PID", "/run/nvidia-persistenced/nvidia-persistenced.pid")
    )


def fabricmanager_running() -> bool:
    return _alive(
        os.environ.get("GPUREADY_LAB_FABRICMANAGER_PID", "/run/nvidia-fabricmanager/nv-fabricmanager.pid")
    )


def mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    """A stable MIG device UUID (real ones are name-based UUIDs too, version 5)."""
    import uuid  # here: only MIG devices need it

    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{gpu_uuid}/{gi}/{ci}"))


def mig_devices(gpu: dict, gpu_state: dict) -> list[dict]:
    """The GPU's MIG devices (one per compute instance) from its driver state, in nvidia-smi's order (GPU instance
    id, then compute instance id): index, gi, ci, profile (the GPU instance's), name, start (the GPU instance's
    placement), full (the compute instance spans its GPU instance), sm, uuid. The caller checks MIG mode. Package
    machine's migDevices derives the same for the mock NVML and CUDA."""
    profiles = {p["profile_id"]: p for p in gpu.get("mig_profiles") or []}
    devices: list[dict] = []
    for gi in sorted(gpu_state.get("gis") or [], key=lambda g: g["id"]):
        prof = profiles.get(gi["profile_id"])
        if prof is None:
            continue
        for ci in sorted(gi.get("cis") or [], key=lambda c: c["id"]):
            full = ci["size"] >= prof["compute_slices"]
            devices.append(
                {
                    "index": len(devices),
                    "gi": gi["id"],
                    "ci": ci["id"],
                    "profile": prof,
                    "name": prof["name"],
                    "start": int(gi.get("start") or 0),
                    "full": full,
                    "sm": prof["sm_count"]
                    if full
                    else prof["sm_count"] * ci["size"] // max(prof["compute_slices"], 1),
                    "uuid": mig_uuid(gpu["uuid"], gi["id"], ci["id"]),
                }
            )
    return devices


def select(drv: Driver, ids: str | None) -> list[dict]:
    """GPUs named by -i (index, UUID or PCI bus id; comma separated), all when not given."""
    gpus = drv.hw["gpus"]
    if ids is None:
        return list(gpus)
    chosen = []
    for token in ids.split(","):
        token = token.strip()
        match = None
        for gpu in gpus:
            bus = gpu["pci_bus_id"].lower()
            if token == str(gpu["index"]) or token == gpu["uuid"] or token.lower() in (bus, bus[4:]):
                match = gpu
        if match is None:
            raise LookupError(token)
        chosen.append(match)
    return chosen


def start_daemon(name: str, failure: str) -> Driver | None:
    """The start of one of the driver's daemons (nvidia-persistenced, nv-hostengine): NVML must initialise (the
    driver loaded, its library matching), or the daemon logs why to syslog, prints ``failure`` and the caller exits
    1, as NVIDIA's do. Returns the (closed) driver to read the GPUs from, or None."""
    import syslog

    syslog.openlog(name, syslog.LOG_PID, syslog.LOG_DAEMON)
    try:
        drv = Driver()
        drv.check_loaded()
        drv.close()
    except (NvmlError, OSError) as exc:
        syslog.syslog(syslog.LOG_ERR, f"Failed to initialize NVML: {exc}")
        print(failure, file=sys.stderr)
        return None
    return drv


def daemonize(pid_file: str) -> None:
    """Fork into the background as a Type=forking systemd service expects; the child writes the pid file."""
    middle = os.fork()
    if middle > 0:
        # The starting process exits only once the pid file exists, so systemd finds it at once.
        os.waitpid(middle, 0)
        os._exit(0)
    os.setsid()
    daemon = os.fork()
    if daemon > 0:
        os.makedirs(os.path.dirname(pid_file), exist_ok=True)
        _atomic_write(pid_file, f"{daemon}\n")
        os._exit(0)
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def hold_pid_file(pid_file: str, timeout: float = 5.0) -> typing.TextIO | None:
    """Keep an exclusive lock on this daemon's pid file for its lifetime (the caller keeps the returned file).

    Why: the lab's GPU containers see the daemon's pid file (bind-mounted, read-only) but not its pid, which is in
    the host's PID namespace; the mock NVML and CUDA (machine.alive) take a held lock for a live daemon, as a real
    driver knows Fabric Manager's state in a container too. Waits for the pid file daemonize's parent writes."""
    import time

    deadline = time.monotonic() + timeout
    while _read_text(pid_file) != str(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        held = open(pid_file, encoding="ascii")  # noqa: SIM115 - held until the process exits
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None
    return held


def wait_forever() -> None:
    """Sleep until SIGTERM/SIGINT, then return (the caller cleans up and exits 0)."""
    import signal

    stop = {"now": False}

    def _handler(_signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    while not stop["now"]:
        signal.pause()
