"""containerd configuration with an ``nvidia`` runtime written as a drop-in, as ``nvidia-ctk`` (>= 1.18) does.

Why a drop-in: tools that rewrite ``/etc/containerd/config.toml`` (kubespray, reboots of images, users) drop an
``nvidia`` runtime written into it; a file under ``conf.d/`` survives them. Why the drop-in carries a copy of the
whole CRI plugin table: containerd before 2.1 merges imported files per plugin key, not deeply, so a drop-in with
only the ``nvidia`` runtime would replace the main file's CRI settings (runc options such as ``SystemdCgroup``
would be lost; containerd#5837).

Everything here is pure (text in, text out) so the pyinfra operation stays a thin comparison of two files, and the
same rules are tested without a host. tomlkit keeps the user's comments and ordering in the main file.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass
from typing import Any

import tomlkit
from tomlkit.items import Table

from gpuready.nvidia.errors import check_text

DEFAULT_DROP_IN_DIR = "/etc/containerd/conf.d"
DEFAULT_DROP_IN_NAME = "99-nvidia.toml"
NVIDIA_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
RUNC_TYPE = "io.containerd.runc.v2"

# The CRI plugin's key per config version (nvidia-container-toolkit pkg/config/engine/containerd).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


class ContainerdConfigError(ValueError):
    """The config cannot be read or extended safely (unparsable TOML, unknown version, a table that is not a
    table): the one error the readers here raise."""


@dataclass(frozen=True)
class RuntimeSettings:
    runtime_name: str = "nvidia"
    binary: str = NVIDIA_RUNTIME_BINARY
    set_as_default: bool = False
    enable_cdi: bool = False
    systemd_cgroup: bool = True
    drop_in_dir: str = DEFAULT_DROP_IN_DIR
    drop_in_name: str = DEFAULT_DROP_IN_NAME

    @property
    def drop_in_path(self) -> str:
        return f"{self.drop_in_dir.rstrip('/')}/{self.drop_in_name}"

    @property
    def imports_glob(self) -> str:
        return f"{self.drop_in_dir.rstrip('/')}/*.toml"


def config_version(doc: dict[str, Any], text: str) -> int:
    """The config schema version as containerd reads it: no ``version`` key means 1, an empty file means 2."""
    if not text.strip():
        return 2
    version = doc.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in (1, 2, 3):
        raise ContainerdConfigError(
            f"containerd config version {version!r} is not supported (1, 2 and 3 are); "
            "containerd 2.3 writes version 4: pin containerd < 2.3 or upgrade gpuready"
        )
    return int(version)


def _table(parent: Any, *keys: str) -> Any:
    """The nested table at ``keys``, created (as a real TOML table, not inline) where missing."""
    node = parent
    for key in keys:
        if key not in node:
            node[key] = tomlkit.table()
        node = node[key]
    return node


def _cri_runtimes(doc: Any, version: int) -> Any:
    return _table(doc, "plugins", CRI_PLUGIN[version], "containerd", "runtimes")


def render_main(text: str, settings: RuntimeSettings) -> str:
    """The main ``config.toml`` with ``imports`` of the drop-in dir and runc's ``SystemdCgroup`` set; else unchanged."""
    try:
        doc = tomlkit.parse(text)
    except Exception as exc:
        raise ContainerdConfigError(f"containerd config is not valid TOML: {exc}") from exc
    version = config_version(doc.unwrap(), text)
    if version == 1:
        raise ContainerdConfigError(
            "containerd config has no 'version' key (schema 1, containerd < 1.5): "
            "regenerate it with `containerd config default` (schema 2) first"
        )
    if "version" not in doc:
        # keep it first so humans see it: rebuild the document with version on top
        fresh = tomlkit.document()
        fresh["version"] = version
        for key, value in doc.body:
            if key is not None:
                fresh[key.key] = value
        doc = fresh
    imports = doc.get("imports")
    if imports is None:
        doc["imports"] = [settings.imports_glob]
    elif settings.imports_glob not in imports:
        imports.append(settings.imports_glob)
    runc = _table(_cri_runtimes(doc, version), "runc")
    if "runtime_type" not in runc:
        runc["runtime_type"] = RUNC_TYPE
    if settings.systemd_cgroup:
        options = _table(runc, "options")
        if options.get("SystemdCgroup") is not True:
            options["SystemdCgroup"] = True
    out = tomlkit.dumps(doc)
    return out if out.endswith("\n") else out + "\n"


