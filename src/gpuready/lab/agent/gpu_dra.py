"""NVIDIA's DRA driver for GPUs on a lab node: its kubelet plugin publishes ResourceSlices, the kubelet prepares
allocated claims. The real scheduler allocates; nothing here picks devices.

* The kubelet-plugin pod (``gpu-kubelet-plugin`` in the driver's image, recognised like the nvcr.io images of
  :mod:`.gpu_images`) starts only with the driver's libraries in the container (the ``nvidia`` runtime) and NVML
  working (a driver/library mismatch makes it exit, as the real plugin's NVML init fails). While it runs, the node's
  ResourceSlice (driver ``gpu.nvidia.com``, pool = node name, ``spec.nodeName`` set, owned by the Node) lists the
  host's devices as the real plugin's ``deviceinfo.go`` names and describes them: ``gpu-<minor>`` for each GPU on the
  bus with MIG off, ``gpu-<minor>-mig-<profile id>-<start>-<size>`` for each MIG device of the emulated driver's state
  (read on every sync, so a GPU falling off the bus or a MIG change rewrites the slice, with a new pool
  generation). When the pod stops, the slice is deleted (the real plugin deletes its slices on shutdown; on a crash
  the kubelet's plugin-deregistration does).
* Publishing identity: the real plugin writes slices with its ServiceAccount (the add-ons' RBAC grants it). The node
  agent holds only the admin credentials (as kwok's controller does) and writes with those; the node authorizer
  would also let ``system:node:<name>`` write slices whose ``nodeName`` is that node (NodeRestriction checks it).
* Preparing: a container whose ``resources.claims`` name a pod claim gets exactly the devices of this driver and
  this node's pool in the claim's ``status.allocation.devices.results`` (as CDI devices: with containerd's CDI off
  it gets none). A claim not allocated, a driver whose plugin is not running, or a device gone from the host since
  allocation keep the container from starting (``FailedPrepareDynamicResources``). Devices are released when the
  pod ends.
* A claim is prepared once for all the pods that share it (the real plugin's Prepare is idempotent per claim): each
  pod gets the claim's devices. The claim's opaque ``resource.nvidia.com/v1beta1`` configs for this driver
  (``status.allocation.devices.config``, which the scheduler copies from the claim and its class) are validated as
  the driver's ``api/.../validate.go`` does: a ``GpuConfig`` with ``sharing.strategy: TimeSlicing`` needs the
  plugin's ``TimeSlicingSettings`` feature gate (``--feature-gates`` or ``FEATURE_GATES``; alpha, off by default),
  ``MPS`` needs ``MPSSupport``; without it the strategy is unknown and preparation fails, as it does for a
  time-slice interval on a MIG device (``can only set the time-slice interval on full GPUs``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuready.spec.dra import DRIVER, GPU_TYPE, MIB, MIG_TYPE, binary_quantity, semver

from .api import ApiError, object_path
from .dra_devices import ClaimRef, device_name, host_devices
from .gpu_host import Gpu, HostState, MigDevice
from .gpu_images import Exposure, klog
from .gpu_plugin import env_of, flag_of
from .runtime import ContainerPlan

if TYPE_CHECKING:
    from .gpu import LabGpuBackend

Obj = dict[str, Any]
SLICES = "resourceslices.resource.k8s.io"
CLAIMS = "resourceclaims.resource.k8s.io"
NOT_PREPARED = "FailedPrepareDynamicResources"
CONFIG_API = "resource.nvidia.com/v1beta1"
INTERVALS = ("Default", "Short", "Medium", "Long")
STRATEGY_GATES = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}


def feature_gates(container: Obj) -> set[str]:
    """The gates a plugin container turns on (``--feature-gates=A=true,B=false`` or ``FEATURE_GATES``)."""
    spec = flag_of(container, "feature-gates") or env_of(container).get("FEATURE_GATES") or ""
    on = set()
    for item in spec.split(","):
        name, _, value = item.strip().partition("=")
        if name and value.strip().lower() == "true":
            on.add(name)
    return on


def config_problem(params: Obj, mig: bool, gates: set[str]) -> str | None:
    """Why the driver refuses this opaque config for a device (None: it applies it)."""
    if params.get("apiVersion") != CONFIG_API:
        return f"unsupported config apiVersion {params.get('apiVersion')!r} (want {CONFIG_API})"
    kind = params.get("kind")
    if kind not in ("GpuConfig", "MigDeviceConfig"):
        return f"unknown config kind {kind!r}"
    if (kind == "MigDeviceConfig") != mig:
        return f"cannot apply {kind} to a {'MIG device' if mig else 'full GPU'}"
    sharing = params.get("sharing")
    if not sharing:
        return None
    strategy = str(sharing.get("strategy", ""))
    if STRATEGY_GATES.get(strategy) not in gates:
        return f"unknown GPU sharing strategy: {strategy}"
    if strategy == "TimeSlicing":
        interval = (sharing.get("timeSlicingConfig") or {}).get("interval", "Default")
        if interval not in INTERVALS:
            return f"unknown time-slice interval: {interval}"
        if mig and sharing.get("timeSlicingConfig"):
            return "can only set the time-slice interval on full GPUs"
    return None


def _device(host: HostState, gpu: Gpu, mig: MigDevice | None) -> Obj:
    hw = gpu.hw
    attrs: Obj = {
        "type": {"string": GPU_TYPE if mig is None else MIG_TYPE},
        "uuid": {"string": gpu.uuid if mig is None else mig.uuid},
        "productName": {"string": gpu.name},
        "brand": {"string": str(hw.get("brand", "NVIDIA"))},
        "architecture": {"string": str(hw.get("architecture", ""))},
        "cudaComputeCapability": {"version": semver(str(hw.get("compute_capability", "0.0")))},
        "driverVersion": {"version": semver(host.driver_version or "0")},
        "cudaDriverVersion": {"version": semver(host.cuda_version)},
        "pcieBusID": {"string": str(hw.get("pci_bus_id", "")).lower()},
    }
    memory = int(hw.get("memory_mib", 0)) * MIB
    capacity: Obj = {}
    if mig is not None:
        attrs["profile"] = {"string": mig.name}
        attrs["parentUUID"] = {"string": gpu.uuid}
        memory = int(mig.profile.get("memory_mib", 0)) * MIB
        capacity["multiprocessors"] = {"value": str(mig.profile.get("sm_count", 0))}
    capacity["memory"] = {"value": binary_quantity(memory)}
    return {"name": device_name(gpu, mig), "attributes": attrs, "capacity": capacity}


@dataclass
class _Run:
    namespace: str
    pod: str
    container: str
    gates: frozenset[str] = frozenset()


def _same(devices: list[Obj], published: list[Obj]) -> bool:
    def key(items: list[Obj]) -> str:
        return json.dumps(
            [{k: d.get(k) or {} for k in ("name", "attributes", "capacity")} for d in items], sort_keys=True
        )

    return key(devices) == key(published)


class DraNode:
    """The DRA driver's kubelet plugin and the kubelet's DRA manager on one node."""

    def __init__(self, backend: LabGpuBackend) -> None:
        self.backend = backend
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}
        self._prepared: dict[
            tuple[str, str], tuple[tuple[str, str, str], list[tuple[Gpu, MigDevice | None]]]
        ] = {}
        self._claims: dict[
            tuple[str, str], list[ClaimRef]
        ] = {}  # (pod uid, container) -> its claims' devices

    # the plugin's container -------------------------------------------------------------------------------------

    def run(self, pod: Obj, container: Obj, argv: list[str], host: HostState, exp: Exposure) -> ContainerPlan:
        prog = argv[0].rsplit("/", 1)[-1] if argv else ""
        if prog == "compute-domain-controller":
            return ContainerPlan(
                logs=klog("I", "main.go:160", "Starting ComputeDomain controller"), exit_code=None
            )
        if prog != "gpu-kubelet-plugin":
            return ContainerPlan(logs=f"{prog}: not a program of the DRA driver's image\n", exit_code=127)
        if not exp.libs:
            message = "error creating driver: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"
            return ContainerPlan(logs=klog("E", "main.go:200", message), exit_code=1, run_seconds=0.5)
        if host.nvml_error:
            message = f"error creating driver: failed to initialize NVML: {host.nvml_error}"
            return ContainerPlan(logs=klog("E", "main.go:200", message), exit_code=1, run_seconds=0.5)
        with self._lock:
            gates = frozenset(feature_gates(container))
            self._runs[pod["metadata"].get("uid", "")] = _Run(
                pod["metadata"].get("namespace", ""), pod["metadata"]["name"], container["name"], gates
            )
        devices = host_devices(host)
        logs = klog("I", "driver.go:92", f"Starting DRA kubelet plugin for driver {DRIVER}")
        logs += klog(
            "I", "device_state.go:110", f"Enumerated {len(devices)} allocatable device(s): {sorted(devices)}"
        )
        logs += klog("I", "draplugin.go:490", "Registered with kubelet, publishing ResourceSlices")
        return ContainerPlan(logs=logs, exit_code=None)

    def live(self, store: Any) -> bool:
        with self._lock:
            return bool(self.backend._live(self._runs, store))  # type: ignore[arg-type]

    def gates(self, store: Any) -> set[str]:
        """The feature gates of the running plugin."""
        with self._lock:
            live = self.backend._live(self._runs, store)  # type: ignore[arg-type]
            out: set[str] = set()
            for uid in live:
                if uid in self._runs:
                    out |= self._runs[uid].gates
            return out

    # publication ------------------------------------------------------------------------------------------------

    @staticmethod
    def slice_name(node_name: str) -> str:
        return f"{node_name}-{DRIVER}"

    def sync(self, store: Any, node: Obj, host: HostState) -> None:
        """Publish, update or delete this node's ResourceSlice from the host's state now."""
        node_name = node["metadata"]["name"]
        name = self.slice_name(node_name)
        published = store.get(SLICES, "", name)
        if not self.live(store):
            if published is not None:
                store.delete(SLICES, "", name)
            return
        devices = [_device(host, g, m) for g, m in host_devices(host).values()]
        if published is not None:
            if _same(devices, (published.get("spec") or {}).get("devices") or []):
                return

            def change(obj: Obj) -> bool:
                spec = obj.setdefault("spec", {})
                if _same(devices, spec.get("devices") or []):
                    return False
                spec["devices"] = devices
                spec["pool"]["generation"] = int(spec["pool"].get("generation") or 0) + 1
                return True

            store.modify(SLICES, "", name, change)
            return
        store.create(
            SLICES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": name,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": node_name,
                            "uid": node["metadata"]["uid"],
                        }
                    ],
                },
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        )

    # the kubelet's side -----------------------------------------------------------------------------------------

    @staticmethod
    def _claim_names(pod: Obj) -> dict[str, str]:
        """Pod claim name -> ResourceClaim name (a template's claim is named in the pod's status)."""
        out = {}
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            claim = ref.get("resourceClaimName") or statuses.get(ref.get("name"))
            if claim:
                out[ref["name"]] = claim
        return out

    def _claim(self, store: Any, namespace: str, name: str) -> Obj | None:
        claim = store.get(CLAIMS, namespace, name)
        if claim is None or not (claim.get("status") or {}).get("allocation"):
            try:  # the scheduler's allocation may not have reached the mirror yet: ask the API server
                claim = store.api.request("GET", object_path(CLAIMS, namespace, name))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                return None
        return claim

    def prepare(
        self, pod: Obj, container: Obj, node_name: str, host: HostState
    ) -> Exposure | ContainerPlan | None:
        """The devices of the container's claims (None: it names no claim), or why it cannot start."""
        wanted = [c.get("name") for c in (container.get("resources") or {}).get("claims") or []]
        if not wanted:
            return None
        server = self.backend.server
        if server is None:
            return None
        store = server.store
        namespace = pod["metadata"].get("namespace", "")
        names = self._claim_names(pod)
        available = host_devices(host)
        chosen: list[tuple[Gpu, MigDevice | None]] = []
        held: list[ClaimRef] = []
        for ref in wanted:
            claim_name = names.get(ref)
            claim = self._claim(store, namespace, claim_name) if claim_name else None
            if claim is None:
                return self._refuse(
                    pod, f"claim {ref}: ResourceClaim {claim_name or '(not created yet)'} not found"
                )
            allocation = (claim.get("status") or {}).get("allocation")
            if not allocation:
                return self._refuse(pod, f"claim {namespace}/{claim_name}: not allocated")
            results = [
                r
                for r in (allocation.get("devices") or {}).get("results") or []
                if r.get("driver") == DRIVER and r.get("pool") == node_name
            ]
            if results and not self.live(store):
                return self._refuse(pod, f"DRA driver {DRIVER} is not registered")
            gates = self.gates(store) if results else set()
            for result in results:
                found = available.get(result.get("device", ""))
                if found is None:
                    return self._refuse(
                        pod,
                        f"prepare devices failed: error preparing devices for claim {namespace}/{claim_name}: "
                        f"requested device is not allocatable: {result.get('device')}",
                    )
                for params in self._configs(claim, allocation, result.get("request", "")):
                    problem = config_problem(params, found[1] is not None, gates)
                    if problem:
                        return self._refuse(
                            pod,
                            f"prepare devices failed: error applying config to device {result.get('device')} "
                            f"of claim {namespace}/{claim_name}: {problem}",
                        )
                if found not in chosen:
                    chosen.append(found)
                    mig = found[1]
                    held.append(
                        ClaimRef.of(namespace, str(claim_name), node_name, str(result.get("device")), mig)
                    )
        owner = (namespace, pod["metadata"]["name"], container["name"])
        with self._lock:
            self._prepared[(pod["metadata"].get("uid", ""), container["name"])] = (owner, chosen)
            self._claims[(pod["metadata"].get("uid", ""), container["name"])] = held
        # the plugin hands CDI devices of its own spec; containerd without CDI drops them
        return Exposure(host.nvml_present, chosen) if host.cdi_enabled else Exposure(False, [])

    @staticmethod
    def _configs(claim: Obj, allocation: Obj, request: str) -> list[Obj]:
        """This driver's opaque parameters that apply to ``request`` (class configs first, then the claim's)."""
        configs = (allocation.get("devices") or {}).get("config")
        if configs is None:  # as allocated by an older scheduler: the claim's own configs
            configs = ((claim.get("spec") or {}).get("devices") or {}).get("config") or []
        out = []
        for config in configs:
            opaque = config.get("opaque") or {}
            wanted = config.get("requests") or []
            if opaque.get("driver") == DRIVER and (
                not wanted or request in wanted or request.split("/")[0] in wanted
            ):
                out.append(opaque.get("parameters") or {})
        return out

    def _refuse(self, pod: Obj, why: str) -> ContainerPlan:
        message = f"Failed to prepare dynamic resources: {why}"
        self.backend.record(pod, "Warning", NOT_PREPARED, message)
        return ContainerPlan(exit_code=None, waiting=[(0.0, NOT_PREPARED, message)])

    def release(self, uid: str) -> None:
        with self._lock:
            for key in [k for k in self._prepared if k[0] == uid]:
                del self._prepared[key]
                self._claims.pop(key, None)
            self._runs.pop(uid, None)

    def owners(self) -> dict[str, tuple[str, str, str]]:
        """Device UUID -> the pod holding it through a claim (for dcgm-exporter's pod labels)."""
        with self._lock:
            out: dict[str, tuple[str, str, str]] = {}
            for owner, devices in self._prepared.values():
                for gpu, mig in devices:
                    out.setdefault(gpu.uuid if mig is None else mig.uuid, owner)
            return out

    def claims(self) -> dict[str, ClaimRef]:
        """Device UUID (the GPU's, or the MIG device's) -> the claim holding it (for dcgm-exporter's DRA labels)."""
        with self._lock:
            out: dict[str, ClaimRef] = {}
            for key, (_owner, devices) in self._prepared.items():
                refs = self._claims.get(key, [])
                for (gpu, mig), ref in zip(devices, refs, strict=True):
                    out.setdefault(gpu.uuid if mig is None else mig.uuid, ref)
            return out
