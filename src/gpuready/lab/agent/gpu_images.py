"""What NVIDIA images do in a container on a GPU host: the lab's catalogue of nvcr.io images.

A container's fate is decided the way containerd and the NVIDIA runtime decide it on a real node: the pod's
RuntimeClass handler must be configured in that host's containerd (else the sandbox fails), the handler's binary
must exist, and only the ``nvidia`` runtime injects the driver libraries and the devices named by
``NVIDIA_VISIBLE_DEVICES`` (the device plugin's allocation, else the pod's env, else the image's ``all``). Then
the image runs: the CUDA vectorAdd sample, the host's ``nvidia-smi`` in a CUDA base image, the device plugin, GFD,
the config manager and dcgm-exporter. Other nvcr.io/nvidia images cannot be pulled, like in an air-gapped cluster.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuready.lab.emulator import nvemu

from .gpu_host import Gpu, HostState, MigDevice
from .gpu_nfd import NFD_REPO, nfd_plan
from .gpu_plugin import PluginError, env_of
from .host_exec import HostCommand, Run, host_argv, host_root_mount, run_host_container
from .runtime import CatalogueRuntime, ContainerPlan, container_argv, normalize_image, pull_failure, run_argv

if TYPE_CHECKING:
    from .gpu import LabGpuBackend

Obj = dict[str, Any]

# repository -> (tag pattern, ENTRYPOINT, CMD). The NVIDIA images set NVIDIA_VISIBLE_DEVICES=all in their env.
IMAGES: dict[str, tuple[re.Pattern[str], list[str], list[str]]] = {
    "nvcr.io/nvidia/k8s-device-plugin": (
        re.compile(r"^v0\.\d+\.\d+(-ubi\d+)?$"),
        [],
        ["nvidia-device-plugin"],
    ),
    "nvcr.io/nvidia/k8s/dcgm-exporter": (
        re.compile(r"^\d+\.\d+\.\d+-\d+\.\d+\.\d+-(ubuntu\d+\.\d+|ubi\d+)$"),
        ["/usr/local/dcgm/dcgm-exporter-entrypoint.sh"],
        ["dcgm-exporter"],
    ),
    "nvcr.io/nvidia/k8s/cuda-sample": (
        re.compile(r"^vectoradd-cuda(\d+)\.(\d+)(\.\d+)?(-[a-z0-9.]+)?$"),
        [],
        ["/cuda-samples/vectorAdd"],
    ),
    "nvcr.io/nvidia/cuda": (
        re.compile(
            r"^(\d+)\.(\d+)\.\d+-(base|runtime|devel|cudnn-runtime|cudnn-devel)-"
            r"(ubuntu\d+\.\d+|ubi\d+|rockylinux\d+)$"
        ),
        ["/opt/nvidia/nvidia_entrypoint.sh"],
        ["/bin/bash"],
    ),
}
# NVIDIA's DRA driver for GPUs (gpu_dra): the kubernetes-sigs repository's image, and NVIDIA's before the move
DRA_REPOS = ("registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu", "nvcr.io/nvidia/k8s-dra-driver-gpu")
for _repo in DRA_REPOS:
    IMAGES[_repo] = (re.compile(r"^v\d+\.\d+\.\d+(-[a-z0-9.]+)?$"), [], ["gpu-kubelet-plugin"])
# node-feature-discovery (gpu_nfd): nfd-master and nfd-worker run; GFD's labels reach a Node only while they do
IMAGES[NFD_REPO] = (re.compile(r"^v\d+\.\d+\.\d+(-minimal|-full)?$"), [], ["nfd-worker"])
VECTOR_ADD_OK = (
    "[Vector addition of 50000 elements]\n"
    "Copy input data from the host memory to the CUDA device\n"
    "CUDA kernel launch with 196 blocks of 256 threads\n"
    "Copy output data from the CUDA device to the host memory\n"
    "Test PASSED\n"
    "Done\n"
)
NO_DEVICE = "no CUDA-capable device is detected"
INSUFFICIENT_DRIVER = "CUDA driver version is insufficient for CUDA runtime version"
ECC_ERROR = "uncorrectable ECC error encountered"
VECTOR_ADD_REPO = "nvcr.io/nvidia/k8s/cuda-sample"
OCI_PREFIX = "failed to create containerd task: failed to create shim task: OCI runtime create failed: "


def nvidia_image(image: str) -> tuple[str, re.Match[str]] | None:
    """(repository, tag match) for a catalogue image; None for anything else."""
    repo, tag = normalize_image(image)
    entry = IMAGES.get(repo)
    if entry is None:
        return None
    match = entry[0].match(tag)
    return (repo, match) if match else None


def image_digest(repo: str, tag: str) -> str:
    """A stable digest per image reference: the lab's registry mirror serves each tag as one image."""
    return f"{repo}@sha256:" + hashlib.sha256(f"gpuready-lab/{repo}:{tag}".encode()).hexdigest()