def render_drop_in(main_text: str, settings: RuntimeSettings) -> str:
    """The drop-in: the main file's whole CRI plugin table plus the ``nvidia`` runtime copied from runc."""
    doc = tomlkit.parse(main_text).unwrap()
    version = config_version(doc, main_text)
    cri_key = CRI_PLUGIN[version]
    cri = copy.deepcopy(doc.get("plugins", {}).get(cri_key, {}))
    runtimes = cri.setdefault("containerd", {}).setdefault("runtimes", {})
    runc = runtimes.get("runc") or {"runtime_type": RUNC_TYPE}
    nvidia = copy.deepcopy(runc)
    nvidia.setdefault("options", {})["BinaryName"] = settings.binary
    runtimes[settings.runtime_name] = nvidia
    if settings.set_as_default:
        cri["containerd"]["default_runtime_name"] = settings.runtime_name
    if settings.enable_cdi:
        cri["enable_cdi"] = True
    out = tomlkit.document()
    out.add(
        tomlkit.comment(
            "Written by gpuready: the nvidia runtime for containerd. Do not edit; re-run the deploy."
        )
    )
    out["version"] = version
    plugins = tomlkit.table()
    plugins[cri_key] = _as_tables(cri)
    out["plugins"] = plugins
    return tomlkit.dumps(out)


def _as_tables(value: dict[str, Any]) -> Table:
    """Nested dicts as TOML tables (not inline tables), the way containerd and nvidia-ctk write them."""
    table = tomlkit.table()
    for key, item in value.items():
        table[key] = _as_tables(item) if isinstance(item, dict) else item
    return table


def _subtable(table: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise ContainerdConfigError(f"{where}.{key} is a {type(value).__name__}, not a table")
    return value


def nvidia_runtime_of(dump_text: str, runtime_name: str = "nvidia") -> dict[str, Any] | None:
    """The runtime table named ``runtime_name`` in a (merged) config, e.g. ``containerd config dump`` output."""
    version, cri = cri_plugin_of(dump_text)
    where = f"plugins.{CRI_PLUGIN[version]!r}"
    runtimes = _subtable(_subtable(cri, "containerd", where), "runtimes", f"{where}.containerd")
    runtime = runtimes.get(runtime_name)
    if runtime is not None and not isinstance(runtime, dict):
        raise ContainerdConfigError(f"{where}.containerd.runtimes.{runtime_name} is not a table")
    if runtime is not None:
        _subtable(runtime, "options", f"{where}.containerd.runtimes.{runtime_name}")
    return runtime


def cri_plugin_of(dump_text: str) -> tuple[int, dict[str, Any]]:
    """(config version, the CRI plugin's table) of a merged config such as ``containerd config dump`` prints.

    Read with the standard library's tomllib, not tomlkit: nothing is written back, and a check reads one dump
    per node (tomlkit took ~30 ms a dump, a minute of a 1000-node run). Unreadable TOML is a
    ContainerdConfigError."""
    check_text(dump_text, "containerd config dump", ContainerdConfigError)
    try:
        doc = tomllib.loads(dump_text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more digits than Python converts
        raise ContainerdConfigError(f"not TOML: {str(exc)[:200]}") from None
    except RecursionError:
        raise ContainerdConfigError("not TOML: nested too deep") from None
    version = config_version(doc, dump_text)
    return version, _subtable(_subtable(doc, "plugins", "config"), CRI_PLUGIN[version], "plugins")


def cdi_settings(dump_text: str) -> tuple[bool, list[str]]:
    """(enable_cdi, cdi_spec_dirs) as containerd applies them: containerd 1.7 (config version 2) has CDI off unless
    ``enable_cdi``; 2.x (version 3) has it on by default; both read /etc/cdi and /var/run/cdi by default."""
    version, cri = cri_plugin_of(dump_text)
    enabled = cri.get("enable_cdi", version >= 3)
    dirs = cri.get("cdi_spec_dirs", ["/etc/cdi", "/var/run/cdi"])
    if not isinstance(enabled, bool):
        raise ContainerdConfigError(f"enable_cdi is {enabled!r}, not true or false")
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise ContainerdConfigError(f"cdi_spec_dirs is {str(dirs)[:80]}, not a list of paths")
    return enabled, list(dirs)
