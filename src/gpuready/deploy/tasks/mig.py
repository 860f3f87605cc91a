"""MIG layout step of the node deploy: the layout now, and a boot unit that creates it again after every remig_boot."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import server, systemd

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.host import FileDigest, UnitState
from gpuready.deploy.facts.nvidia import MigInstances, NvidiaSmi
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import cdi as cdi_ops
from gpuready.deploy.operations import host as host_ops
from gpuready.deploy.operations import mig
from gpuready.nvidia import cdi
from gpuready.nvidia import mig_layout as mig_boot
from gpuready.spec import knobs


@reads
def facts_read() -> list[FactSpec]:
    """The facts mig_layout reads: the MIG state on a MIG node, the boot unit's files and state on every node."""
    unit_facts: list[FactSpec] = [(UnitState, {"unit": mig_boot.UNIT})] + [
        (FileDigest, {"path": path}) for path in (mig_boot.UNIT_PATH, mig_boot.SCRIPT_PATH)
    ]
    return (
        [(NvidiaSmi, {}), (MigInstances, {}), *unit_facts]
        if current_node().sharing.mode == "mig"
        else unit_facts
    )


@deploy("MIG layout", data_defaults=knobs.defaults("deploy"))
def mig_layout() -> None:
    node = current_node()
    if node.sharing.mode != "mig":
        mig.boot_unit_absent(name="No MIG layout at boot")
        return
    layout = mig.layout(
        name="Lay out MIG instances",
        per_gpu=node.sharing.mig_layout,
        destroy_existing=node.knobs["mig_destroy_in_use"],
    )
    if node.cdi:
        # the refresh .path unit watches the driver, not MIG: a new layout needs the spec rewritten (as the GPU
        # Operator's MIG manager does), else pods given the new MIG devices fail with "unresolvable CDI devices"
        # reset-failed first: after a reboot that lost the instances, the refresh failed at boot ("failed add device
        # \"all\"") and, triggered again by its .path unit, may have hit systemd's start limit; a restart is then
        # refused ("start of the service was attempted too often"), seen on the lab's real kubelets
        server.shell(
            name="Refresh the CDI spec for the new MIG devices",
            commands=[
                f"systemctl reset-failed {cdi.REFRESH_SERVICE} || true",
                f"systemctl restart {cdi.REFRESH_SERVICE}",
            ],
            _if=layout.did_change,
        )
        # written here, not in the toolkit step: after a reboot that lost the instances it could not be
        cdi_ops.spec(name=f"The CDI spec ({cdi.SPEC_PATH})", _if=layout.did_not_change)
    # after the spec: the plugin in CDI mode writes the specs of the devices it hands out when it starts over
    server.shell(
        name="Restart NVIDIA's device plugin and GFD on the new MIG devices (SIGHUP)",
        commands=[mig_boot.rescan_command()],
        _if=layout.did_change,
    )
    # GPU and compute instances are gone after a reboot (the rolling upgrade's own): a oneshot unit creates them
    # again before the kubelet starts, with the same commands (nvidia.mig_layout)
    host_ops.file_content(
        name="The MIG layout's boot script",
        path=mig_boot.SCRIPT_PATH,
        content=mig_boot.boot_script(node.gpu_model, node.sharing.mig_layout),
        mode="755",
    )
    unit = host_ops.file_content(
        name=f"The MIG layout's boot unit ({mig_boot.UNIT})",
        path=mig_boot.UNIT_PATH,
        content=mig_boot.boot_unit(),
    )
    systemd.daemon_reload(name="Reload systemd for the MIG boot unit", _if=unit.did_change)
    host_ops.service(
        name="Create the MIG layout at every boot", unit=mig_boot.UNIT, running=True, enabled=True
    )