def klog(level: str, where: str, message: str) -> str:
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
    return f"{level}{stamp}       1 {where}] {message}\n"


@dataclass
class Exposure:
    """What the container runtime gave the container: driver libraries, and the GPUs/MIG devices it sees."""

    libs: bool
    devices: list[tuple[Gpu, MigDevice | None]]


def _start_error(message: str, reason: str = "StartError") -> ContainerPlan:
    return ContainerPlan(exit_code=128, reason=reason, message=message)


def _hook_error(stderr: str) -> ContainerPlan:
    return _start_error(
        f"{OCI_PREFIX}runc create failed: unable to start container process: error during container "
        f"init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode "
        f"as 'legacy'\n{stderr}: unknown"
    )


def _expand(host: HostState, spec: str) -> list[tuple[Gpu, MigDevice | None]] | str:
    """NVIDIA_VISIBLE_DEVICES -> devices; a str is the unknown device id (nvidia-container-cli's device error)."""
    if spec == "all":
        out: list[tuple[Gpu, MigDevice | None]] = []
        for g in host.visible_gpus:
            out.extend([(g, d) for d in g.mig_devices] if g.mig_enabled and g.mig_devices else [(g, None)])
        return out
    if spec == "none":
        return []
    found: list[tuple[Gpu, MigDevice | None]] = []
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        hit: tuple[Gpu, MigDevice | None] | None = None
        for g in host.gpus:
            if token in (g.uuid, str(g.index)):
                hit = (g, None)
            for d in g.mig_devices:
                if token in (d.uuid, f"{g.index}:{d.gi}"):
                    hit = (g, d)
        if hit is None or hit[0].off_bus:
            return token
        found.append(hit)
    return found


def _inject_cdi(host: HostState, names: list[str]) -> Exposure | ContainerPlan:
    """containerd's CDI injection: every name must resolve in the host's spec dirs, else the container is refused
    (as the CRI plugin does, before the runtime starts); resolved names give the container their devices and the
    spec's common edits (the driver libraries)."""
    missing = [n for n in names if n not in host.cdi_devices]
    if missing:
        return ContainerPlan(
            exit_code=None,
            waiting=[
                (
                    0.0,
                    "CreateContainerError",
                    "failed to create containerd container: CDI device injection failed: unresolvable CDI "
                    f"devices {', '.join(missing)}",
                )
            ],
        )
    wanted = {n.split("=", 1)[1] for n in names}
    devices: list[tuple[Gpu, MigDevice | None]] = []
    for g in host.visible_gpus:
        for d in g.mig_devices:
            if d.uuid in wanted:
                devices.append((g, d))
        if g.uuid in wanted:
            devices.append((g, None))
    return Exposure(host.nvml_present, devices)


def _cuda_too_new(host: HostState, cuda: tuple[int, int]) -> bool:
    have = tuple(int(x) for x in host.cuda_version.split("."))
    return cuda[0] > have[0]


