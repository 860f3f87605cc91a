"""Reading an inventory: load it as the pyinfra CLI does, check every host's data against the knob registry and
the rules across knobs, and build the :class:`~gpuready.spec.model.Fleet`.

Validation happens before any connection is opened and reports every problem at once (a problem repeated over
hosts or GPUs is one line), so a user fixes an inventory in one pass.
"""

from __future__ import annotations

import math
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

# Every pattern is applied with fullmatch (`$` with re.match lets a trailing newline through) and spells digits
# [0-9] (\d also matches other scripts' digits, which no version or port has).
_DRIVER_VERSION = re.compile(r"([0-9]{3})\.([0-9]{1,3})(\.[0-9]{1,3})?")
_SEMVER = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}")
_CA_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_IPV4 = re.compile(
    r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
)
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_PORT = re.compile(r"[0-9]{1,5}")
MAX_BANDWIDTH_GBPS = 10_000  # 5x NVLink 5's 1.8 TB/s per GPU: a floor above it is a typo (units)
MAX_MIG_INSTANCES = 7  # GPU instances one GPU holds, on every MIG-capable model (1g slices of a 7-slice GPU)
# Data keys of pyinfra itself: its connectors' data (ssh_*, docker_*, ...) and its global arguments as host data
# defaults (_sudo, ...). Read from pyinfra, so a pyinfra upgrade that adds one needs no change here.


def shown(key: str, value: Any) -> str:
    """How a value appears in a problem line: its repr, bounded. Every value an inventory problem prints goes
    through here; what looks like a secret is masked in every line of a :class:`SpecError` (one masking function
    for every message, gpuready.spec.secrets)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long for repr (sys.get_int_max_str_digits)
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else "<unprintable>"
    if len(text) > _SHOWN_MAX:
        text = text[: _SHOWN_MAX - 20] + f"... ({len(text)} characters)"
    return text


_SHOWN_MAX = 500


def pyinfra_data_keys() -> frozenset[str]:
    """Keys pyinfra reads from host data: every connector's data and its global arguments (``_sudo``...)."""
    global _PYINFRA_KEYS
    if _PYINFRA_KEYS is None:
        from pyinfra.api.arguments import all_global_arguments
        from pyinfra.api.connectors import get_all_connectors

        keys = {key for key, _ in all_global_arguments() if key.startswith("_")}
        for connector in get_all_connectors().values():
            keys.update(getattr(connector, "data_meta", {}) or {})
        _PYINFRA_KEYS = frozenset(keys)
    return _PYINFRA_KEYS


_PYINFRA_KEYS: frozenset[str] | None = None


def endpoint_problem(value: Any) -> str | None:
    """Why ``value`` is not ``host:port`` (a DNS name, an IPv4 address or a [bracketed] IPv6 one; a port in
    1..65535), or None."""
    allowed = "a node that joins needs the API endpoint as host:port, port in 1..65535, e.g. k8s-api.example.com:6443"
    if not isinstance(value, str):
        return allowed
    host, sep, port = value.rpartition(":")
    if not sep or not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        return allowed
    if host.startswith("[") and host.endswith("]") and ":" in host and _IPV6.fullmatch(host[1:-1]):
        return None
    if _IPV4.fullmatch(host) or kubesyntax.dns_name_problem(host.lower()) is None:
        return None
    return allowed


