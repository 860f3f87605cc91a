"""Dynamic Resource Allocation: what a ``gpu_allocation = "dra"`` node's ResourceSlices must hold.

NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu) runs a
kubelet plugin on each node that publishes the node's devices in ResourceSlices of driver ``gpu.nvidia.com``, pool
= the node's name, ``spec.nodeName`` set: one device per GPU whose MIG mode is off (type ``gpu``, named ``gpu-<minor>``)
and one per MIG device (type ``mig``, named ``gpu-<minor>-mig-<profile id>-<start>-<size>``), with the attributes
of its ``deviceinfo.go``: ``type``, ``uuid``, ``productName``, ``brand``, ``architecture`` (NVML's name, e.g.
"Hopper", "Ada Lovelace"), ``cudaComputeCapability``, ``driverVersion`` and ``cudaDriverVersion`` (semantic
versions: ``580.178.04`` is published as ``580.178.4``, CUDA ``13.0`` as ``13.0.0``), and for MIG devices
``profile`` and ``parentUUID``; capacity ``memory`` (bytes, a binary quantity). Pods ask through ResourceClaims
of the DeviceClasses ``gpu.nvidia.com`` and ``mig.nvidia.com`` (CEL selectors on the driver and the type).

The expectation is derived from the same inputs as ``NodeSpec.expected_allocatable`` (model, count, MIG layout,
pinned driver): the deploy renders nothing from it (the driver discovers the devices itself), the conformance
suite compares the node's published slices against it. Device names and UUIDs are the hardware's, which the
inventory does not know: devices are compared as a multiset of their attributes, and ``uuid`` is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuready.nvidia import catalogue, cuda
from gpuready.spec.model import DRA_ALLOCATION_LABEL

if TYPE_CHECKING:
    from gpuready.spec.model import NodeSpec

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
GPU_TYPE, MIG_TYPE = "gpu", "mig"
DEVICE_CLASSES = {GPU_CLASS: GPU_TYPE, MIG_CLASS: MIG_TYPE}
# The node label the add-ons select on: the DRA kubelet plugin runs on "dra" nodes, the device plugin on the others.
ALLOCATION_LABEL = DRA_ALLOCATION_LABEL
MIB = 1024 * 1024
VERSION_ATTRIBUTES = ("driverVersion", "cudaDriverVersion", "cudaComputeCapability")


def device_class_selector(device_type: str) -> str:
    """The CEL expression of a DeviceClass that selects this driver's devices of one type (as the driver's chart)."""
    return f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{device_type}'"


def semver(version: str) -> str:
    """A version as the driver publishes it (Masterminds semver): numeric parts without leading zeros, padded to
    three: ``580.178.04`` -> ``580.178.4``, ``13.0`` -> ``13.0.0``."""
    parts = [str(int(p)) for p in re.findall(r"\d+", version)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def architecture(family: str) -> str:
    """NVML's architecture name from the catalogue's family: ``ada-lovelace`` -> ``Ada Lovelace``."""
    return " ".join(word.capitalize() for word in family.split("-"))


_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3, "": 1}  # fmt: skip


def quantity_bytes(value: Any) -> int | None:
    """A Kubernetes quantity ("80Gi", "81559Mi", "85899345920", "1e3") as an integer; None when it is not one."""
    found = re.fullmatch(
        r"([0-9.]+)(?:([eE][-+]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?)", str(value).strip()
    )
    if not found:
        return None
    number = float(found[1])
    if found[2]:
        return int(number * 10 ** int(found[2][1:]))
    return int(number * _SUFFIX[found[3] or ""])


def binary_quantity(size: int) -> str:
    """Bytes as the API server writes a BinarySI quantity: the largest binary suffix that divides it."""
    for suffix, factor in (
        ("Ei", 2**60),
        ("Pi", 2**50),
        ("Ti", 2**40),
        ("Gi", 2**30),
        ("Mi", 2**20),
        ("Ki", 2**10),
    ):
        if size and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


@dataclass(frozen=True)
class ExpectedDevice:
    """One device a ``dra`` node must publish: its attributes (strings and versions, uuid/parentUUID left out:
    the hardware's) and its memory."""

    type: str
    attributes: tuple[tuple[str, str], ...]
    memory_bytes: int
    gpu_index: int = field(default=0, compare=False)  # which inventory GPU it stands for (for messages)

    @property
    def profile(self) -> str | None:
        return dict(self.attributes).get("profile")

    def describe(self) -> str:
        what = f"MIG {self.profile}" if self.type == MIG_TYPE else "GPU"
        product = dict(self.attributes).get("productName", "?")
        return f"{what} ({product}, memory {binary_quantity(self.memory_bytes)})"

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dict(self.attributes), "memory": binary_quantity(self.memory_bytes)}


def expected_devices(node: NodeSpec) -> list[ExpectedDevice]:
    """The devices of the node's ResourceSlices, in GPU order (empty for a device-plugin node)."""
    if node.knobs["gpu_allocation"] != "dra":
        return []
    model = node.model
    supports = cuda.driver_cuda(node.versions.driver)
    common = {
        "productName": node.gpu_model,
        "driverVersion": semver(node.versions.driver),
    }
    if supports is not None:
        common["cudaDriverVersion"] = semver(cuda.show(supports))
    if model is not None:
        common["architecture"] = architecture(model.family)
        common["cudaComputeCapability"] = semver("{}.{}".format(*model.compute_capability))
    whole_memory = (model.memory_mib if model else node.gpu_memory_mib or 0) * MIB
    layout = node.sharing.mig_layout or (None,) * node.gpu_count
    profiles = catalogue.mig_profiles(node.gpu_model) if node.mig_enabled_gpus else {}
    out: list[ExpectedDevice] = []
    for index, instances in enumerate(layout):
        if instances is None:
            attrs = {"type": GPU_TYPE, **common}
            out.append(ExpectedDevice(GPU_TYPE, tuple(sorted(attrs.items())), whole_memory, index))
            continue
        for profile in instances:
            attrs = {"type": MIG_TYPE, **common, "profile": profile}
            memory = profiles[profile].memory_mib * MIB
            out.append(ExpectedDevice(MIG_TYPE, tuple(sorted(attrs.items())), memory, index))
    return out


def summary(devices: list[ExpectedDevice]) -> list[str]:
    """One line per distinct device kind: ``4x GPU (NVIDIA A100-SXM4-80GB, memory 80Gi)``."""
    counts: dict[str, int] = {}
    for device in devices:
        counts[device.describe()] = counts.get(device.describe(), 0) + 1
    return [f"{n}x {what}" for what, n in counts.items()]
