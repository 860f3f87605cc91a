"""Issue #31 item 1, one test per class: knobs that are not knobs, strings that only look right, unbounded and
malformed structures, one host in two pools, an inventory that exits or raises."""

from __future__ import annotations

import time

import pytest
from test_spec import problems_of, write_inventory

from gpuready.cli import main
from gpuready.spec import kubesyntax, load_fleet
from gpuready.spec.knobs import RETIRED

MIG = {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_sharing": "mig"}


def one(tmp_path, key, **data) -> str:
    """The single problem line about ``key``."""
    lines = [p for p in problems_of(write_inventory(tmp_path, **data)) if f": {key} = " in p]
    assert len(lines) == 1, lines
    return lines[0]


# --- knobs that are not knobs ---------------------------------------------------------------------------------


def test_a_key_far_from_every_knob_is_refused(tmp_path):
    line = one(tmp_path, "accelerator_sharing_policy", accelerator_sharing_policy="mig")
    assert "host node-1" in line and "is not a gpuready knob" in line and "extra_data_keys" in line


def test_a_renamed_knob_names_its_successor_and_a_removed_one_says_so(tmp_path):
    line = one(tmp_path, "containerd_enable_cdi", containerd_enable_cdi=True)
    assert "was renamed to nvidia_cdi in gpuready 0.1.0" in line
    assert set(RETIRED) >= {"containerd_enable_cdi", "allow_reboot"}
    (tmp_path / "b").mkdir()
    assert "was removed in gpuready 0.1.0" in one(tmp_path / "b", "allow_reboot", allow_reboot=True)


# --- strings that only look right -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,value",
    [
        ("nvidia_driver_version", "580.178.04\n"),
        ("nvidia_container_toolkit_version", "1.20.0\n"),
        ("kubernetes_version", "1.36.3\n"),
        ("kube_ca_cert_hash", "sha256:" + "ab" * 32 + "\n"),
        ("vectoradd_image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd\n"),
        ("node_labels", {"pool": "a\n"}),
        ("node_labels", {"pool\n": "a"}),
        ("node_taints", ["a=b:NoSchedule\n"]),
    ],
)
def test_a_trailing_newline_is_refused(tmp_path, key, value):
    assert "host node-1" in one(tmp_path, key, **{key: value})


@pytest.mark.parametrize(
    "key,value",
    [
        ("nvidia_driver_version", "580.178.0\u0664"),  # ARABIC-INDIC DIGIT FOUR
        ("kubernetes_version", "1.\uff13\uff16.3"),  # FULLWIDTH DIGITS
        ("nvidia_driver_branch", "\uff15\uff18\uff10"),
        ("vectoradd_image", "nvcr.io/nvidia/cuda:12\u0664"),
    ],
)
def test_digits_are_ascii_digits(tmp_path, key, value):
    assert "host node-1" in one(tmp_path, key, **{key: value})


def test_ports_are_in_range(tmp_path):
    assert "1..65535" in one(tmp_path, "kube_api_endpoint", kube_api_endpoint="api.example.com:99999")
    (tmp_path / "b").mkdir()
    assert "1..65535" in one(tmp_path / "b", "ssh_port", ssh_port=70000)
    assert "70000" in kubesyntax.image_reference_problem("mirror:70000/nvidia/cuda:12") or ""


def test_host_names_are_dns_names(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text("pool = [('Node_1', {'gpu_model': 'NVIDIA L4', 'gpu_count': 1, 'kube_join': False})]\n")
    (line,) = problems_of(path)
    assert "host Node_1: host name = 'Node_1': must be a DNS name" in line


def test_duplicate_taints_are_refused(tmp_path):
    line = one(tmp_path, "node_taints", node_taints=["k=a:NoSchedule", "k=b:NoSchedule"])
    assert "duplicates the taint k:NoSchedule" in line


@pytest.mark.parametrize("floor", ["float('nan')", "float('inf')", "1e9"])
def test_floors_are_finite_and_bounded(tmp_path, floor):
    path = tmp_path / "inv.py"  # written by hand: repr(nan) is no Python literal
    path.write_text(
        "pool = [('node-1', {'gpu_model': 'NVIDIA L4', 'gpu_count': 1, 'kube_join': False, "
        f"'diag_bandwidth_floors': {{'h2d_gbps': {floor}}}}})]\n"
    )
    (line,) = problems_of(path)
    assert "host node-1: diag_bandwidth_floors = " in line and "a finite number" in line


@pytest.mark.parametrize("level", [2.0, True])
def test_integers_are_integers(tmp_path, level):
    assert "must be 1, 2 or 3" in one(tmp_path, "diag_dcgm_level", diag_dcgm_level=level)


# --- unbounded and malformed structures ----------------------------------------------------------------------


def test_a_huge_gpu_count_is_refused_at_once(tmp_path):
    start = time.monotonic()
    line = one(tmp_path, "gpu_count", **MIG, gpu_count=10**7, mig_layout=["1g.10gb"])
    assert time.monotonic() - start < 10
    assert "<= 32" in line


@pytest.mark.parametrize("layout", [{0: 7}, {0: [["1g.10gb"]]}, ["1g.10gb"] * 8])
def test_a_malformed_mig_layout_is_named_not_a_type_error(tmp_path, layout):
    assert "host node-1" in one(tmp_path, "mig_layout", **MIG, gpu_count=1, mig_layout=layout)


def test_one_host_in_two_pools_is_refused(tmp_path):
    path = tmp_path / "inv.py"
    path.write_text(
        "a = (['node-1'], {'gpu_model': 'NVIDIA L4', 'gpu_count': 1, 'kube_join': False})\n"
        "b = (['node-1'], {'gpu_model': 'Tesla T4', 'gpu_count': 1, 'kube_join': False})\n"
        "names = ['node-1']  # a group without data is no pool\n"
    )
    (line,) = problems_of(path)
    assert "host node-1: pools = ['a', 'b']: the host is in 2 pools" in line


# --- an inventory that exits or raises ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code,words",
    [
        ("import sys\nsys.exit(0)\n", "inv.py:2: the file calls sys.exit(0)"),
        ("x = 1\n1 / 0\n", "inv.py:2: ZeroDivisionError"),
    ],
)
def test_an_inventory_that_exits_or_raises_is_named_with_file_and_line(tmp_path, capsys, code, words):
    (tmp_path / "inv.py").write_text(code)
    assert main(["plan", str(tmp_path / "inv.py")]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_example_still_loads():
    from test_spec import EXAMPLE

    assert len(load_fleet(EXAMPLE).nodes) == 8
