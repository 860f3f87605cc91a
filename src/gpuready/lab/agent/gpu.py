"""GPU behaviour of a node, derived from its host's real state: the device plugin, GFD, allocation, dcgm-exporter.

One `LabGpuBackend` per node (``Agent.set_backend``), reading a `HostView` (a lab host's files) or a
`VirtualGpuView` (a hardware dict) on every decision. What real components do, and when:

* The device plugin enumerates devices when its container starts and again on SIGHUP, which the config manager
  sends only when the node's ``nvidia.com/device-plugin.config`` label changes; so a ConfigMap edit alone takes
  effect at the plugin's next restart (``kubectl rollout restart``), a label change at once, as upstream.
  Device health is live (an XID fault marks the GPU unhealthy: counted in capacity, not in allocatable).
* While a plugin pod's container runs, the node's capacity and allocatable carry its resources. When it stops,
  the kubelet marks them unhealthy: allocatable 0 at once, capacity kept for the endpoint grace period (5 min in
  the kubelet's device manager), then 0 (the key stays, as the kubelet keeps removed device-plugin resources).
  A resource no plugin on this node ever advertised is left as the node registered it.
* GFD's labels are replaced as a set whenever they change; when GFD stops they stay, as NFD keeps publishing
  the features file GFD left on the host. GFD writes a file, not labels: node-feature-discovery carries them to
  the Node. The agent emulates NFD's effect, gated on NFD's own pods (``gpu_nfd``): the labels are applied only
  while an nfd-worker pod runs on this node and an nfd-master pod runs in the cluster; without them no GFD label
  appears, and labels already there stay unchanged (nfd-master's garbage collection is not emulated).
* Allocation: kubelet picks devices at admission (a resource no plugin here ever advertised gets no devices); time-sliced replicas spread over GPUs (``distributed``) and
  share their GPU's UUID; allocations are released when the pod finishes or goes away.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuready.lab import hardware as lab_hardware
from gpuready.nvidia.catalogue import lookup_model, mig_profiles, mig_slices

from .api import Event
from .events import Recorder
from .gpu_dra import DraNode
from .gpu_host import GpuView, HostState, HostView, VirtualGpuView
from .gpu_images import DRA_REPOS, GpuRuntime, klog, nvidia_image, plugin_start_logs
from .gpu_metrics import Owner, dcgm_scrape, dra_mapping
from .gpu_nfd import NfdPods
from .gpu_plugin import (
    CONFIG_LABEL,
    GFD_LABEL,
    Device,
    PluginConfig,
    PluginError,
    env_of,
    flag_of,
    gfd_labels,
    parse_config,
    plugin_devices,
    select_config,
)
from .loop import Loop
from .runtime import ContainerPlan, NodeBackend, ProxyResponse, normalize_image

if TYPE_CHECKING:
    from .agent import Agent

Obj = dict[str, Any]
PLUGIN_REPO = "nvcr.io/nvidia/k8s-device-plugin"
DCGM_REPO = "nvcr.io/nvidia/k8s/dcgm-exporter"
ENDPOINT_GRACE_S = 300.0  # kubelet devicemanager endpointStopGracePeriod


@dataclass
class _Run:
    """A running plugin or GFD container and the config it loaded."""

    namespace: str
    pod: str
    container: str
    config: PluginConfig
    label_seen: str | None
    devices: dict[str, list[Device]] = field(default_factory=dict)
    timestamp: int = 0


@dataclass
class _Alloc:
    owner: Owner
    devices: list[Device]
    cdi: bool = False  # the plugin answered with CDI device names (deviceListStrategy cdi-cri)


def _command(container: Obj) -> str:
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def _running(pod: Obj | None, container: str) -> bool:
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return "running" in (cs.get("state") or {})
    return False


def _limits(container: Obj) -> dict[str, int]:
    res = container.get("resources") or {}
    wants = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    out = {}
    for name, value in wants.items():
        if name.startswith("nvidia.com/"):
            try:
                out[name] = int(str(value))
            except ValueError:
                continue
    return {k: v for k, v in out.items() if v > 0}


class LabGpuBackend(NodeBackend):
    def __init__(self, view: GpuView, server: Agent | None = None, grace_s: float = ENDPOINT_GRACE_S) -> None:
        super().__init__(GpuRuntime(self))
        self.view = view
        self.server = server
        self.grace_s = grace_s
        self._lock = threading.RLock()
        self._plugins: dict[str, _Run] = {}
        self._gfds: dict[str, _Run] = {}
        self._allocs: dict[tuple[str, str], _Alloc] = {}
        self._managed: dict[str, list[Any]] = {}  # resource -> [capacity, stopped at (monotonic) or None]
        self._recorder: Recorder | None = None
        self._started = time.monotonic()
        self.dra = DraNode(self)  # the DRA driver's kubelet plugin and the kubelet's claim preparation
        self.stand_in: dict[str, str] | None = None  # attach_host's env: the tests' stand-in host (host_exec)
        self.nfd: NfdPods | None = (
            None  # the GPU loop's view of NFD's pods (attach); None: read from the store
        )

    # reads -------------------------------------------------------------------------------------------------------

    def host(self) -> HostState:
        return self.view.snapshot()

    def host_pid(self) -> int | None:
        """A process of the lab host behind this node (None for a virtual node or a host that is not running)."""
        live = self.view.live_root() if isinstance(self.view, HostView) else None
        return int(live.parts[2]) if live is not None else None

    def handler_of(self, pod: Obj, host: HostState) -> str:
        rc_name = (pod.get("spec") or {}).get("runtimeClassName")
        if not rc_name:
            return host.default_runtime
        rc = self.server.store.get("runtimeclasses.node.k8s.io", "", rc_name) if self.server else None
        return str((rc or {}).get("handler") or rc_name)

    def record(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        if self.server is None:
            return
        if self._recorder is None:
            self._recorder = Recorder(self.server.store)
        node = (pod.get("spec") or {}).get("nodeName", "")
        self._recorder.event(pod, type_, reason, message, "kubelet", node)

    def owners(self, dra: bool = True) -> dict[str, Owner]:
        """Device UUID -> the pod using it, like the kubelet's pod-resources API (first owner of a shared GPU);
        ``dra``: also the devices pods hold through ResourceClaims."""
        with self._lock:
            out: dict[str, Owner] = {}
            for alloc in self._allocs.values():
                for d in alloc.devices:
                    out.setdefault(d.uuid, alloc.owner)
            for uuid, owner in (self.dra.owners() if dra else {}).items():
                out.setdefault(uuid, owner)
            return out

    # config manager ------------------------------------------------------------------------------------------

    def _configmap(self, pod: Obj, volume_name: str) -> tuple[dict[str, str] | None, str]:
        for v in (pod.get("spec") or {}).get("volumes") or []:
            if v.get("name") == volume_name and "configMap" in v:
                ref = v["configMap"]
                ns = pod["metadata"].get("namespace", "")
                cm = self.server.store.get("configmaps", ns, ref.get("name", "")) if self.server else None
                if cm is None:
                    return None, ref.get("name", "")
                data = dict(cm.get("data") or {})
                if ref.get("items"):
                    data = {i["path"]: data[i["key"]] for i in ref["items"] if i.get("key") in data}
                return data, ref.get("name", "")
        return None, ""

    @staticmethod
    def _mount_of(container: Obj, path: str) -> tuple[str, str] | None:
        """(volume name, path inside that volume) for a file path in the container."""
        best = None
        for m in container.get("volumeMounts") or []:
            mount = m.get("mountPath", "").rstrip("/")
            inside = path == mount or path.startswith(mount + "/")
            if inside and (best is None or len(mount) > len(best[2])):
                best = (m.get("name", ""), path[len(mount) :].lstrip("/"), mount)
        return (best[0], best[1]) if best else None

    def _select(
        self, pod: Obj, manager: Obj, node: Obj | None, label: str | None = None
    ) -> tuple[str | None, dict[str, str], str | None]:
        """(config key, the ConfigMap's files, error) as the config-manager sidecar decides now (for `label`
        instead of the node's, where given)."""
        env = env_of(manager)
        label_key = flag_of(manager, "node-label") or env.get("NODE_LABEL") or CONFIG_LABEL
        srcdir = flag_of(manager, "config-file-srcdir") or env.get("CONFIG_FILE_SRCDIR", "")
        mount = self._mount_of(manager, srcdir.rstrip("/") + "/x")
        files, _ = self._configmap(pod, mount[0]) if mount else (None, "")
        if files is None:
            return (
                None,
                {},
                f"error getting list of configuration files: error reading directory: open {srcdir}: "
                "no such file or directory",
            )
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        fallbacks = (
            flag_of(manager, "fallback-strategies") or env.get("FALLBACK_STRATEGIES") or "named,single"
        )
        key, err = select_config(
            sorted(files),
            labels.get(label_key) if label is None else label,
            flag_of(manager, "default-config") or env.get("DEFAULT_CONFIG"),
            [s.strip() for s in fallbacks.split(",")],
        )
        return key, files, err

    def _manager_of(self, pod: Obj) -> Obj | None:
        return next((c for c in pod["spec"].get("containers") or [] if _command(c) == "config-manager"), None)

    def _label_now(self, pod: Obj, node: Obj | None) -> str | None:
        manager = self._manager_of(pod)
        if manager is None:
            return None
        key = flag_of(manager, "node-label") or env_of(manager).get("NODE_LABEL") or CONFIG_LABEL
        return (((node or {}).get("metadata") or {}).get("labels") or {}).get(key)

    def _config_for(self, pod: Obj, container: Obj, node: Obj | None) -> PluginConfig:
        """The config file a plugin/GFD container reads at start: straight from a ConfigMap volume, or the file
        the config-manager sidecar links into a shared volume."""
        path = flag_of(container, "config-file") or env_of(container).get("CONFIG_FILE")
        if not path:
            return parse_config(None, "", container)
        missing = PluginError(
            f"unable to load config: unable to finalize config: unable to parse config file: "
            f"error opening config file: open {path}: no such file or directory"
        )
        mount = self._mount_of(container, path)
        if mount is None:
            raise missing
        files, _ = self._configmap(pod, mount[0])
        if files is not None:
            if mount[1] not in files:
                raise missing
            return parse_config(files[mount[1]], mount[1], container)
        manager = self._manager_of(pod)
        if manager is None:
            raise missing
        key, files, err = self._select(pod, manager, node)
        if err or key is None:
            raise missing
        return parse_config(files.get(key) if key else None, key, container)

    def run_config_manager(self, pod: Obj, container: Obj, node: Obj | None) -> ContainerPlan:
        """config-manager's loop (k8s-device-plugin ``cmd/config-manager/main.go`` ``start``): its first read of
        the label is "" (``SyncableConfig.Get`` returns before the informer has listed the Node), so it first
        selects the default config, then the label's; an error in either exits, and the pod crash-loops."""
        label_key = env_of(container).get("NODE_LABEL") or CONFIG_LABEL
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        logs = ""
        for label in ("", labels.get(label_key, "")):
            logs += klog("I", "main.go:218", f"Waiting for change to '{label_key}' label")
            logs += klog("I", "main.go:220", f"Label change detected: {label_key}={label}")
            key, _, err = self._select(pod, container, node, label=label)
            if err:
                return ContainerPlan(logs=logs + klog("E", "main.go:180", err), exit_code=1, run_seconds=0.5)
            logs += klog("I", "main.go:262", f"Updating to config: {key}")
            logs += klog("I", "main.go:276", f"Successfully updated to config: {key}")
        logs += klog("I", "main.go:218", f"Waiting for change to '{label_key}' label")
        return ContainerPlan(logs=logs, exit_code=None)

    # plugin and GFD starts ---------------------------------------------------------------------------------------

    def start_plugin(self, pod: Obj, container: Obj, node: Obj | None, host: HostState) -> str:
        config = self._config_for(pod, container, node)
        if host.nvml_error:
            raise PluginError(
                f"error starting plugins: error creating plugin manager: unable to create plugin "
                f"manager: nvml init failed: {host.nvml_error}"
            )
        devices = plugin_devices(config, host)
        run = _Run(
            pod["metadata"].get("namespace", ""),
            pod["metadata"]["name"],
            container["name"],
            config,
            self._label_now(pod, node),
            devices,
        )
        with self._lock:
            self._plugins[pod["metadata"].get("uid", "")] = run
        shown = {
            "version": "v1",
            "flags": {"migStrategy": config.mig_strategy, "failOnInitError": config.fail_on_init_error},
            "sharing": config.raw.get("sharing") or {},
        }
        return plugin_start_logs(shown, {r: len(d) for r, d in devices.items() if d})

    def start_gfd(self, pod: Obj, container: Obj, node: Obj | None, host: HostState) -> str:
        config = self._config_for(pod, container, node)
        if host.nvml_error:
            raise PluginError(f"error creating NVML labeler: failed to initialize NVML: {host.nvml_error}")
        run = _Run(
            pod["metadata"].get("namespace", ""),
            pod["metadata"]["name"],
            container["name"],
            config,
            self._label_now(pod, node),
            timestamp=int(time.time()),
        )
        with self._lock:
            self._gfds[pod["metadata"].get("uid", "")] = run
        return (
            klog("I", "main.go:163", "Loading configuration.")
            + klog(
                "I",
                "main.go:195",
                f"\nRunning with config:\n{json.dumps({'version': 'v1', 'flags': {'migStrategy': config.mig_strategy}}, indent=2)}",
            )
            + klog("I", "main.go:243", "Start running")
            + klog("I", "main.go:257", "Creating Labels")
            + klog(
                "I",
                "output.go:82",
                "Writing labels to output file /etc/kubernetes/node-feature-discovery/features.d/gfd",
            )
            + klog("I", "main.go:270", "Sleeping for 60000000000")
        )

    # allocation ----------------------------------------------------------------------------------------------

    def _advertising(self, resource: str) -> tuple[_Run, list[Device]] | None:
        for run in self._plugins.values():
            if resource in run.devices:
                return run, run.devices[resource]
        return None

    def allocate(self, pod: Obj, container: Obj) -> list[str] | ContainerPlan | None:
        """Device UUIDs for NVIDIA_VISIBLE_DEVICES, or the admission failure. None: the kubelet allocates nothing,
        because no GPU was requested or no device plugin here ever served the resources requested (capacity a
        virtual profile registered with): the device manager then leaves the container alone, so the image's own
        ``NVIDIA_VISIBLE_DEVICES=all`` applies, as on a node whose extended resource no plugin manages."""
        wants = _limits(container)
        if not wants:
            return None
        key = (pod["metadata"].get("uid", ""), container["name"])
        host = self.host()
        bad = {g.index for g in host.gpus if g.unhealthy or g.off_bus}
        with self._lock:
            if key in self._allocs:
                return [d.uuid for d in self._allocs[key].devices]
            taken = {d.id for a in self._allocs.values() for d in a.devices}
            chosen: list[Device] = []
            plugin_managed = False
            cdi = False
            for resource, count in sorted(wants.items()):
                found = self._advertising(resource)
                if found is None and resource not in self._managed:
                    continue  # capacity the node registered with (a virtual profile), not a plugin's: no devices
                plugin_managed = True
                cdi = cdi or bool(found and found[0].config.cdi_cri)
                devices = found[1] if found else []
                shared = any("::" in d.id for d in devices)
                if found and shared and count > 1 and found[0].config.sharing.fail_requests_greater_than_one:
                    return self._admission_error(
                        pod,
                        f"Allocate failed due to rpc error: code = Unknown desc = "
                        f"request for '{resource}: {count}' too large: maximum request size "
                        "for shared resources is 1, which is unexpected",
                    )
                free = [d for d in devices if d.id not in taken and d.gpu.index not in bad]
                if len(free) < count:
                    return self._admission_error(
                        pod,
                        f"Allocate failed due to requested number of devices "
                        f"unavailable for {resource}. Requested: {count}, Available: "
                        f"{len(free)}, which is unexpected",
                    )
                for _ in range(count):
                    if shared:  # distributed: the GPU with the fewest replicas in use
                        use: dict[str, int] = {}
                        for d in devices:
                            use.setdefault(d.uuid, 0)
                            if d.id in taken:
                                use[d.uuid] += 1
                        free.sort(key=lambda d: (use[d.uuid], d.gpu.index, d.id))
                    pick = free.pop(0)
                    taken.add(pick.id)
                    chosen.append(pick)
            if not plugin_managed:
                return None
            owner = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"], container["name"])
            self._allocs[key] = _Alloc(owner, chosen, cdi)
        return list(dict.fromkeys(d.uuid for d in chosen))

    def cdi_devices(self, pod: Obj, container: Obj) -> list[str] | None:
        """The CDI device names the plugin gave this container (kind nvidia.com/gpu, by UUID: the names of the
        toolkit's spec that the GPU Operator's CDI mode uses), or None when it handed devices by envvar."""
        with self._lock:
            alloc = self._allocs.get((pod["metadata"].get("uid", ""), container["name"]))
        if alloc is None or not alloc.cdi:
            return None
        return [f"nvidia.com/gpu={uuid}" for uuid in dict.fromkeys(d.uuid for d in alloc.devices)]

    def _admission_error(self, pod: Obj, message: str) -> ContainerPlan:
        self.record(pod, "Warning", "UnexpectedAdmissionError", message)
        return ContainerPlan(exit_code=128, reason="UnexpectedAdmissionError", message=message)

    def pod_stopped(self, pod: Obj) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        with self._lock:
            for key in [k for k in self._allocs if k[0] == uid]:
                del self._allocs[key]
            self._plugins.pop(uid, None)
            self._gfds.pop(uid, None)
        self.dra.release(uid)

    # node sync -----------------------------------------------------------------------------------------------

    def _live(self, runs: dict[str, _Run], store: Any) -> dict[str, _Run]:
        live = {}
        for uid, run in list(runs.items()):
            pod = store.get("pods", run.namespace, run.pod)
            if pod is None or pod["metadata"].get("uid") != uid:
                runs.pop(uid, None)
            elif _running(pod, run.container) and not pod["metadata"].get("deletionTimestamp"):
                live[uid] = run
        return live

    def _relabel(self, run: _Run, uid: str, node: Obj, host: HostState, plugin: bool) -> None:
        """The config manager saw the node label change: it relinks the config and SIGHUPs the process."""
        pod = self.server.store.get("pods", run.namespace, run.pod) if self.server else None
        if pod is None:
            return
        now = self._label_now(pod, node)
        if now == run.label_seen:
            return
        run.label_seen = now
        container = next(c for c in pod["spec"]["containers"] if c["name"] == run.container)
        manager = self._manager_of(pod)
        if manager is None:
            return
        key, files, err = self._select(pod, manager, node)
        if err or key is None or key == run.config.source:
            return  # the config manager logs the error and exits; the process keeps its config
        try:
            run.config = parse_config(files.get(key) if key else None, key, container)
            if plugin:
                run.devices = plugin_devices(run.config, host)
            else:
                run.timestamp = int(time.time())
        except PluginError:
            (self._plugins if plugin else self._gfds).pop(uid, None)

    def needs_polling(self) -> bool:
        return isinstance(self.view, HostView) or any(
            v[1] is not None and v[0] for v in self._managed.values()
        )

    def sync_node(self, server: Any, node_name: str) -> None:
        self.server = self.server or server
        store = server.store
        node = store.get("nodes", "", node_name)
        if node is None:
            return
        host = self.host()
        now = time.monotonic()
        with self._lock:
            for key, alloc in list(self._allocs.items()):
                ns, name, _ = alloc.owner
                pod = store.get("pods", ns, name)
                if (
                    pod is None
                    or pod["metadata"].get("uid") != key[0]
                    or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                ):
                    del self._allocs[key]
            plugins = self._live(self._plugins, store)
            gfds = self._live(self._gfds, store)
            for uid, run in plugins.items():
                self._relabel(run, uid, node, host, plugin=True)
            for uid, run in gfds.items():
                self._relabel(run, uid, node, host, plugin=False)
            bad = {g.index for g in host.gpus if g.unhealthy or g.off_bus}
            advertised: dict[str, tuple[int, int]] = {}
            for run in plugins.values():
                for resource, devices in run.devices.items():
                    if devices:
                        advertised[resource] = (sum(d.gpu.index not in bad for d in devices), len(devices))
            for resource, (_, total) in advertised.items():
                self._managed[resource] = [total, None]
            wanted: dict[str, tuple[str, str]] = {}
            for resource, entry in self._managed.items():
                if resource in advertised:
                    healthy, total = advertised[resource]
                    wanted[resource] = (str(total), str(healthy))
                    continue
                if entry[1] is None:
                    entry[1] = now  # the plugin stopped: its devices turn unhealthy at once
                if now - entry[1] >= self.grace_s:
                    entry[0] = 0  # endpoint grace period over: the kubelet reports capacity 0
                wanted[resource] = (str(entry[0]), "0")
            gfd = next(iter(gfds.values()), None)
            labels = gfd_labels(gfd.config, host, gfd.timestamp) if gfd else None
        if labels is not None and not self.nfd_publishes(store, node_name):
            labels = None  # GFD's file is on the host, but no NFD carries it to the Node
        self._write_node(store, node_name, wanted, labels)
        self.dra.sync(store, node, host)

    def nfd_publishes(self, store: Any, node_name: str) -> bool:
        """Whether node-feature-discovery would turn GFD's features file into this node's labels now."""
        nfd = self.nfd if self.nfd is not None else NfdPods.from_pods(store.list("pods")[0])
        return nfd.publishes(node_name)

    @staticmethod
    def _write_node(store: Any, name: str, wanted: dict[str, tuple[str, str]], labels: Obj | None) -> None:
        def change(obj: Obj) -> bool:
            changed = False
            status = obj.setdefault("status", {})
            cap, alloc = status.setdefault("capacity", {}), status.setdefault("allocatable", {})
            for resource, (c, a) in wanted.items():
                if cap.get(resource) != c or alloc.get(resource) != a:
                    cap[resource], alloc[resource] = c, a
                    changed = True
            if labels is not None:
                current = obj["metadata"].setdefault("labels", {})
                for k in [k for k in current if GFD_LABEL.match(k) and k not in labels]:
                    del current[k]
                    changed = True
                for k, v in labels.items():
                    if current.get(k) != v:
                        current[k] = v
                        changed = True
            return changed

        store.modify("nodes", "", name, change)

    # dcgm-exporter -------------------------------------------------------------------------------------------

    def proxy(
        self, pod: Obj, port: str, method: str, path: str, query: str, body: bytes
    ) -> ProxyResponse | None:
        for c in (pod.get("spec") or {}).get("containers") or []:
            if nvidia_image(c.get("image", "")) is None or normalize_image(c["image"])[0] != DCGM_REPO:
                continue
            listen = env_of(c).get("DCGM_EXPORTER_LISTEN", ":9400").rsplit(":", 1)[-1]
            if port != listen or not _running(pod, c["name"]):
                continue
            if path == "/health":
                return ProxyResponse(200, b"OK")
            if path == "/metrics":
                dra = dra_mapping(pod)
                claims = self.dra.claims() if dra else None
                text = dcgm_scrape(self.host(), pod, self.owners(dra), self._started, c["image"], claims)
                return ProxyResponse(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
            return ProxyResponse(404, b"404 page not found\n")
        return None


# wiring ---------------------------------------------------------------------------------------------------------


class GpuSync(Loop):
    """Re-syncs GPU nodes on events the kubelet loop does not report (plugin/GFD container crashes and restarts,
    NFD's pods starting and stopping, node label and status edits) and polls lab hosts, whose files change outside
    the API (faults, MIG, deploys)."""

    keys = ("nodes", "pods")
    poll_s = 1.0  # the shortest time between two polls of the lab hosts
    # at most this share of the loop's time goes to polling the hosts (1000 stand-in hosts: one poll every ~8 s)
    poll_share = 0.2

    def __init__(self, server: Agent) -> None:
        super().__init__(server)
        self.backends: dict[str, LabGpuBackend] = {}
        self._dirty: set[str] = set()
        self._last_poll = 0.0
        self._poll_every = self.poll_s
        self.nfd = NfdPods()  # every pod event passes here: NFD's pods are known without listing them

    def observe(self, ev: Event) -> None:
        if ev.key == "nodes":
            name = ev.obj["metadata"]["name"]
            if name in self.backends and (
                ev.old is None
                or ev.obj["metadata"].get("labels") != ev.old["metadata"].get("labels")
                or ev.obj.get("status", {}).get("allocatable") != ev.old.get("status", {}).get("allocatable")
            ):
                self._dirty.add(name)
            return
        master, worker_node = self.nfd.observe(ev.obj, deleted=ev.type == "DELETED")
        if master:  # GFD's labels reach every GPU node, or none, through the one master
            self._dirty.update(self.backends)
        if worker_node in self.backends:
            self._dirty.add(worker_node)
        node = (ev.obj.get("spec") or {}).get("nodeName")
        if node in self.backends and any(
            normalize_image(c.get("image", ""))[0] in (PLUGIN_REPO, *DRA_REPOS)
            for c in ev.obj["spec"].get("containers") or []
        ):
            self._dirty.add(node)

    def reconcile(self) -> None:
        now = time.monotonic()
        polling = now - self._last_poll >= self._poll_every
        if polling:
            self._last_poll = now
            self._dirty.update(n for n, b in list(self.backends.items()) if b.needs_polling())
        dirty, self._dirty = self._dirty, set()
        for name in sorted(dirty):
            backend = self.backends.get(name)
            if backend is not None:
                backend.sync_node(self.server, name)
        # a poll of many hosts takes long: space the polls so they stay a share of the loop's time
        if polling:
            self._poll_every = max(self.poll_s, (time.monotonic() - now) / self.poll_share)


def attach(
    server: Agent,
    sync: GpuSync,
    node_name: str,
    view: GpuView,
    grace_s: float = ENDPOINT_GRACE_S,
    stand_in: dict[str, str] | None = None,
) -> LabGpuBackend:
    """Give `node_name` GPU behaviour from `view` (the node may register later) and keep it synced; `stand_in`:
    the environment of a stand-in host on this machine that containers looking at their host run in (host_exec)."""
    backend = LabGpuBackend(view, server, grace_s)
    backend.stand_in = stand_in
    backend.nfd = sync.nfd
    server.set_backend(node_name, backend)
    sync.backends[node_name] = backend
    if server.store.get("nodes", "", node_name) is not None:
        backend.sync_node(server, node_name)
    return backend


# Virtual node profiles (apiserver.virtual.PROFILES) -> (lab hardware profile, model the profile names).
VIRTUAL_HARDWARE = {
    "dgx-h100": ("h100-sxm-8", "NVIDIA H100 80GB HBM3"),
    "a100-pcie-4": ("a100-80gb-4", "NVIDIA A100-PCIE-40GB"),
}


def virtual_hardware(profile: str, index: int) -> dict[str, Any] | None:
    """The hardware behind a virtual node of `profile` (None for CPU-only profiles)."""
    if profile not in VIRTUAL_HARDWARE:
        return None
    base, model_name = VIRTUAL_HARDWARE[profile]
    hw = lab_hardware.make_hardware(base, index)
    model = lookup_model(model_name)
    for g in hw["gpus"]:
        if g["name"] != model.name:
            compute, memory = mig_slices(model.name) if model.mig_capable else (0, 0)
            table = [
                {**p.__dict__, "placements": list(p.placements)} for p in mig_profiles(model.name).values()
            ]
            g.update(
                name=model.name,
                memory_mib=model.memory_mib,
                sm_count=model.sm_count,
                family=model.family,
                compute_capability="{}.{}".format(*model.compute_capability),
                mig_capable=model.mig_capable,
                mig_profiles=table if model.mig_capable else [],
                mig_compute_slices=compute,
                mig_memory_slices=memory,
                nvlink_links=model.nvlink_links,
            )
    return hw


def attach_virtual(server: Agent, sync: GpuSync, names: list[str], profile: str) -> list[LabGpuBackend]:
    out = []
    for name in names:
        hw = virtual_hardware(profile, int(name.rsplit("-", 1)[-1]) if name[-1].isdigit() else 0)
        if hw is not None:
            out.append(attach(server, sync, name, VirtualGpuView(name, hw)))
    return out
