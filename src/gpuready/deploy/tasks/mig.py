"""MIG layout step of the node deploy: only for nodes whose spec asks for MIG."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuready.deploy.context import current_node
from gpuready.deploy.operations import mig
from gpuready.spec import knobs


@deploy("MIG layout", data_defaults=knobs.defaults("deploy"))
def mig_layout() -> None:
    node = current_node()
    if node.sharing.mode != "mig":
        return
    mig.layout(
        name="Lay out MIG instances",
        per_gpu=node.sharing.mig_layout,
        destroy_existing=node.knobs["mig_destroy_in_use"],
    )
