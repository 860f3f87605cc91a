"""The MIG layout of a node: MIG mode and exactly the spec's GPU and compute instances, changed only where they differ."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, operation

from gpuready.deploy.facts.host import FileDigest, UnitState
from gpuready.deploy.facts.nvidia import MigInstances, NvidiaSmi
from gpuready.deploy.node_facts import node_fact
from gpuready.nvidia import mig_layout


@operation()
def layout(per_gpu: tuple[tuple[str, ...] | None, ...], destroy_existing: bool = False):
    """
    Enable MIG mode and create the spec's instances (each GPU instance with its default compute instance).

    + per_gpu: for each GPU index, the GPU instance profiles it must have (``None``: a whole GPU, MIG left alone)
    + destroy_existing: allow destroying instances that differ from the spec; without it such a GPU is an error,
      since instances may be in use by pods

    A changed MIG mode takes effect on a GPU reset, which the operation does (``nvidia-smi -i N -r``); where the
    GPU cannot be reset (VMs, a process on it) that command fails with nvidia-smi's reason and the node needs a
    reboot before the deploy is run again.
    """
    smi = node_fact(NvidiaSmi)
    if not smi.installed or smi.report is None:
        raise OperationError(f"cannot read the MIG state: {smi.error or 'nvidia-smi is not installed'}")
    gpus = smi.report.gpus
    if len(gpus) < len(per_gpu):
        raise OperationError(f"the spec has {len(per_gpu)} GPUs, nvidia-smi sees {len(gpus)}")
    state = node_fact(MigInstances)
    done = []
    for index, wanted in enumerate(per_gpu):
        if wanted is None:
            continue
        gpu = gpus[index]
        have = state.profiles_on(index)
        if gpu.mig_mode_current != "Enabled":
            # A new MIG mode takes effect on a GPU reset (bare metal, no process on the GPU) or a reboot
            # (VMs cannot reset). Reset now, so the instances below are created in this same run.
            if gpu.mig_mode_pending != "Enabled":
                yield f"nvidia-smi -i {index} -mig 1"
            yield f"nvidia-smi -i {index} -r"
            have = []
        if have == sorted(wanted):
            done.append(index)
            continue
        if have:
            if not destroy_existing:
                raise OperationError(
                    f"GPU {index} has MIG instances {have}, the spec wants {sorted(wanted)}; they may be in use: "
                    "set mig_destroy_in_use = True to let the deploy destroy them"
                )
            yield f"nvidia-smi mig -i {index} -dci"
            yield f"nvidia-smi mig -i {index} -dgi"
        # in an order known to fit; the same command the boot unit runs (nvidia.mig_layout)
        yield mig_layout.create_command(index, gpu.name, wanted)
    if done and len(done) == sum(1 for w in per_gpu if w is not None):
        host.noop(f"MIG layout matches the spec on GPUs {done}")


@operation()
def boot_unit_absent():
    """
    No MIG boot unit (``nvidia.mig_layout.UNIT``): on a node whose spec no longer asks for MIG, the unit a
    former MIG deploy installed must not create instances at the next boot.
    """
    unit = node_fact(UnitState, unit=mig_layout.UNIT)
    present = [
        path for path in (mig_layout.UNIT_PATH, mig_layout.SCRIPT_PATH) if node_fact(FileDigest, path=path)
    ]
    if unit["enabled"] == "not-found" and not present:
        host.noop(f"no {mig_layout.UNIT}")
        return
    if unit["enabled"] != "not-found":
        yield f"systemctl disable --now {mig_layout.UNIT}"
    if present:
        yield f"rm -f {' '.join(present)}"
        yield "systemctl daemon-reload"