def load_fleet(inventory_path: str | os.PathLike[str], override_data: dict[str, Any] | None = None) -> Fleet:
    """Load an inventory (and its ``group_data``) exactly as the pyinfra CLI does, and validate every node.

    Raises :class:`SpecError` listing every problem; opens no connection. An inventory file is user Python: an
    error it raises, or a ``sys.exit()`` it calls, is a :class:`SpecError` naming its file and line.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state

    cli_inventory = _pyinfra_cli("inventory")
    path = str(inventory_path)
    if not Path(path).is_file():
        raise SpecError(path, [f"inventory file {path} does not exist"])
    groups_of_file: dict[str, Any] = {}
    read_groups = cli_inventory._get_groups_from_filename

    def recording(
        filename: str,
    ) -> Any:  # the groups as the file declares them, before pyinfra merges hosts' data
        groups = read_groups(filename)
        groups_of_file.update(groups)
        return groups

    cli_inventory._get_groups_from_filename = recording
    try:
        # pyinfra executes inventory and group_data files under a State; give it a throwaway one
        with ctx_state.use(State(check_for_changes=False)):
            inventory = cli_inventory.make_inventory(path, override_data=override_data)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: sys.exit() in an inventory is no success
        raise SpecError(path, [f"cannot load the inventory: {_load_error(exc, path)}"]) from None
    finally:
        cli_inventory._get_groups_from_filename = read_groups
    return fleet_from_inventory(inventory, path, groups_of_file)


def _load_error(exc: BaseException, path: str) -> str:
    """What went wrong executing an inventory or group_data file, and where: the user's file and line, not pyinfra's."""
    import traceback

    cause: BaseException = getattr(exc, "exception", None) or exc  # pyinfra wraps errors of executed files
    here = (
        Path(__file__).resolve().parents[2]
    )  # .../src or site-packages: gpuready's own frames are not the user's
    frames = traceback.extract_tb(cause.__traceback__) or traceback.extract_tb(exc.__traceback__)
    users = [
        f
        for f in frames
        if not any(part in ("pyinfra", "pyinfra_cli") for part in Path(f.filename).parts)
        and not Path(f.filename).resolve().is_relative_to(here / "gpuready")
    ]
    where = f"{users[-1].filename}:{users[-1].lineno}" if users else getattr(exc, "filename", None) or path
    if isinstance(cause, SystemExit):
        return (
            f"{where}: the file calls sys.exit({cause.code!r}); an inventory must only define hosts and data"
        )
    text = str(cause).splitlines()[0] if str(cause) else ""
    text = text[:300]
    return f"{where}: {type(cause).__name__}" + (f": {text}" if text else "")


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


def fleet_from_inventory(
    inventory: Any, inventory_path: str, groups_of_file: Mapping[str, Any] | None = None
) -> Fleet:
    """Validate an already loaded pyinfra ``Inventory`` (what a running deploy has) into a :class:`Fleet`.

    ``groups_of_file``: the groups as the inventory file declares them (``load_fleet`` has them), so a host's own
    data in two pools is seen before pyinfra merges it."""
    problems: list[Problem] = []
    nodes: dict[str, NodeSpec] = {}
    readers = []
    for host in inventory:
        reader = _HostReader(inventory_path, inventory, host, groups_of_file or {})
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
        names = hosts.setdefault((p.file, p.key, shown(p.key, p.value), p.allowed), [])
        if p.host and p.host not in names:
            names.append(p.host)
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


def _unknown_key(key: str) -> str:
    import difflib

    candidates = [*knobs.KNOBS, *pyinfra_data_keys()]
    found = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
    hint = f": did you mean {found[0]}?" if found else ""
    return (
        f"is not a gpuready knob{hint} (knobs: inventory/group_data/all.py or `gpuready knobs`; pyinfra's own data "
        "such as ssh_user or _sudo is allowed; list data of your own deploys in extra_data_keys)"
    )


class _HostReader:
    """Reads one host's data, collecting problems instead of stopping at the first."""

    def __init__(self, inventory_path: str, inventory: Any, host: Any, groups_of_file: Mapping[str, Any]):
        self.inventory_path = inventory_path
        self.inventory = inventory
        self.host = host
        self.groups_of_file = groups_of_file
        self.data: dict[str, Any] = host.data.dict()
        self.problems: list[Problem] = []
        self.settings: dict[str, Any] = {}

    def where(self, key: str) -> str:
        """The file a value comes from, so a user knows what to edit."""
        if key in self.inventory.get_override_data():
            return "--data"
        if key in self.inventory.get_host_data(self.host.name):
            return self.inventory_path
        group_data = Path(self.inventory_path).parent / "group_data"
        for g in reversed(self.host.groups):  # pyinfra: the last group's value holds
            if g != "all" and key in self.inventory.get_group_data(g):
                declared = self.groups_of_file.get(g)
                in_file = isinstance(declared, tuple) and len(declared) == 2 and key in (declared[1] or {})
                if in_file or not (group_data / f"{g}.py").is_file():
                    return self.inventory_path
                return str(group_data / f"{g}.py")
        return str(group_data / "all.py")

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
        bad one, which is reported). Every other key is refused unless pyinfra reads it or extra_data_keys lists
        it: a retired knob with what replaced it, a misspelt one with the knob it resembles."""
        out = {}
        for knob in knobs.KNOBS.values():
            value = self.get(knob.name)
            problem = knob.check(value) if knob.check else None
            if problem:
                self.bad(knob.name, value, problem)
                value = knob.default
            out[knob.name] = value
        self.settings = out
        extra = set(out["extra_data_keys"])
        for key in self.data:
            if key in knobs.KNOBS or key in extra:
                continue
            if not isinstance(key, str):
                self.problems.append(Problem(self.where(key), self.host.name, repr(key), self.data[key],
                                             "a data key must be a string"))  # fmt: skip
            elif retired := knobs.RETIRED.get(key):
                self.bad(key, self.data[key], retired.problem())
            elif key not in pyinfra_data_keys():
                self.bad(key, self.data[key], _unknown_key(key))
        self.connection_data()
        return out

    def connection_data(self) -> None:
        """pyinfra's SSH data that a typo would send elsewhere: the port, and the address connected to."""
        port = self.data.get("ssh_port")
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            self.bad("ssh_port", port, "must be an integer in 1..65535")
        address = self.data.get("ssh_hostname")
        if address is not None and not (
            isinstance(address, str)
            and (_IPV4.fullmatch(address) or (":" in address and _IPV6.fullmatch(address))
                 or kubesyntax.dns_name_problem(address.lower()) is None)
        ):  # fmt: skip
            self.bad("ssh_hostname", address, "must be a DNS name or an IP address")

    def integer(self, key: str, default: int | None, minimum: int, maximum: int) -> int | None:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            self.bad(key, value, f"must be an integer >= {minimum} and <= {maximum}")
            return None
        return value

    def host_name(self) -> None:
        """The host's name is its Kubernetes node name: a DNS name. A pyinfra connector name (@local, @docker/...)
        is not one; ``@local`` (pyinfra on this machine) passes only for a node that joins nothing
        (``kube_join = False``), e.g. to run the add-ons deploy once from here."""
        name = self.host.name
        if name == "@local" and self.data.get("kube_join") is False:
            self.pools()
            return
        if problem := kubesyntax.dns_name_problem(name):
            self.problems.append(Problem(self.inventory_path, str(name), "host name", name, problem))
        self.pools()

    def pools(self) -> None:
        """A host listed in two groups that both carry data gets a mix of both (pyinfra merges them, the last group
        winning key by key): refused, naming the groups and what each sets. A group without data (a name for
        some hosts) is no pool, nor are ``all`` and the group pyinfra names after the inventory file."""
        file_group = Path(self.inventory_path).name.rsplit(".", 1)[0]
        setting: dict[str, set[str]] = {}
        for g in self.host.groups:
            if g == "all" or (g == file_group and g not in self.groups_of_file):
                continue
            keys = set(self.inventory.get_group_data(g))
            declared = self.groups_of_file.get(g)
            hosts = declared[0] if isinstance(declared, tuple) and len(declared) == 2 else declared
            for entry in hosts if isinstance(hosts, list | tuple) else ():
                if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == self.host.name:
                    keys |= set(entry[1] or {})
            if keys:
                setting[g] = {str(k) for k in keys}
        if len(setting) > 1:
            shown_groups = "; ".join(f"{g} sets {', '.join(sorted(keys))}" for g, keys in setting.items())
            self.problems.append(Problem(self.inventory_path, self.host.name, "pools", sorted(setting),
                                         f"the host is in {len(setting)} pools that each carry data, which pyinfra "
                                         f"would merge into a mix of both ({shown_groups}): list it in one pool"))  # fmt: skip

    def node(self) -> NodeSpec | None:
        settings = self.checked()
        model_name = self.get("gpu_model")
        self.host_name()
        count = self.integer("gpu_count", None, 1, knobs.MAX_GPUS_PER_NODE)
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
        if type(level) is not int or level not in (1, 2, 3):  # 2.0 == 2, but would render as `-r 2.0`
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
            elif (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (isinstance(value, int) or math.isfinite(value))
                or not 0 < value <= MAX_BANDWIDTH_GBPS
            ):
                self.bad(
                    "diag_bandwidth_floors",
                    floors,
                    f"{key} must be a number of GB/s > 0, not {shown(key, value)}: a finite number up to "
                    f"{MAX_BANDWIDTH_GBPS}",
                )
        if any(p.key == "diag_bandwidth_floors" for p in self.problems):
            floors = {}
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
            most = knobs.MAX_MPS_CLIENTS if mode == SharingMode.MPS else knobs.MAX_SHARING_REPLICAS
            if isinstance(replicas, bool) or not isinstance(replicas, int) or not 2 <= replicas <= most:
                self.bad(
                    "sharing_replicas",
                    replicas,
                    f"{mode} needs an integer >= 2 and <= {most} (the device plugin rejects 1"
                    + (", MPS serves at most 48 clients per GPU)" if mode == SharingMode.MPS else ")"),
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
            most = knobs.MAX_SHARING_REPLICAS
            if (
                isinstance(mig_replicas, bool)
                or not isinstance(mig_replicas, int)
                or not 2 <= mig_replicas <= most
            ):
                self.bad(
                    "mig_sharing_replicas", mig_replicas, f"time-slicing needs an integer >= 2 and <= {most}"
                )
                return None
        if model is None or count < 1:
            return None  # already reported: MIG needs a known model and a GPU count
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
            if not self.mig_profiles_ok(raw, "every GPU"):
                return None
            per_gpu = [tuple(raw)] * count
        elif isinstance(raw, Mapping):
            bad_keys = [k for k in raw if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < count]
            if bad_keys:
                self.bad("mig_layout", raw, f"GPU indexes {bad_keys[:8]} are not in 0..{count - 1}")
                return None
            bad_entries = [i for i in raw if not self.mig_profiles_ok(raw[i], f"GPU {i}")]
            if bad_entries:
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

    def mig_profiles_ok(self, profiles: Any, which: str) -> bool:
        """One GPU's entry of ``mig_layout``: a list of profile names, at most as many as a GPU holds."""
        if not isinstance(profiles, list | tuple) or not all(isinstance(p, str) for p in profiles):
            self.bad("mig_layout", profiles, f"{which}: must be a list of MIG profile names like '1g.10gb', not "
                     f"{type(profiles).__name__}" + (" holding non-strings" if isinstance(profiles, list | tuple)
                                                     else ""))  # fmt: skip
            return False
        if len(profiles) > MAX_MIG_INSTANCES:
            self.bad("mig_layout", profiles, f"{which}: a GPU holds at most {MAX_MIG_INSTANCES} MIG instances, "
                     f"not {len(profiles)}")  # fmt: skip
            return False
        return True

    def versions(self) -> Versions | None:
        before = len(self.problems)
        branch = str(self.settings["nvidia_driver_branch"])
        driver = self.get("nvidia_driver_version")
        m = _DRIVER_VERSION.fullmatch(driver) if isinstance(driver, str) else None
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
        if not isinstance(toolkit, str) or not _SEMVER.fullmatch(toolkit):
            self.bad("nvidia_container_toolkit_version", toolkit, "must be a version like 1.20.0")
        elif self.settings["nvidia_cdi"] is True and (problem := cdi.toolkit_problem(toolkit)):
            self.bad("nvidia_container_toolkit_version", toolkit, f"with nvidia_cdi = True: {problem}")
        kube = self.get("kubernetes_version")
        if not isinstance(kube, str) or not _SEMVER.fullmatch(kube):
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
            ignore_preflight_errors=tuple(self.settings["kube_join_ignore_preflight_errors"]),
            patches_dir=self.settings["kube_join_patches_dir"],
        )
        if not enabled:
            return join
        before = len(self.problems)
        if problem := endpoint_problem(join.api_endpoint):
            self.bad("kube_api_endpoint", join.api_endpoint, problem)
        if not isinstance(join.ca_cert_hash, str) or not _CA_HASH.fullmatch(join.ca_cert_hash):
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
        out: list[kubesyntax.Taint] = []
        for item in raw:
            try:
                taint = kubesyntax.parse_taint(item)
            except ValueError as exc:
                self.bad("node_taints", item, str(exc))
                continue
            if any((t.key, t.effect) == (taint.key, taint.effect) for t in out):
                # the API server refuses a Node with two taints of one key and effect, and kubeadm's join with it
                self.bad("node_taints", item, f"duplicates the taint {taint.key}:{taint.effect} (one taint per key "
                         "and effect)")  # fmt: skip
                continue
            out.append(taint)
        return tuple(out)
