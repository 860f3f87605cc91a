"""The NVIDIA container toolkit, pinned and held like the driver (a toolkit/driver skew breaks containers); in CDI
mode also its refresh units, which keep the CDI spec that GPU pods' devices resolve against current."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.host import FileDigest, UnitState
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import cdi as cdi_ops
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.tasks.repos import install_pinned, task_repository
from gpuready.nvidia import cdi
from gpuready.spec import knobs


def units(cdi_mode: bool) -> tuple[str, ...]:
    """The toolkit's units this step manages: the CDI refresh pair in CDI mode."""
    return (cdi.REFRESH_PATH_UNIT, cdi.REFRESH_SERVICE) if cdi_mode else ()


@reads
def facts_read() -> list[FactSpec]:
    """The facts container_toolkit reads: its units, and the CDI spec in CDI mode."""
    node = current_node()
    specs: list[FactSpec] = [(UnitState, {"unit": unit}) for unit in units(node.cdi)]
    if node.cdi:
        specs.append((FileDigest, {"path": cdi.SPEC_PATH}))
    return specs


@deploy("NVIDIA container toolkit", data_defaults=knobs.defaults("deploy"))
def container_toolkit() -> None:
    node = current_node()
    pins = node.apt_packages["toolkit"]
    task_repository("toolkit")
    install_pinned(f"NVIDIA container toolkit {node.versions.toolkit}", pins)
    if not node.cdi:
        return
    # CDI mode: the spec follows the driver (the .path unit watches modules.dep) and is rewritten at boot
    host_ops.service(
        name="Refresh the CDI spec when the driver changes",
        unit=cdi.REFRESH_PATH_UNIT,
        running=True,
        enabled=True,
    )
    host_ops.service(name="Refresh the CDI spec at boot", unit=cdi.REFRESH_SERVICE, enabled=True)
    if node.sharing.mode != "mig":
        # a MIG node's spec is written after its layout (tasks.mig): nvidia-ctk writes no spec while every GPU is
        # MIG-enabled without a MIG device (a reboot that lost the instances), "failed add device \"all\""
        cdi_ops.spec(name=f"The CDI spec ({cdi.SPEC_PATH})")
