"""The containerd ``nvidia`` runtime as a pyinfra operation: it changes files only when they differ from the spec."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import files

from gpuready.deploy.facts.containerd import ContainerdConfigText
from gpuready.deploy.node_facts import node_fact
from gpuready.nvidia import cdi
from gpuready.nvidia.containerd_config import (
    DEFAULT_DROP_IN_DIR,
    DEFAULT_DROP_IN_NAME,
    NVIDIA_RUNTIME_BINARY,
    ContainerdConfigError,
    RuntimeSettings,
    render_drop_in,
    render_main,
)


@operation()
def nvidia_runtime(
    config_path: str = "/etc/containerd/config.toml",
    runtime_name: str = "nvidia",
    binary: str = NVIDIA_RUNTIME_BINARY,
    set_as_default: bool = False,
    enable_cdi: bool = False,
    systemd_cgroup: bool = True,
    drop_in_dir: str = DEFAULT_DROP_IN_DIR,
    drop_in_name: str = DEFAULT_DROP_IN_NAME,
    containerd_package: str = "containerd",
):
    """
    Give containerd an ``nvidia`` runtime handler as a drop-in, keeping runc's options.

    + config_path: the main containerd config; it gets ``imports`` of the drop-in dir (and runc ``SystemdCgroup``)
    + runtime_name: the handler name a RuntimeClass refers to
    + binary: the runtime binary (``nvidia-container-runtime``)
    + set_as_default: make it containerd's default runtime (a RuntimeClass is the recommended way instead)
    + enable_cdi: set ``enable_cdi`` in the CRI plugin; refused where the installed containerd is older than 1.7
    + systemd_cgroup: set ``SystemdCgroup = true`` for runc (kubelet's default cgroup driver is systemd)
    + drop_in_dir, drop_in_name: where the drop-in goes (nvidia-ctk's default: conf.d/99-nvidia.toml)
    + containerd_package: the Debian package whose installed version says whether CDI can work

    **Example:**

    .. code:: python

        config = containerd.nvidia_runtime(name="Add the nvidia runtime to containerd")
        systemd.service(name="Restart containerd", service="containerd", restarted=True, _if=config.did_change)
    """
    settings = RuntimeSettings(
        runtime_name=runtime_name,
        binary=binary,
        set_as_default=set_as_default,
        enable_cdi=enable_cdi,
        systemd_cgroup=systemd_cgroup,
        drop_in_dir=drop_in_dir,
        drop_in_name=drop_in_name,
    )
    if enable_cdi:
        version = _installed_version(containerd_package)
        problem = cdi.containerd_problem(version) if version else None
        if problem:
            raise OperationError(f"nvidia_cdi = True: {problem}")
    current_main = node_fact(ContainerdConfigText, path=config_path)
    try:
        main = render_main(current_main or "", settings)
        drop_in = render_drop_in(main, settings)
    except ContainerdConfigError as exc:
        raise OperationError(f"{config_path}: {exc}") from exc
    current_drop_in = node_fact(ContainerdConfigText, path=settings.drop_in_path)
    if main == current_main and drop_in == current_drop_in:
        host.noop(f"containerd has the {runtime_name} runtime ({settings.drop_in_path})")
        return
    if main != current_main:
        yield from files.put._inner(src=StringIO(main), dest=config_path, mode="644")
    if drop_in != current_drop_in:
        yield from files.put._inner(src=StringIO(drop_in), dest=settings.drop_in_path, mode="644")


def _installed_version(package: str) -> str | None:
    """The installed version of ``package`` (its upstream part: 1.7.24 of 1.7.24~ds1-6+b4), or None."""
    # pyinfra's DebPackages gives a set of versions per name
    versions = (node_fact(DebPackages) or {}).get(package) or set()
    if not versions:
        return None
    return str(min(versions)).split(":", 1)[-1].split("~", 1)[0].split("-", 1)[0]
