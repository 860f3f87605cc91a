"""Reading an inventory: load it as the pyinfra CLI does, check every host's data against the knob registry and
the rules across knobs, and build the :class:`~gpuready.spec.model.Fleet`.

Validation happens before any connection is opened and reports every problem at once (a problem repeated over
hosts or GPUs is one line), so a user fixes an inventory in one pass.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuready.nvidia import catalogue, cdi
from gpuready.spec import knobs, kubesyntax
from gpuready.spec.model import (
    DIAG_FLOOR_KEYS,
    IMAGE_KNOBS,
    SHARED_BY_TIME,
    Diag,
    Fleet,
    Images,
    Join,
    NodeSpec,
    Sharing,
    SharingMode,
    SpecError,
    UpgradePolicy,
    Versions,
)

_DRIVER_VERSION = re.compile(r"^(\d{3})\.(\d{1,3})(\.\d{1,3})?$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def load_fleet(inventory_path: str | os.PathLike[str], override_data: dict[str, Any] | None = None) -> Fleet:
    """Load an inventory (and its ``group_data``) exactly as the pyinfra CLI does, and validate every node.

    Raises :class:`SpecError` listing every problem; opens no connection.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state

    make_inventory = _pyinfra_cli("inventory").make_inventory
    path = str(inventory_path)
    if not Path(path).is_file():
        raise SpecError(path, [f"inventory file {path} does not exist"])
    try:
        # pyinfra executes inventory and group_data files under a State; give it a throwaway one
        with ctx_state.use(State(check_for_changes=False)):
            inventory = make_inventory(path, override_data=override_data)
    except (
        Exception
    ) as exc:  # an inventory is user Python: report its own error, not a traceback into pyinfra
        cause = getattr(exc, "exception", exc)  # pyinfra wraps errors of executed files
        where = getattr(exc, "filename", path)
        raise SpecError(path, [f"cannot load {where}: {type(cause).__name__}: {cause}"]) from exc
    return fleet_from_inventory(inventory, path)


def _pyinfra_cli(module: str) -> Any:
    """A module of pyinfra's CLI package, imported without its side effect.

    ``pyinfra_cli/__init__.py`` calls ``gevent.monkey.patch_all()``. Inside pytest (the conformance suite) or any
    process that already uses ssl and threads (the Kubernetes client), patching that late breaks them (recursion in
    ssl). Only the loader and the argument parser are needed here, so the patch is skipped while the package is
    first imported.
    """
    import importlib
    import sys

    if "pyinfra_cli" not in sys.modules:
        from gevent import monkey

        patch_all = monkey.patch_all
        monkey.patch_all = lambda *args, **kwargs: None
        try:
            import pyinfra_cli  # noqa: F401
        finally:
            monkey.patch_all = patch_all
    return importlib.import_module(f"pyinfra_cli.{module}")


def parse_data_overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs parsed exactly as pyinfra's ``--data`` parses them, so both see the same values."""
    parse = _pyinfra_cli("util").parse_cli_arg
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--data {pair!r}: expected KEY=VALUE")
        out[key] = parse(value)
    return out


def fleet_from_inventory(inventory: Any, inventory_path: str) -> Fleet:
    """Validate an already loaded pyinfra ``Inventory`` (what a running deploy has) into a :class:`Fleet`."""
    problems: list[Problem] = []
    nodes: dict[str, NodeSpec] = {}
    readers = []
    for host in inventory:
        reader = _HostReader(inventory_path, inventory, host)
        node = reader.node()
        problems.extend(reader.problems)
        readers.append(reader)
        if node is not None:
            nodes[host.name] = node
    problems.extend(_fleet_wide_problems(readers))
    if not readers:
        problems.append(Problem(inventory_path, "", "", None, "the inventory has no hosts"))
    if problems:
        raise SpecError(inventory_path, group_problems(problems))
    return Fleet(inventory=inventory_path, nodes=nodes)


@dataclass(frozen=True)
class Problem:
    """One bad value: the file to edit, the host, the knob, its value and what is allowed."""

    file: str
    host: str
    key: str
    value: Any
    allowed: str