def _requires_cuda(repo: str, match: re.Match[str]) -> tuple[int, int] | None:
    if repo in ("nvcr.io/nvidia/k8s/cuda-sample", "nvcr.io/nvidia/cuda"):
        return int(match.group(1)), int(match.group(2))
    return None


class GpuRuntime:
    """The runtime of a GPU node: NVIDIA images by the rules above, everything else like `CatalogueRuntime`."""

    def __init__(self, backend: LabGpuBackend) -> None:
        self.backend = backend
        self.fallback = CatalogueRuntime()

    def plan(self, pod: Obj, container: Obj, node: Obj | None) -> ContainerPlan:
        image = container.get("image", "")
        host = self.backend.host()
        handler = self.backend.handler_of(pod, host)
        runtime = host.runtimes.get(handler)
        if runtime is None:
            message = (
                f"rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "
                f'"{handler}" is configured'
            )
            self.backend.record(
                pod, "Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {message}"
            )
            return _start_error(message, "RunContainerError")
        devices = self.backend.allocate(pod, container)  # the kubelet allocates at admission, before any pull
        if isinstance(devices, ContainerPlan):
            return devices
        node_name = (node or {}).get("metadata", {}).get("name", "")
        prepared = self.backend.dra.prepare(pod, container, node_name, host)  # DRA claims; None without any
        if isinstance(prepared, ContainerPlan):
            return prepared
        found = nvidia_image(image)
        repo, tag = normalize_image(image)
        if found is None:
            if repo.startswith("nvcr.io/"):
                return ContainerPlan(exit_code=None, waiting=pull_failure(image))
            mount = host_root_mount(pod, container)
            if mount is not None:  # a container that looks at its host (the conformance probe) runs on it
                return run_host_container(
                    pod, container, mount, self.backend.host_pid(), self.backend.stand_in
                )
            plan = self.fallback.plan(pod, container, node)
            return self._with_runtime(plan, runtime.binary, host) if not plan.waiting else plan
        if runtime.binary not in host.binaries:
            return _start_error(
                f"{OCI_PREFIX}unable to retrieve OCI runtime error (open /run/containerd/io.containerd"
                f".runtime.v2.task/k8s.io/{pod['metadata'].get('uid', '')[:12]}/log.json: no such "
                f"file or directory): fork/exec {runtime.binary}: no such file or directory: unknown"
            )
        _, match = found
        cuda = _requires_cuda(repo, match)
        cdi_names = self.backend.cdi_devices(pod, container) if devices is not None else None
        exposure: Exposure | ContainerPlan
        if prepared is not None:
            exposure = prepared
        elif cdi_names is not None and host.cdi_enabled:
            exposure = _inject_cdi(host, cdi_names)
        else:
            # without CDI in containerd the plugin's CDI names are dropped: only the image's env is left
            given = devices if cdi_names is None else None
            exposure = self._expose(host, runtime.nvidia, pod, container, given, cuda)
        if isinstance(exposure, ContainerPlan):
            return exposure
        if (
            repo == VECTOR_ADD_REPO
            and (cdi_names is not None or prepared is not None)
            and cuda is not None
            and _cuda_too_new(host, cuda)
        ):
            # CDI mode runs no prestart hook, so no requirement check: the application finds the driver too old
            return ContainerPlan(
                logs=f"Failed to allocate device vector A (error code {INSUFFICIENT_DRIVER})!\n",
                exit_code=1,
                run_seconds=0.3,
            )
        entry = IMAGES[repo]
        argv = container_argv(container, entry[1], entry[2])
        plan = self._run(repo, argv, pod, container, node, host, exposure)
        plan.image_id = image_digest(repo, tag)
        return plan

    def _with_runtime(self, plan: ContainerPlan, binary: str, host: HostState) -> ContainerPlan:
        if binary not in host.binaries:
            return _start_error(f"{OCI_PREFIX}fork/exec {binary}: no such file or directory: unknown")
        return plan

    def _expose(
        self,
        host: HostState,
        nvidia: bool,
        pod: Obj,
        container: Obj,
        allocated: list[str] | None,
        cuda: tuple[int, int] | None,
    ) -> Exposure | ContainerPlan:
        if not nvidia:
            return Exposure(False, [])
        env = env_of(container)
        spec = ",".join(allocated) if allocated is not None else env.get("NVIDIA_VISIBLE_DEVICES", "all")
        if spec in ("", "void"):
            return Exposure(False, [])
        if not host.nvml_present:
            return _hook_error(
                "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
                "cannot open shared object file: no such file or directory"
            )
        if host.nvml_error:
            return _hook_error(
                f"nvidia-container-cli: initialization error: nvml error: {host.nvml_error.lower()}"
            )
        if cuda is not None and env.get("NVIDIA_DISABLE_REQUIRE", "").lower() not in ("1", "true"):
            have = tuple(int(x) for x in host.cuda_version.split("."))
            if cuda[0] > have[0]:
                return _hook_error(
                    f"nvidia-container-cli: requirement error: unsatisfied condition: cuda>={cuda[0]}."
                    f"{cuda[1]}, please update your driver to a newer version, or use an earlier cuda "
                    "container"
                )
        devices = _expand(host, spec)
        if isinstance(devices, str):
            return _hook_error(f"nvidia-container-cli: device error: {devices}: unknown device")
        return Exposure(True, devices)

    # images -----------------------------------------------------------------------------------------------------

    def _run(
        self,
        repo: str,
        argv: list[str],
        pod: Obj,
        container: Obj,
        node: Obj | None,
        host: HostState,
        exp: Exposure,
    ) -> ContainerPlan:
        prog = argv[0].rsplit("/", 1)[-1] if argv else ""
        if repo == NFD_REPO:  # needs no driver: it reads files and talks to the API
            return nfd_plan(prog, pod, normalize_image(container.get("image", ""))[1])
        if repo == "nvcr.io/nvidia/k8s/cuda-sample" and prog == "vectorAdd":
            return vector_add(exp, host)
        if repo == "nvcr.io/nvidia/k8s-device-plugin":
            if prog == "config-manager":
                return self.backend.run_config_manager(pod, container, node)
            if prog == "nvidia-device-plugin":
                return self._daemon(
                    lambda: self.backend.start_plugin(pod, container, node, host), exp, "plugin"
                )
            if prog == "gpu-feature-discovery":
                return self._daemon(lambda: self.backend.start_gfd(pod, container, node, host), exp, "gfd")
            if prog == "mps-control-daemon":
                # the MPS control daemon (gpuready's MPS pools): it starts and waits, as upstream's does with its
                # config loaded; the MPS daemons themselves (nvidia-cuda-mps-control) are not emulated
                return self._daemon(lambda: _mps_daemon_logs(), exp, "mps")
        if repo in DRA_REPOS:
            return self.backend.dra.run(pod, container, argv, host, exp)
        if repo == "nvcr.io/nvidia/k8s/dcgm-exporter" and "dcgm-exporter" in " ".join(argv):
            if not exp.libs or host.nvml_error:
                return ContainerPlan(logs=_dcgm_fail(), exit_code=1, run_seconds=0.5)
            return ContainerPlan(logs=_dcgm_start(), exit_code=None)
        return run_with_smi(argv, env_of(container), exp, self.backend)

    def _daemon(self, start: Any, exp: Exposure, kind: str) -> ContainerPlan:
        if not exp.libs:
            return ContainerPlan(logs=_no_nvml_logs(kind), exit_code=1, run_seconds=0.5)
        try:
            logs = start()
        except PluginError as exc:
            return ContainerPlan(logs=klog("E", "main.go:173", str(exc)), exit_code=1, run_seconds=0.5)
        return ContainerPlan(logs=logs, exit_code=None)


