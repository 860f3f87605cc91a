"""MIG layout step of the node deploy: only for nodes whose spec asks for MIG."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import systemd

from gpuready.deploy.context import current_node
from gpuready.deploy.facts.nvidia import MigInstances, NvidiaSmi
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import mig
from gpuready.nvidia import cdi
from gpuready.spec import knobs


@reads
def facts_read() -> list[FactSpec]:
    """The facts mig_layout reads, on a MIG node only."""
    return [(NvidiaSmi, {}), (MigInstances, {})] if current_node().sharing.mode == "mig" else []


@deploy("MIG layout", data_defaults=knobs.defaults("deploy"))
def mig_layout() -> None:
    node = current_node()
    if node.sharing.mode != "mig":
        return
    layout = mig.layout(
        name="Lay out MIG instances",
        per_gpu=node.sharing.mig_layout,
        destroy_existing=node.knobs["mig_destroy_in_use"],
    )
    if node.cdi:
        # the refresh .path unit watches the driver, not MIG: a new layout needs the spec rewritten (as the GPU
        # Operator's MIG manager does), else pods given the new MIG devices fail with "unresolvable CDI devices"
        systemd.service(
            name="Refresh the CDI spec for the new MIG devices",
            service=cdi.REFRESH_SERVICE,
            restarted=True,
            _if=layout.did_change,
        )