def group_problems(problems: list[Problem]) -> list[str]:
    """One line per distinct (file, knob, value, reason), naming every host it applies to: a bad layout on 100
    hosts is one line, not 100."""
    hosts: dict[tuple[str, str, str, str], list[str]] = {}
    for p in problems:
        hosts.setdefault((p.file, p.key, repr(p.value), p.allowed), [])
        if p.host and p.host not in hosts[(p.file, p.key, repr(p.value), p.allowed)]:
            hosts[(p.file, p.key, repr(p.value), p.allowed)].append(p.host)
    lines = []
    for (file, key, value, allowed), names in hosts.items():
        if not key:
            lines.append(f"{file}: {allowed}")
            continue
        who = (
            f"host {names[0]}" if len(names) == 1 else f"hosts {', '.join(names)}" if names else "every host"
        )
        lines.append(f"{file}: {who}: {key} = {value}: {allowed}")
    return lines


def _fleet_wide_problems(readers: list[_HostReader]) -> list[Problem]:
    """Fleet-wide knobs (cluster objects, the rolling upgrade) set for one host, or different across hosts."""
    out = []
    for knob in knobs.KNOBS.values():
        if not knob.fleet_wide:
            continue
        values: dict[str, list[str]] = {}
        for r in readers:
            if knob.name in r.inventory.get_host_data(r.host.name):
                out.append(Problem(r.where(knob.name), r.host.name, knob.name, r.data[knob.name],
                                   "is fleet-wide: set it in group_data/all.py, a group of every host or --data, "
                                   "not for one host"))  # fmt: skip
            values.setdefault(repr(r.get(knob.name)), []).append(r.host.name)
        if len(values) > 1:
            shown = "; ".join(f"{v} on {', '.join(names)}" for v, names in values.items())
            out.append(Problem(readers[0].where(knob.name), "", knob.name, "(differs)",
                               f"is fleet-wide, one value for every host, but the hosts disagree: {shown}"))  # fmt: skip
    return out


def _ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _close_knob(key: str) -> str | None:
    """The declared knob a key is most likely a typo of, or None (other data, e.g. ssh_* or a user's own)."""
    import difflib

    if key in knobs.KNOBS or key.startswith("_"):
        return None
    found = difflib.get_close_matches(key, knobs.KNOBS, n=1, cutoff=0.85)
    return found[0] if found else None