# programs -------------------------------------------------------------------------------------------------------


def vector_add(exp: Exposure, host: HostState) -> ContainerPlan:
    """The CUDA sample: its first CUDA call is cudaMalloc of vector A, which is where a broken setup shows."""
    header = "[Vector addition of 50000 elements]\n"
    error = None
    if not exp.libs:
        error = INSUFFICIENT_DRIVER
    else:
        usable = [(g, m) for g, m in exp.devices if not g.off_bus and not (g.mig_enabled and m is None)]
        if not usable:
            error = NO_DEVICE
        elif usable[0][0].effects.ecc_uncorrected:
            error = ECC_ERROR
    if error:
        return ContainerPlan(
            logs=f"{header}Failed to allocate device vector A (error code {error})!\n",
            exit_code=1,
            run_seconds=0.3,
        )
    return ContainerPlan(logs=VECTOR_ADD_OK, exit_code=0, run_seconds=0.5)


def container_devices(exp: Exposure) -> str:
    """The device nodes the runtime gave the container: each GPU's /dev/nvidiaN, each MIG device's GPU and compute
    instance capabilities (nvemu.CONTAINER_DEVICES)."""
    nodes: list[str] = []
    for g, m in exp.devices:
        minor = int(g.hw.get("minor_number", g.index))
        nodes.append(f"/dev/nvidia{minor}")
        if m is not None:
            caps = (nvemu.gi_minor(minor, m.gi), nvemu.ci_minor(minor, m.gi, m.ci))
            nodes += [f"/dev/nvidia-caps/nvidia-cap{c}" for c in caps]
    return ",".join(dict.fromkeys(nodes))


