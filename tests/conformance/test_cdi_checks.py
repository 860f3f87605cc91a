"""The CDI host checks on a real ``nvidia-smi -L`` capture (two H100s split into MIG devices) and containerd
dumps: each passes when the spec and containerd serve every device, and names what is missing otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from shims import DATA

from gpuready.conformance.checks import CannotCheck, Output, host
from gpuready.nvidia import cdi
from gpuready.nvidia.smi import parse_list

LIST = (
    Path(__file__).resolve().parents[1] / "fixtures/nvidia-smi-mig/nvidia_gpu_exporter__list_gpus.txt"
).read_text()


def ok(stdout: str) -> Output:
    return Output(0, stdout, "")


def spec_output(names: list[str], path: str = cdi.SPEC_PATH, kind: str = cdi.KIND) -> Output:
    """What ``spec_command`` prints for one spec file naming these devices, in nvidia-ctk's layout."""
    doc = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [
            {"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}} for n in names
        ],
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
    }
    return ok(f"{cdi.FILE_MARK}{path}\n---\n" + yaml.safe_dump(doc))


def every_name() -> list[str]:
    return list(cdi.expected_devices(parse_list(LIST)))


def test_a_spec_naming_every_mig_device_passes():
    names = every_name()
    assert "0:6" in names and "1:0" in names and "MIG-9e577b56-8dad-58fa-9799-b034b7e42ec9" in names
    assert "0" not in names  # a MIG-enabled GPU is not a device of its own
    assert host.cdi_spec(spec_output(names), ok(LIST)) == []


def test_a_stale_spec_names_the_missing_mig_devices():
    stale = [n for n in every_name() if not n.startswith("1:") and not n.startswith("MIG-9e577b56")]
    (problem,) = host.cdi_spec(spec_output(stale), ok(LIST))
    assert f"the CDI spec ({cdi.SPEC_PATH}) lacks" in problem
    assert "nvidia.com/gpu=1:0 (MIG device 1:0 (1g.10gb) of GPU 1)" in problem
    assert "unresolvable CDI devices" in problem and "systemctl start nvidia-cdi-refresh.service" in problem


def test_no_spec_at_all_names_the_refresh_units():
    (problem,) = host.cdi_spec(ok(""), ok(LIST))
    assert "no CDI spec of kind nvidia.com/gpu" in problem and "nvidia-cdi-refresh.path" in problem


def test_a_spec_that_does_not_parse_is_named():
    broken = ok(f"{cdi.FILE_MARK}{cdi.SPEC_PATH}\ncdiVersion: [unclosed\n")
    (problem,) = host.cdi_spec(broken, ok(LIST))
    assert problem.startswith(f"the CDI spec cannot be read: {cdi.SPEC_PATH} is not valid YAML")


def test_a_static_spec_in_etc_cdi_counts_too():
    names = every_name()
    both = spec_output(names[:3], cdi.STATIC_SPEC_PATH).stdout + spec_output(names[3:]).stdout
    assert host.cdi_spec(ok(both), ok(LIST)) == []


def test_without_nvidia_smi_the_check_cannot_judge():
    with pytest.raises(CannotCheck):
        host.cdi_spec(spec_output(every_name()), Output(9, "", "NVIDIA-SMI has failed"))


def test_containerd_with_cdi_off_fails_and_on_passes():
    default = (DATA / "containerd-dump-debian-default.toml").read_text()
    (problem,) = host.containerd_cdi(ok(default))
    assert "containerd has CDI off (enable_cdi = false" in problem
    enabled = default.replace(
        '[plugins."io.containerd.grpc.v1.cri"]\n',
        '[plugins."io.containerd.grpc.v1.cri"]\n    enable_cdi = true\n',
        1,
    )
    assert enabled != default
    assert host.containerd_cdi(ok(enabled)) == []


def test_containerd_2_has_cdi_on_by_default():
    v3 = 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  [plugins."io.containerd.cri.v1.runtime".containerd]\n'
    assert host.containerd_cdi(ok(v3)) == []
    off = v3.replace('runtime"]\n', 'runtime"]\n  enable_cdi = false\n', 1)
    assert "CDI off" in host.containerd_cdi(ok(off))[0]


@pytest.mark.parametrize(
    ("version", "problem"),
    [("1.6.20", "cannot inject CDI devices"), ("1.7.24", None), ("2.1.9", None)],
)
def test_containerd_versions_for_cdi(version, problem):
    found = cdi.containerd_problem(version)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_a_spec_from_before_a_driver_change_is_named():
    """The spec mounts the driver's libraries by version: one generated for another driver mounts files that are
    gone (a real A100 capture runs 535.54.03)."""
    capture = (
        Path(__file__).resolve().parents[1] / "fixtures/nvidia-smi-xml/telegraf__a100-sxm4-v12.xml"
    ).read_text()
    # trimmed upstream to one of its 4 GPUs: say so, or the report reads as cut short
    query = ok(capture.replace("<attached_gpus>4</attached_gpus>", "<attached_gpus>1</attached_gpus>"))

    def with_mounts(version: str) -> Output:
        out = spec_output(every_name())
        lib = f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}"
        return ok(
            out.stdout.replace("containerEdits:\n", f"containerEdits:\n  mounts:\n  - hostPath: {lib}\n", 1)
        )

    assert host.cdi_spec(with_mounts("535.54.03"), ok(LIST), query) == []
    (problem,) = host.cdi_spec(with_mounts("530.30.02"), ok(LIST), query)
    assert "mounts the libraries of driver 530.30.02 but driver 535.54.03 is loaded" in problem
    assert "nvidia-cdi-refresh.path" in problem