class _HostReader:
    """Reads one host's data, collecting problems instead of stopping at the first."""

    def __init__(self, inventory_path: str, inventory: Any, host: Any):
        self.inventory_path = inventory_path
        self.inventory = inventory
        self.host = host
        self.data: dict[str, Any] = host.data.dict()
        self.problems: list[Problem] = []
        self.settings: dict[str, Any] = {}

    def where(self, key: str) -> str:
        """The file a value comes from, so a user knows what to edit."""
        if key in self.inventory.get_override_data():
            return "--data"
        if key in self.inventory.get_host_data(self.host.name) or any(
            key in self.inventory.get_group_data(g) for g in self.host.groups if g != "all"
        ):
            return self.inventory_path
        return str(Path(self.inventory_path).parent / "group_data" / "all.py")

    def bad(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(Problem(self.where(key), self.host.name, key, value, allowed))

    def get(self, key: str, default: Any = None) -> Any:
        """The host's value, else the knob's declared default (so no group_data file is needed)."""
        knob = knobs.KNOBS.get(key)
        if knob is not None and knob.default is not knobs.REQUIRED:
            default = knob.default
        return self.data.get(key, default)

    def checked(self) -> dict[str, Any]:
        """Every declared knob with its value; each with a one-value check is checked (the default stands in for a
        bad one, which is reported). Keys that look like a misspelt knob are reported too."""
        out = {}
        for knob in knobs.KNOBS.values():
            value = self.get(knob.name)
            problem = knob.check(value) if knob.check else None
            if problem:
                self.bad(knob.name, value, problem)
                value = knob.default
            out[knob.name] = value
        self.settings = out
        for key in self.data:
            if close := _close_knob(key):
                self.bad(key, self.data[key], f"is not a gpuready knob: did you mean {close}?")
        return out

    def integer(self, key: str, default: int | None, minimum: int) -> int | None:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.bad(key, value, f"must be an integer >= {minimum}")
            return None
        return value

    def node(self) -> NodeSpec | None:
        settings = self.checked()
        model_name = self.get("gpu_model")
        count = self.integer("gpu_count", None, 1)
        model = None
        if not isinstance(model_name, str) or not model_name:
            self.bad(
                "gpu_model", model_name, "must name the GPU model as nvidia-smi prints it, e.g. 'NVIDIA L4'"
            )
            model_name = ""
        else:
            try:
                model = catalogue.lookup_model(model_name)
                model_name = model.name
            except KeyError as exc:
                if self.get("gpu_memory_mib") is None or self.get("gpu_sharing") == "mig":
                    self.bad(
                        "gpu_model",
                        model_name,
                        f"unknown GPU model ({exc.args[0] if exc.args else exc}); "
                        "give gpu_memory_mib for a model the catalogue does not know (MIG needs a known model)",
                    )
        memory = model.memory_mib if model else self.get("gpu_memory_mib")
        sharing = self.sharing(model, count or 0)
        versions = self.versions()
        join = self.join_settings()
        labels = self.labels()
        taints = self.taints()
        repos = {key: settings[key] for key, knob in knobs.KNOBS.items() if knob.section == "repos"}
        nvswitch = settings["nvswitch"]
        upgrade = self.upgrade_policy(settings)
        diag = self.diag_settings()
        images = self.images(settings)
        self.dra_rules(settings, sharing, versions)
        if self.problems or count is None or sharing is None or versions is None or join is None:
            return None
        return NodeSpec(
            name=self.host.name,
            gpu_model=model_name,
            gpu_count=count,
            gpu_memory_mib=memory,
            nvswitch=nvswitch,
            sharing=sharing,
            versions=versions,
            join=join,
            labels=labels,
            taints=taints,
            repos=repos,
            upgrade=upgrade,
            diag=diag,
            images=images,
            knobs=settings,
            connection={k: v for k, v in self.data.items() if k.startswith(("ssh_", "_"))},
        )

    def dra_rules(self, settings: dict[str, Any], sharing: Sharing | None, versions: Versions | None) -> None:
        """gpu_allocation = "dra": the DRA driver hands devices through CDI, shares a GPU through a config on the
        claim (not the device plugin's sharing knobs), and resource.k8s.io/v1 needs Kubernetes >= 1.34."""
        if settings["gpu_allocation"] != "dra":
            return
        if sharing is not None and sharing.mode in (SharingMode.TIME_SLICING, SharingMode.MPS):
            self.bad("gpu_sharing", sharing.mode, 'with gpu_allocation = "dra" must be "none" or "mig" (DRA '
                     "shares a GPU through a GpuConfig on the ResourceClaim, not the device plugin's config)")  # fmt: skip
        if sharing is not None and sharing.mig_replicas > 1:
            self.bad("mig_sharing", settings["mig_sharing"], 'with gpu_allocation = "dra" must be "none"')
        if settings["nvidia_cdi"] is not True:
            self.bad("nvidia_cdi", settings["nvidia_cdi"], 'gpu_allocation = "dra" needs CDI mode (True): the DRA '
                     "driver hands its devices to containerd as CDI devices")  # fmt: skip
        if versions is not None and tuple(int(x) for x in versions.kubernetes.split(".")[:2]) < (1, 34):
            self.bad("kubernetes_version", versions.kubernetes, 'gpu_allocation = "dra" needs Kubernetes >= '
                     "1.34 (resource.k8s.io/v1)")  # fmt: skip

    def images(self, settings: dict[str, Any]) -> Images:
        """The image knobs (each already checked as an image reference); gfd_image None is the device plugin's."""
        values = {attr: settings[key] for key, attr in IMAGE_KNOBS.items()}
        values["gfd"] = values["gfd"] or values["device_plugin"]
        return Images(**values)

    def diag_settings(self) -> Diag:
        level = self.get("diag_dcgm_level", 1)
        if level not in (1, 2, 3) or isinstance(level, bool):
            self.bad(
                "diag_dcgm_level",
                level,
                "must be 1, 2 or 3 (dcgmi diag -r: 1 seconds, 2 minutes, 3 tens of minutes)",
            )
            level = 1
        floors = self.get("diag_bandwidth_floors", {})
        if not isinstance(floors, dict):
            self.bad(
                "diag_bandwidth_floors",
                floors,
                f"must be a dict with keys among {', '.join(DIAG_FLOOR_KEYS)}",
            )
            floors = {}
        for key, value in floors.items():
            if key not in DIAG_FLOOR_KEYS:
                self.bad(
                    "diag_bandwidth_floors",
                    floors,
                    f"unknown key {key!r}: allowed {', '.join(DIAG_FLOOR_KEYS)}",
                )
            elif isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                self.bad(
                    "diag_bandwidth_floors", floors, f"{key} must be a number of GB/s > 0, not {value!r}"
                )
        return Diag(dcgm_level=level, floors={k: float(v) for k, v in floors.items() if k in DIAG_FLOOR_KEYS})

    def upgrade_policy(self, settings: dict[str, Any]) -> UpgradePolicy:
        batch, most = settings["upgrade_batch_size"], settings["upgrade_max_unavailable"]
        if batch > most:
            self.bad("upgrade_batch_size", batch, f"cannot exceed upgrade_max_unavailable = {most}: a batch is out "
                     "of service all at once")  # fmt: skip
        return UpgradePolicy(
            batch_size=batch,
            max_unavailable=most,
            drain_gpu_pods_only=settings["drain_gpu_pods_only"],
            drain_force=settings["drain_force"],
            drain_timeout=settings["drain_timeout"],
            node_ready_timeout=settings["node_ready_timeout"],
        )

    def sharing(self, model: catalogue.GpuModel | None, count: int) -> Sharing | None:
        mode = SharingMode(self.settings["gpu_sharing"])
        rename = self.settings["sharing_rename"]
        fail_gt1 = self.settings["sharing_fail_requests_greater_than_one"]
        if mode in SHARED_BY_TIME:
            replicas = self.get("sharing_replicas")
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
                self.bad(
                    "sharing_replicas",
                    replicas,
                    f"{mode} needs an integer >= 2 (the device plugin rejects 1)",
                )
                return None
            return Sharing(
                mode=mode,
                replicas=replicas,
                rename=rename,
                fail_requests_greater_than_one=fail_gt1 or mode == SharingMode.MPS,
            )
        if mode == SharingMode.NONE:
            return Sharing()
        # MIG
        strategy = self.settings["mig_strategy"]
        mig_sharing = self.settings["mig_sharing"]
        mig_replicas = 1
        if mig_sharing == "time-slicing":
            mig_replicas = self.get("mig_sharing_replicas")
            if isinstance(mig_replicas, bool) or not isinstance(mig_replicas, int) or mig_replicas < 2:
                self.bad("mig_sharing_replicas", mig_replicas, "time-slicing needs an integer >= 2")
                return None
        if model is None:
            return None  # already reported: MIG needs a known model
        if not model.mig_capable:
            self.bad(
                "gpu_sharing", "mig", f"{model.name} does not support MIG; use none, time-slicing or mps"
            )
            return None
        layout = self.mig_layout(model, count, strategy)
        if layout is None:
            return None
        return Sharing(
            mode=SharingMode.MIG,
            rename=rename,
            fail_requests_greater_than_one=fail_gt1,
            mig_strategy=strategy,
            mig_layout=layout,
            mig_replicas=mig_replicas,
        )

    def mig_layout(
        self, model: catalogue.GpuModel, count: int, strategy: str
    ) -> tuple[tuple[str, ...] | None, ...] | None:
        raw = self.get("mig_layout")
        per_gpu: list[Any]
        if isinstance(raw, (list, tuple)) and all(isinstance(p, str) for p in raw):
            per_gpu = [tuple(raw)] * count
        elif isinstance(raw, Mapping):
            bad_keys = [k for k in raw if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count]
            if bad_keys:
                self.bad("mig_layout", raw, f"GPU indexes {bad_keys} are not in 0..{count - 1}")
                return None
            per_gpu = [tuple(raw[i]) if i in raw else None for i in range(count)]
        else:
            self.bad(
                "mig_layout",
                raw,
                "gpu_sharing = 'mig' needs a list of MIG profiles for every GPU, or {gpu_index: [profiles]}",
            )
            return None
        ok = True
        gpus_of: dict[tuple[str, ...], list[int]] = {}  # one problem per distinct layout, naming its GPUs
        for index, profiles in enumerate(per_gpu):
            if profiles is not None:
                gpus_of.setdefault(profiles, []).append(index)
        for profiles, indexes in gpus_of.items():
            which = f"GPU {indexes[0]}" if len(indexes) == 1 else f"GPUs {_ranges(indexes)}"
            if not profiles:
                self.bad("mig_layout", raw, f"{which} MIG-enabled but no instances")
                ok = False
                continue
            for reason in catalogue.layout_problems(model.name, list(profiles)):
                self.bad("mig_layout", list(profiles), f"{which} ({model.name}): {reason}")
                ok = False
        if ok and strategy == "single":
            distinct = {p for profiles in per_gpu for p in (profiles or ())}
            if len(distinct) != 1 or any(p is None for p in per_gpu):
                self.bad(
                    "mig_layout",
                    raw,
                    "mig_strategy 'single' needs every GPU MIG-enabled with one and the "
                    f"same profile (found {sorted(distinct)}); use 'mixed' for mixed layouts",
                )
                ok = False
        return tuple(per_gpu) if ok else None

    def versions(self) -> Versions | None:
        before = len(self.problems)
        branch = str(self.settings["nvidia_driver_branch"])
        driver = self.get("nvidia_driver_version")
        m = _DRIVER_VERSION.match(driver) if isinstance(driver, str) else None
        if not m:
            self.bad("nvidia_driver_version", driver, "must look like 580.178.04 (what nvidia-smi reports)")
        elif m.group(1) != branch:
            self.bad(
                "nvidia_driver_version",
                driver,
                f"is outside nvidia_driver_branch {branch!r}: pick a {branch}.x version or change the branch",
            )
        source = self.settings["nvidia_driver_source"]
        toolkit = self.get("nvidia_container_toolkit_version")
        if not isinstance(toolkit, str) or not _SEMVER.match(toolkit):
            self.bad("nvidia_container_toolkit_version", toolkit, "must be a version like 1.20.0")
        elif self.settings["nvidia_cdi"] is True and (problem := cdi.toolkit_problem(toolkit)):
            self.bad("nvidia_container_toolkit_version", toolkit, f"with nvidia_cdi = True: {problem}")
        kube = self.get("kubernetes_version")
        if not isinstance(kube, str) or not _SEMVER.match(kube):
            self.bad("kubernetes_version", kube, "must be a full version like 1.36.3")
        if len(self.problems) != before:
            return None
        return Versions(
            driver=driver,
            driver_branch=branch,
            driver_package=f"{driver}-{self.settings['nvidia_driver_package_revision']}",
            driver_source=source,
            toolkit=toolkit,
            toolkit_package=f"{toolkit}-{self.settings['nvidia_container_toolkit_package_revision']}",
            containerd_package=self.settings["containerd_package"],
            kubernetes=kube,
            kubernetes_minor=".".join(kube.split(".")[:2]),
            kubernetes_package=f"{kube}-{self.settings['kubernetes_package_revision']}",
        )

    def join_settings(self) -> Join | None:
        enabled = self.settings["kube_join"]
        join = Join(
            enabled=enabled,
            api_endpoint=self.get("kube_api_endpoint"),
            ca_cert_hash=self.get("kube_ca_cert_hash"),
            token_file=self.settings["kube_join_token_file"],
            token_env=self.settings["kube_join_token_env"],
            cri_socket=self.settings["kube_cri_socket"],
        )
        if not enabled:
            return join
        before = len(self.problems)
        if not isinstance(join.api_endpoint, str) or not _ENDPOINT.match(join.api_endpoint):
            self.bad(
                "kube_api_endpoint",
                join.api_endpoint,
                "a node that joins needs the API endpoint as host:port",
            )
        if not isinstance(join.ca_cert_hash, str) or not _CA_HASH.match(join.ca_cert_hash):
            self.bad(
                "kube_ca_cert_hash", join.ca_cert_hash, "a node that joins needs 'sha256:<64 lower-case hex>'"
            )
        if not join.token_file and not join.token_env:
            self.bad(
                "kube_join_token_file",
                None,
                "a node that joins needs kube_join_token_file or kube_join_token_env",
            )
        return join if len(self.problems) == before else None

    def labels(self) -> dict[str, str]:
        raw = self.get("node_labels", {}) or {}
        if not isinstance(raw, Mapping):
            self.bad("node_labels", raw, "must be a dict of label key -> value")
            return {}
        out = {}
        for key, value in raw.items():
            problem = kubesyntax.label_key_problem(key) or kubesyntax.label_value_problem(value)
            if problem:
                self.bad("node_labels", {key: value}, problem)
            else:
                out[key] = value
        return out

    def taints(self) -> tuple[kubesyntax.Taint, ...]:
        raw = self.get("node_taints", []) or []
        if not isinstance(raw, (list, tuple)):
            self.bad("node_taints", raw, "must be a list of 'key[=value]:Effect'")
            return ()
        out = []
        for item in raw:
            try:
                out.append(kubesyntax.parse_taint(item))
            except ValueError as exc:
                self.bad("node_taints", item, str(exc))
        return tuple(out)