@functools.cache
def static_tools() -> str:
    """The lab's static tools (gpuready/lab/silicon/tools), built into the lab cache once per source: the emulated
    nvidia-smi, run here for a pod with no running host behind its node."""
    from gpuready.lab.silicon import build

    return str(build.static_tools())


def run_with_smi(
    argv: list[str], env: dict[str, str], exp: Exposure, backend: LabGpuBackend
) -> ContainerPlan:
    """A CUDA base image: the catalogue shell, whose ``nvidia-smi`` is the host's, which the nvidia runtime mounts
    into the container (none without the driver libraries): it runs on the host (host_exec) seeing only the
    container's devices, or, with no running host behind the node, the emulator here on the node's files."""
    if argv and argv[0].rsplit("/", 1)[-1] == "nvidia_entrypoint.sh":
        argv = argv[1:]
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    if prog in ("sh", "bash") and len(argv) >= 3 and argv[1] == "-c" and "nvidia-smi" in argv[2]:
        parts = [shlex.split(p) for p in re.split(r";|&&|\n", argv[2]) if p.strip()]
    elif prog == "nvidia-smi" and not exp.libs:
        return _start_error(
            f"{OCI_PREFIX}runc create failed: unable to start container process: error during "
            'container init: exec: "nvidia-smi": executable file not found in $PATH: unknown'
        )
    elif prog == "nvidia-smi":
        parts = [argv]
    else:
        return run_argv(argv, env)
    visible = {nvemu.CONTAINER_DEVICES: container_devices(exp)}
    smi = (
        host_argv(["nvidia-smi"], visible, backend.host_pid(), backend.stand_in)
        or ([static_tools(), "nvidia-smi"], {**backend.view.emulator_env(), **visible})
        if exp.libs
        else ([], {})
    )

    def script(run: Run) -> tuple[str, int | None]:
        """The commands in order, each ``nvidia-smi`` the host's, the others the catalogue shell's; to the first
        that fails or never ends (``sleep infinity``: the container runs on)."""
        logs = ""
        code: int | None = 0
        for words in parts:
            if words[0].rsplit("/", 1)[-1] != "nvidia-smi":
                plan = run_argv(words, env)
                out, code = plan.logs, plan.exit_code
            elif not exp.libs:  # nvidia-smi is not in the image; the nvidia runtime mounts the host's
                out, code = "/bin/bash: line 1: nvidia-smi: command not found\n", 127
            else:
                out, code = run([*smi[0], *words[1:]], smi[1])
            logs += out
            if code != 0:
                break
        return logs, code

    # starting: a reader of the log waits for nvidia-smi's answer, which a real container's log has by the time its
    # Running status is seen (the kubelet's status lags a start by about as long as nvidia-smi takes)
    return ContainerPlan(run_seconds=0.1, pending=HostCommand(script, starting=True))


