"""dcgm-exporter scrape reader against real scrapes (tests/fixtures/SOURCES.md) with exact expected values."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from gpuready.nvidia.dcgm import DcgmSample, parse_dcgm_metrics
from gpuready.nvidia.errors import ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter"
A100_UUID = "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"
A100 = "NVIDIA A100-SXM4-40GB"

# Metrics in the order dcgm-exporter wrote them, per GPU (or MIG instance).
MIG_METRICS = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
]
T4_METRICS = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
]
A100_NO_MIG_METRICS = [
    *MIG_METRICS[:7],
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    *MIG_METRICS[7:11],
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    *MIG_METRICS[11:],
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
]


def scrapes(name: str) -> list[str]:
    """The scrapes in a fixture, without the title line (and ``----`` separator) its author added."""
    lines = (FIXTURES / name).read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("#"))
    return [part.strip("\n") for part in re.split(r"\n-{20,}\n", "\n".join(lines[first:]))]


def only_scrape(name: str) -> str:
    (text,) = scrapes(name)
    return text


def series(samples: list[DcgmSample]) -> Counter:
    """How many samples each (gpu, uuid, device, model, host, MIG profile, GI, pod, ns, container) has."""
    return Counter(
        (
            s.gpu,
            s.uuid,
            s.device,
            s.model_name,
            s.hostname,
            s.gpu_instance_profile,
            s.gpu_instance_id,
            s.pod,
            s.namespace,
            s.container,
        )
        for s in samples
    )


def test_datadog_composite_scrape() -> None:
    samples = parse_dcgm_metrics(only_scrape("datadog__dcgm_metrics.txt"))
    assert len(samples) == 38
    assert samples[0] == DcgmSample(
        metric="DCGM_FI_DEV_SM_CLOCK",
        metric_type="gauge",
        value=300.0,
        gpu=0,
        uuid="GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
        device="nvidia0",
        model_name="Tesla T4",
        hostname="424773df46e0",
        gpu_instance_profile=None,
        gpu_instance_id=None,
        pod=None,
        namespace=None,
        container=None,
        labels={
            "gpu": "0",
            "UUID": "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
            "device": "nvidia0",
            "modelName": "Tesla T4",
            "Hostname": "424773df46e0",
            "DCGM_FI_DRIVER_VERSION": "460.106.00",
            "DCGM_FI_PROCESS_NAME": "/usr/bin/dcgm-exporter",
        },
    )
    assert series(samples) == {
        (0, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "nvidia0", "Tesla T4", "424773df46e0", None, None, None,
         None, None): 16,
        (0, "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5", "nvidia0", "Tesla T4", "551bdf382151", None, None, None,
         None, None): 7,
        (0, "GPU-abc", "nvidia0", "NVIDIA A10G", "ip-11111", None, None, "ray-1111111", "ray-llm", "ray-worker"): 1,
        (None, None, None, None, None, None, None, None, None, None): 14,  # the "dummy values" block: no labels
    }  # fmt: skip
    by_metric = {s.metric: s for s in samples}
    energy = by_metric["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert (energy.metric_type, energy.value) == ("counter", 128996013.0)
    assert by_metric["DCGM_FI_DEV_POWER_USAGE"].value == 8.969
    assert by_metric["DCGM_FI_PROF_DRAM_ACTIVE"].value == 0.000003
    assert by_metric["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"].labels == {}


def test_two_t4_with_one_pod() -> None:
    samples = parse_dcgm_metrics(only_scrape("fake-gpu-operator__dcgm_2x-tesla-t4_1-workload.ini"))
    host = "nvidia-dcgm-exporter-s228n"
    pod = "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw"
    assert series(samples) == {
        (0, "GPU-7a2e92f2-be71-d37e-a744-541600ffc722", "nvidia0", "Tesla T4", host, None, None, pod,
         "runai-reservation", "runai-reservation"): 19,
        (1, "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9", "nvidia1", "Tesla T4", host, None, None, None, None, None): 19,
    }  # fmt: skip
    assert [s.metric for s in samples if s.gpu == 0] == T4_METRICS
    assert [s.metric for s in samples if s.gpu == 1] == T4_METRICS
    values = {(s.metric, s.gpu): s.value for s in samples}
    assert values[("DCGM_FI_DEV_SM_CLOCK", 0)] == 585.0
    assert values[("DCGM_FI_DEV_SM_CLOCK", 1)] == 300.0
    assert values[("DCGM_FI_DEV_FB_USED", 0)] == 128.0
    assert values[("DCGM_FI_DEV_FB_USED", 1)] == 5.0
    assert values[("DCGM_FI_PROF_PCIE_RX_BYTES", 1)] == 10888.0
    assert samples[1].labels["pod"] == "" and samples[1].pod is None  # empty label -> None, raw kept


@pytest.mark.parametrize(
    ("name", "host", "instances", "fb_used"),
    [
        (
            "fake-gpu-operator__dcgm_a100-40gb-mig_active-1g.5gb.ini",
            "nvidia-dcgm-exporter-km55s",
            [("1g.5gb", 9)],
            [4384.0],
        ),
        (
            "fake-gpu-operator__dcgm_a100-40gb-mig_active-2x1g.5gb+2g.10gb.ini",
            "nvidia-dcgm-exporter-q28k4",
            [("1g.5gb", 7), ("1g.5gb", 9), ("2g.10gb", 5)],
            [98.0, 4384.0, 153.0],
        ),
        (
            "fake-gpu-operator__dcgm_a100-40gb-mig_idle-1g.5gb-allocated.ini",
            "nvidia-dcgm-exporter-m48cc",
            [("1g.5gb", 8)],
            [6.0],
        ),
    ],
)
def test_mig_instances_are_labelled(name: str, host: str, instances: list, fb_used: list) -> None:
    samples = parse_dcgm_metrics(only_scrape(name))
    assert series(samples) == {
        (0, A100_UUID, "nvidia0", A100, host, profile, gi, None, None, None): len(MIG_METRICS)
        for profile, gi in instances
    }
    for profile, gi in instances:
        assert [s.metric for s in samples if s.gpu_instance_id == gi] == MIG_METRICS
        assert {s.gpu_instance_profile for s in samples if s.gpu_instance_id == gi} == {profile}
    assert [s.value for s in samples if s.metric == "DCGM_FI_DEV_FB_USED"] == fb_used
    assert len({s.key for s in samples}) == len(samples)


def test_a100_without_mig_instances() -> None:
    disabled = [
        parse_dcgm_metrics(text)
        for text in scrapes("fake-gpu-operator__dcgm_a100-40gb_empty-mig-disabled.ini")
    ]
    assert len(disabled) == 2
    for samples in disabled:
        assert [s.metric for s in samples] == A100_NO_MIG_METRICS
        key = (0, A100_UUID, "nvidia0", A100, "nvidia-dcgm-exporter-drqwq", None, None, None, None, None)
        assert series(samples) == {key: 23}
    assert disabled[0][0].value == 210.0
    enabled = parse_dcgm_metrics(only_scrape("fake-gpu-operator__dcgm_a100-40gb_empty-mig-enabled.ini"))
    no_fb = [m for m in MIG_METRICS if m not in ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED")]
    assert [s.metric for s in enabled] == [*no_fb, "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"]
    assert series(enabled) == {
        (0, A100_UUID, "nvidia0", A100, "nvidia-dcgm-exporter-wwvv9", None, None, None, None, None): 14
    }
    assert [s.metric_type for s in enabled][5:7] == ["counter", "counter"]


def test_lowercase_hostname_label_is_accepted() -> None:
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-x",hostname="node-7",GPU_I_ID="",pod=""} 41\n'
    (sample,) = parse_dcgm_metrics(text)
    assert (sample.metric_type, sample.gpu, sample.hostname, sample.gpu_instance_id, sample.pod) == (
        "unknown",
        3,
        "node-7",
        None,
        None,
    )


def test_counter_declared_with_total_suffix_keeps_it() -> None:
    text = '# TYPE DCGM_EXP_XID_total counter\nDCGM_EXP_XID_total{gpu="0"} 2\n'
    assert [s.metric for s in parse_dcgm_metrics(text)] == ["DCGM_EXP_XID_total"]


ALL_SCRAPES = [
    (name, index)
    for name in sorted(path.name for path in FIXTURES.iterdir())
    for index in range(len(scrapes(name)))
]


@pytest.mark.parametrize(("name", "index"), ALL_SCRAPES)
def test_scrape_cut_in_the_middle_of_a_sample_is_rejected(name: str, index: int) -> None:
    text = scrapes(name)[index]
    cut = text[: text.index("{", len(text) // 2) + 10]  # inside the label set of a sample
    with pytest.raises(ParseError, match="dcgm-exporter metrics: not Prometheus text format"):
        parse_dcgm_metrics(cut)


@pytest.mark.parametrize(("name", "index"), ALL_SCRAPES)
def test_scrape_cut_after_a_help_line_is_rejected(name: str, index: int) -> None:
    text = scrapes(name)[index]
    help_line = text.index("# HELP", len(text) // 2)
    with pytest.raises(ParseError, match="truncated scrape"):
        parse_dcgm_metrics(text[: text.index("\n", help_line) + 1])
    type_line = text.index("# TYPE", help_line)
    with pytest.raises(ParseError, match="truncated scrape"):
        parse_dcgm_metrics(text[: text.index("\n", type_line) + 1])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty scrape"),
        ("\n\n", "empty scrape"),
        ("\x00\xff\xfe garbage {}<>\n", "not Prometheus text format"),
        ("<html><body>404 page not found</body></html>\n", "not Prometheus text format"),
        ("# HELP up Whether up.\n# TYPE up gauge\nup 1\n", "up is not a DCGM metric"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\nDCGM_FI_DEV_GPU_TEMP{gpu="0"} 41\n', "appears twice"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="zero"} 40\n', "gpu='zero', expected an integer"),
    ],
)
def test_garbage_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_dcgm_metrics(text)
