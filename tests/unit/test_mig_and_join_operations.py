"""MIG layout and kubeadm join operations: facts in (built from real captures), commands out, secrets kept out."""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import OperationError, StringCommand
from pyinfra.context import ctx_host, ctx_state
from test_operations import FakeHost
from test_spec import write_inventory

from gpuready.deploy.facts.nvidia import MigState, NvidiaSmiState
from gpuready.deploy.operations import kubeadm, mig
from gpuready.nvidia import smi
from gpuready.spec import SpecError, load_fleet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# trimmed upstream to one of its 4 GPUs: read as a query of that GPU alone (the reader must be told 3 are left out)
A100 = smi.parse_query_xml(
    (FIXTURES / "nvidia-smi-xml" / "telegraf__a100-sxm4-v12.xml").read_text(), unlisted=3
)


def smi_state(modes: list[tuple[str, str]]) -> NvidiaSmiState:
    gpus = tuple(
        dataclasses.replace(A100.gpus[0], index=i, mig_mode_current=cur, mig_mode_pending=pend)
        for i, (cur, pend) in enumerate(modes)
    )
    return NvidiaSmiState(installed=True, report=dataclasses.replace(A100, gpus=gpus))


def mig_state(per_gpu: dict[int, list[str]]) -> MigState:
    rows = []
    for gpu, profiles in per_gpu.items():
        for n, name in enumerate(profiles):
            rows.append(smi.GpuInstanceRow(gpu, name, 0, n + 1, 0, 1))
    return MigState(gpu_instances=tuple(rows), compute_instances=())


def run(op, facts: dict, **kwargs):
    host = FakeHost({})
    host.get_fact = lambda cls, *a, **k: facts[cls.__name__]
    with ctx_state.use(SimpleNamespace(config=SimpleNamespace(DIFF=False))), ctx_host.use(host):
        commands = list(op._inner(**kwargs))
    return commands, host.noops


LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


def test_enables_mig_mode_resets_and_creates_in_one_run():
    facts = {"NvidiaSmi": smi_state([("Disabled", "Disabled")]), "MigInstances": mig_state({})}
    commands, _ = run(mig.layout, facts, per_gpu=(LAYOUT,))
    assert commands == [
        "nvidia-smi -i 0 -mig 1",
        "nvidia-smi -i 0 -r",
        "nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C",
    ]


def test_pending_mode_is_made_effective_with_a_reset():
    facts = {"NvidiaSmi": smi_state([("Disabled", "Enabled")]), "MigInstances": mig_state({})}
    commands, _ = run(mig.layout, facts, per_gpu=(LAYOUT,))
    assert commands[:1] == ["nvidia-smi -i 0 -r"]


def test_creates_in_an_order_the_driver_can_place():
    facts = {"NvidiaSmi": smi_state([("Enabled", "Enabled")]), "MigInstances": mig_state({})}
    commands, _ = run(mig.layout, facts, per_gpu=(("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),))
    assert commands == ["nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C"]


def test_creates_the_spec_instances_with_compute_instances():
    facts = {
        "NvidiaSmi": smi_state([("Enabled", "Enabled"), ("Disabled", "Disabled")]),
        "MigInstances": mig_state({}),
    }
    commands, _ = run(mig.layout, facts, per_gpu=(LAYOUT, None))
    assert commands == ["nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C"]  # GPU 1 stays whole


def test_matching_layout_is_a_noop_in_any_order():
    facts = {
        "NvidiaSmi": smi_state([("Enabled", "Enabled")]),
        "MigInstances": mig_state({0: ["1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb"]}),
    }
    commands, noops = run(mig.layout, facts, per_gpu=(LAYOUT,))
    assert commands == []
    assert noops == ["MIG layout matches the spec on GPUs [0]"]


def test_different_instances_are_not_destroyed_without_the_flag():
    facts = {"NvidiaSmi": smi_state([("Enabled", "Enabled")]), "MigInstances": mig_state({0: ["7g.80gb"]})}
    with pytest.raises(OperationError, match=r"GPU 0 has MIG instances \['7g.80gb'\].*mig_destroy_in_use"):
        run(mig.layout, facts, per_gpu=(LAYOUT,))
    commands, _ = run(mig.layout, facts, per_gpu=(LAYOUT,), destroy_existing=True)
    assert commands == [
        "nvidia-smi mig -i 0 -dci",
        "nvidia-smi mig -i 0 -dgi",
        "nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb,1g.10gb -C",
    ]


def test_mig_needs_a_working_driver():
    facts = {
        "NvidiaSmi": NvidiaSmiState(
            installed=True, error="Failed to initialize NVML: Driver/library version mismatch"
        )
    }
    with pytest.raises(OperationError, match="Driver/library version mismatch"):
        run(mig.layout, facts, per_gpu=(LAYOUT,))


# --- join ---------------------------------------------------------------------------------------------------------

TOKEN = "abcdef.0123456789abcdef"


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUREADY_JOIN_TOKEN", TOKEN)
    inv = write_inventory(tmp_path, node_labels={"pool": "inference"})
    return load_fleet(inv).nodes["node-1"]


def test_join_sends_the_token_on_stdin_only(node):
    commands, _ = run(kubeadm.join, {"KubeletJoined": None}, node=node)
    assert all(isinstance(c, StringCommand) for c in commands)
    for command in commands:
        assert TOKEN not in command.get_raw_value()
    (join,) = commands  # written, used and removed by one shell: no interruption falls between two commands
    config = join.connector_arguments["_stdin"]
    assert f"token: {TOKEN}" in config
    assert "name: node-1" in config
    assert (
        "value: nvidia.com/device-plugin.config=default,nvidia.com/gpu.present=true,pool=inference" in config
    )
    assert "effect: NoSchedule" in config and "key: nvidia.com/gpu" in config
    assert join.get_raw_value() == f"sh -c {shlex.quote(kubeadm.join_script())}"


def test_join_skipped_when_joined(node):
    commands, noops = run(kubeadm.join, {"KubeletJoined": "https://10.0.0.1:6443"}, node=node)
    assert commands == [] and noops == ["node has joined https://10.0.0.1:6443"]


def test_join_without_a_token_says_where_to_put_it(node, monkeypatch):
    monkeypatch.delenv("GPUREADY_JOIN_TOKEN")
    with pytest.raises(
        SpecError, match=r"no bootstrap token: set \$GPUREADY_JOIN_TOKEN or write it to /nonexistent/token"
    ):
        run(kubeadm.join, {"KubeletJoined": None}, node=node)
    assert "GPUREADY_JOIN_TOKEN" not in os.environ
