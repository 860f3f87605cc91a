"""Reader for a dcgm-exporter ``/metrics`` scrape.

The metrics layer of the conformance suite asks "is there one series per GPU (or MIG instance) for each
required metric, and does a running GPU pod show up in the pod labels". That needs the exporter's label
conventions turned into typed fields (``gpu="0"`` -> 0, ``GPU_I_ID`` -> int, empty pod labels -> None),
while the exposition format itself is left to ``prometheus_client``'s parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gpuready.nvidia.errors import ParseError, check_text

__all__ = ["DcgmSample", "parse_dcgm_metrics"]

_TOOL = "dcgm-exporter metrics"


@dataclass(frozen=True)
class DcgmSample:
    """One sample of a scrape.

    ``labels`` is the raw label set; the typed fields are read from it and are None when the label is
    missing or empty (dcgm-exporter writes ``pod=""`` for a GPU no pod uses). ``gpu_instance_profile``
    and ``gpu_instance_id`` are set for MIG instances only (``GPU_I_PROFILE``, ``GPU_I_ID``).
    """

    metric: str
    metric_type: str
    value: float
    gpu: int | None
    uuid: str | None
    device: str | None
    model_name: str | None
    hostname: str | None
    gpu_instance_profile: str | None
    gpu_instance_id: int | None
    pod: str | None
    namespace: str | None
    container: str | None
    labels: dict[str, str] = field(hash=False)

    @property
    def key(self) -> tuple[str, int | None, int | None]:
        """(metric, gpu, gpu_instance_id): the identity a "one series per GPU or MIG instance" check counts."""
        return (self.metric, self.gpu, self.gpu_instance_id)


def _label(labels: dict[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def _label_int(labels: dict[str, str], name: str, metric: str) -> int | None:
    value = _label(labels, name)
    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,9}", value):
        raise ParseError(f"{_TOOL}: {metric} has {name}={value[:40]!r}, expected an integer")
    return int(value)


def parse_dcgm_metrics(text: str) -> list[DcgmSample]:
    """Read a dcgm-exporter scrape (Prometheus text format) into samples, in scrape order.

    Raises ParseError when the text is not valid exposition format, holds no sample, names a metric
    that is not a ``DCGM_`` one (the scrape hit the wrong endpoint), repeats a series, or declares a
    metric with ``# HELP``/``# TYPE`` and no sample after it, or ends on a comment line (dcgm-exporter
    writes those lines only for metrics it has values for, so either is a scrape cut short).
    """
    check_text(text, _TOOL)
    if not text.strip():
        raise ParseError(f"{_TOOL}: empty scrape")
    if text.strip().splitlines()[-1].startswith("#"):
        raise ParseError(f"{_TOOL}: ends with a comment line, not a sample; truncated scrape")
    try:
        families = list(text_string_to_metric_families(text))
    # prometheus_client's parser reports most garbled lines as ValueError, some as IndexError or KeyError, and a
    # timestamp of hundreds of digits as OverflowError
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, ArithmeticError) as exc:
        raise ParseError(
            f"{_TOOL}: not Prometheus text format ({str(exc)[:200]}); truncated or garbled scrape"
        ) from None
    samples: list[DcgmSample] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for family in families:
        if not family.samples:
            raise ParseError(f"{_TOOL}: {family.name} is declared but has no sample; truncated scrape")
        # prometheus_client renames the samples of a counter `X` to the OpenMetrics `X_total`; checks and
        # PromQL use the name dcgm-exporter exposes, so undo that unless the text itself says `X_total`.
        renamed = family.type == "counter" and f"# TYPE {family.name}_total " not in text
        for sample in family.samples:
            name = family.name if renamed and sample.name == f"{family.name}_total" else sample.name
            if not name.startswith("DCGM_"):
                raise ParseError(f"{_TOOL}: {name} is not a DCGM metric; wrong endpoint or garbled scrape")
            identity = (name, tuple(sorted(sample.labels.items())))
            if identity in seen:
                raise ParseError(f"{_TOOL}: series {name}{sample.labels} appears twice")
            seen.add(identity)
            labels = dict(sample.labels)
            try:
                value = float(sample.value)
            except (OverflowError, ValueError, TypeError):  # the parser keeps integers as int, of any size
                raise ParseError(
                    f"{_TOOL}: {name} has the value {str(sample.value)[:40]}, not a number"
                ) from None
            samples.append(
                DcgmSample(
                    metric=name,
                    metric_type=family.type,
                    value=value,
                    gpu=_label_int(labels, "gpu", name),
                    uuid=_label(labels, "UUID"),
                    device=_label(labels, "device"),
                    model_name=_label(labels, "modelName"),
                    hostname=_label(labels, "Hostname", "hostname"),
                    gpu_instance_profile=_label(labels, "GPU_I_PROFILE"),
                    gpu_instance_id=_label_int(labels, "GPU_I_ID", name),
                    pod=_label(labels, "pod"),
                    namespace=_label(labels, "namespace"),
                    container=_label(labels, "container"),
                    labels=labels,
                )
            )
    if not samples:
        raise ParseError(f"{_TOOL}: no samples")
    return samples