def _mps_daemon_logs() -> str:
    """What cmd/mps-control-daemon/main.go logs as it starts (v0.19.3): watcher, config, daemons."""
    return "".join(
        klog("I", where, message)
        for where, message in (
            ("main.go:109", "Starting OS watcher."),
            ("main.go:123", "Starting Daemons."),
            ("main.go:166", "Loading configuration."),
            ("main.go:196", "Retrieving MPS daemons."),
        )
    )


def _no_nvml_logs(kind: str) -> str:
    where = "factory.go:49" if kind == "plugin" else "factory.go:66"
    lines = [
        klog(
            "I",
            where,
            "Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: cannot open "
            "shared object file: No such file or directory",
        ),
        klog("I", where, "Detected non-Tegra platform: /sys/devices/soc0/family file not found"),
        klog("E", "factory.go:112", "Incompatible platform detected"),
        klog("E", "factory.go:113", "If this is a GPU node, did you configure the NVIDIA Container Toolkit?"),
        klog(
            "E",
            "factory.go:114",
            "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
        ),
        klog(
            "E",
            "factory.go:115",
            "You can learn how to set the runtime at: "
            "https://github.com/NVIDIA/k8s-device-plugin#quick-start",
        ),
        klog(
            "E",
            "factory.go:116",
            "If this is not a GPU node, you should set up a toleration or nodeSelector to "
            "only deploy this plugin on GPU nodes",
        ),
    ]
    final = (
        (
            "error starting plugins: error creating plugin manager: unable to create plugin manager: platform "
            "detection failed"
        )
        if kind == "plugin"
        else "error creating NVML labeler: platform detection failed"
    )
    return "".join(lines) + klog("E", "main.go:173", final)


def plugin_start_logs(config_json: Obj, registered: dict[str, int]) -> str:
    out = [
        klog("I", "main.go:235", '"Starting NVIDIA Device Plugin"'),
        klog("I", "main.go:238", "Starting FS watcher for /var/lib/kubelet/device-plugins"),
        klog("I", "main.go:245", "Starting OS watcher."),
        klog("I", "main.go:260", "Starting Plugins."),
        klog("I", "main.go:317", "Loading configuration."),
        klog("I", "main.go:342", "Updating config with default resource matching patterns."),
        klog("I", "main.go:353", "\nRunning with config:\n" + json.dumps(config_json, indent=2)),
        klog("I", "main.go:356", "Retrieving plugins."),
    ]
    for resource in registered:
        out.append(klog("I", "server.go:165", f"Starting GRPC server for '{resource}'"))
        out.append(
            klog(
                "I",
                "server.go:117",
                f"Starting to serve '{resource}' on /var/lib/kubelet/device-plugins/"
                f"nvidia-{resource.split('/', 1)[1]}.sock",
            )
        )
        out.append(klog("I", "server.go:125", f"Registered device plugin for '{resource}' with Kubelet"))
    if not registered:
        out.append(klog("I", "main.go:379", "No devices found. Waiting indefinitely."))
    return "".join(out)


def _dcgm_start() -> str:
    return (
        'time="{t}" level=info msg="Starting dcgm-exporter"\n'
        'time="{t}" level=info msg="DCGM successfully initialized!"\n'
        'time="{t}" level=info msg="Collecting DCP Metrics"\n'
        'time="{t}" level=info msg="Kubernetes metrics collection enabled!"\n'
        'time="{t}" level=info msg="Starting webserver"\n'
        'time="{t}" level=info msg="Listening on" address="[::]:9400"\n'
    ).format(t=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _dcgm_fail() -> str:
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return (
        f'time="{t}" level=info msg="Starting dcgm-exporter"\n'
        f'time="{t}" level=fatal msg="Error starting nv-hostengine: DCGM initialization error"\n'
    )
