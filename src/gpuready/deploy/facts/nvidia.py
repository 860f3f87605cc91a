"""What the driver and MIG steps decide on, read from nvidia-smi with the project's parsers."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from gpuready.nvidia import smi

_NOT_INSTALLED = "__gpuready_no_nvidia_smi__"


@dataclass(frozen=True)
class NvidiaSmiState:
    """The driver as nvidia-smi sees it; ``error`` holds nvidia-smi's own message when it failed (e.g. NVML mismatch)."""

    installed: bool
    report: smi.SmiReport | None = None
    error: str | None = None


class NvidiaSmi(FactBase[NvidiaSmiState]):
    """
    Returns ``nvidia-smi -q -x`` parsed, or why it could not run.

    .. code:: python

        NvidiaSmiState(installed=True, report=SmiReport(driver_version="580.178.04", gpus=(...)), error=None)
    """

    def command(self) -> str:
        # nvidia-smi prints its errors (NVML mismatch, no devices) on stdout and exits non-zero: keep both
        return f"command -v nvidia-smi >/dev/null || {{ echo {_NOT_INSTALLED}; exit 0; }}; nvidia-smi -q -x 2>&1 || true"

    @staticmethod
    def process(output: list[str]) -> NvidiaSmiState:
        if output and output[0] == _NOT_INSTALLED:
            return NvidiaSmiState(installed=False)
        text = "\n".join(output)
        if "<nvidia_smi_log>" not in text:
            return NvidiaSmiState(installed=True, error=text.strip() or "nvidia-smi printed nothing")
        return NvidiaSmiState(installed=True, report=smi.parse_query_xml(text))


@dataclass(frozen=True)
class MigState:
    """GPU instances and compute instances per GPU index, as ``nvidia-smi mig -lgi`` / ``-lci`` list them."""

    gpu_instances: tuple[smi.GpuInstanceRow, ...]
    compute_instances: tuple[smi.ComputeInstanceRow, ...]

    def profiles_on(self, gpu: int) -> list[str]:
        """The GPU instance profile names on one GPU, sorted, for comparing with the spec's layout."""
        return sorted(gi.name for gi in self.gpu_instances if gi.gpu == gpu)


_SPLIT = "__gpuready_lci__"


class MigInstances(FactBase[MigState]):
    """
    Returns the MIG GPU and compute instances of every GPU.

    .. code:: python

        MigState(gpu_instances=(GpuInstanceRow(gpu=0, name="3g.40gb", profile_id=9, instance_id=2, ...),), ...)
    """

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "nvidia-smi"

    def command(self) -> str:
        return f"nvidia-smi mig -lgi 2>&1 || true; echo {_SPLIT}; nvidia-smi mig -lci 2>&1 || true"

    @staticmethod
    def process(output: list[str]) -> MigState:
        text = "\n".join(output)
        lgi, _, lci = text.partition(_SPLIT)
        return MigState(
            # "No GPU instances found" / "No MIG-enabled devices found." print no table: nothing to parse
            gpu_instances=tuple(smi.parse_mig_lgi(lgi)) if "|====" in lgi else (),
            compute_instances=tuple(smi.parse_mig_lci(lci)) if "|====" in lci else (),
        )
