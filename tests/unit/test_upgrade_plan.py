"""The rolling upgrade's decisions: which node needs what, reboots, batches, the unavailability budget, the spec knobs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_spec import EXAMPLE, problems_of, write_inventory

from gpuready import verdict as verdicts
from gpuready.deploy import upgrade
from gpuready.deploy.facts.nvidia import NvidiaSmiState
from gpuready.deploy.upgrade.maintenance import FAILURE_ANNOTATION, STATE_ANNOTATION, NodeView
from gpuready.spec import load_fleet

H100 = "gpu-train-01.prod.example.com"


@pytest.fixture(scope="module")
def spec():
    return load_fleet(EXAMPLE).nodes[H100]  # NVSwitch node: the driver includes Fabric Manager


def installed(spec, **changed: str) -> dict[str, list[str]]:
    """What an up-to-date node has installed, with some packages at other versions."""
    pins = dict(pin.split("=", 1) for step in ("driver", "toolkit") for pin in spec.apt_packages[step])
    pins.update(changed)
    return {name: [version] for name, version in pins.items()}


def smi(version: str | None = None, error: str | None = None) -> NvidiaSmiState:
    report = SimpleNamespace(driver_version=version) if version else None
    return NvidiaSmiState(installed=True, report=report, error=error)  # type: ignore[arg-type]


def view(name: str = H100, state: str | None = None, **kw) -> NodeView:
    return NodeView(
        name, exists=True, ready=True, annotations={STATE_ANNOTATION: state} if state else {}, **kw
    )


def test_up_to_date_node_is_skipped(spec) -> None:
    work = upgrade.node_work(spec, installed(spec), smi(spec.versions.driver), view())
    assert (work.needed, work.reboot, work.resume) == (False, False, None)


def test_a_finished_earlier_upgrade_is_not_resumed(spec) -> None:
    work = upgrade.node_work(spec, installed(spec), smi(spec.versions.driver), view(state=upgrade.DONE))
    assert not work.needed


def test_driver_change_needs_reboot_and_names_every_package(spec) -> None:
    old = "570.195.03-1"
    have = installed(spec, **{"nvidia-driver": old, "nvidia-persistenced": old, "nvidia-fabricmanager": old})
    work = upgrade.node_work(spec, have, smi("570.195.03"), view())
    assert work.reboot
    assert work.reasons == (
        f"nvidia-driver 570.195.03-1 -> {spec.versions.driver_package}",
        f"nvidia-persistenced 570.195.03-1 -> {spec.versions.driver_package}",
        f"nvidia-fabricmanager 570.195.03-1 -> {spec.versions.driver_package}",
    )


def test_toolkit_change_alone_does_not_reboot(spec) -> None:
    work = upgrade.node_work(
        spec, installed(spec, **{"libnvidia-container1": "1.17.8-1"}), smi(spec.versions.driver), view()
    )
    assert (work.needed, work.reboot) == (True, False)
    assert work.reasons == (f"libnvidia-container1 1.17.8-1 -> {spec.versions.toolkit_package}",)


def test_installed_but_not_loaded_driver_needs_a_reboot(spec) -> None:
    mismatch = smi(
        error="Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95"
    )
    work = upgrade.node_work(spec, installed(spec), mismatch, view())
    assert work.reboot
    assert work.reasons == (
        f"loaded driver is not {spec.versions.driver} (NVML library version: 580.95): a reboot loads it",
    )


def test_node_left_part_way_is_resumed_even_at_the_pinned_versions(spec) -> None:
    work = upgrade.node_work(spec, installed(spec), smi(spec.versions.driver), view(state=upgrade.VALIDATING))
    assert (work.needed, work.reboot, work.resume) == (True, False, upgrade.VALIDATING)
    assert work.reasons == (f"an earlier run stopped at {STATE_ANNOTATION}=validating: finishing it",)


def test_batches_put_resumed_nodes_first_then_inventory_order() -> None:
    def w(name: str, needed: bool = True, resume: str | None = None) -> upgrade.NodeWork:
        return upgrade.NodeWork(name, ("x",) if needed else (), False, resume)

    order = ["a", "b", "c", "d", "e"]
    work = {"a": w("a"), "b": w("b", needed=False), "c": w("c"), "d": w("d", resume="drained"), "e": w("e")}
    assert upgrade.batches(order, work, 2) == [["d", "a"], ["c", "e"]]
    assert upgrade.batches(order, work, 10) == [["d", "a", "c", "e"]]
    assert upgrade.batches(order, {n: w(n, needed=False) for n in order}, 2) == []


def test_unavailability_budget_counts_nodes_outside_the_batch() -> None:
    views = {
        "a": view("a"),
        "b": view("b", unschedulable=True),  # cordoned by someone else
        "c": NodeView("c", exists=True, ready=False),  # NotReady
        "d": view("d"),
    }
    assert upgrade.over_budget(["a"], views, max_unavailable=3) == []
    assert upgrade.over_budget(["a"], views, max_unavailable=2) == ["b", "c"]
    assert upgrade.over_budget(["b", "c"], views, max_unavailable=2) == []  # the batch's own nodes


def test_preflight_refuses_driverless_and_unjoined_nodes(spec) -> None:
    with pytest.raises(upgrade.PlanError) as info:
        upgrade.preflight(
            [spec], {H100: NvidiaSmiState(installed=False)}, {H100: NodeView(H100, exists=False)}
        )
    assert str(info.value).splitlines()[1:] == [
        f"  - {H100}: no NVIDIA driver installed: run deploys/gpu_node.py first",
        f"  - {H100}: no Node of that name in the cluster: join it with deploys/gpu_node.py",
    ]


def test_preflight_refuses_a_node_that_stopped_answering(spec) -> None:
    with pytest.raises(upgrade.PlanError) as info:
        upgrade.preflight([spec], {H100: None}, {H100: view(state=upgrade.REBOOTING)})
    assert str(info.value).splitlines()[1:] == [
        f"  - {H100}: stopped answering over SSH while its state was read ({STATE_ANNOTATION}=rebooting: an "
        "earlier run may have left it rebooting): run again once it answers, or leave it out with --limit"
    ]


def test_failed_checks_from_a_verdict() -> None:
    verdict = {
        "nodes": {
            "n1": {
                "layers": {
                    "gpu": {
                        "checks": {
                            "test_no_xid_errors[n1]": {
                                "status": "fail",
                                "message": "GPU 0: Xid 79\n  fallen off",
                            },
                            "test_gpu_count[n1]": {"status": "pass", "message": ""},
                        }
                    },
                    "host": {"checks": {"test_driver_version[n1]": {"status": "pass", "message": ""}}},
                }
            }
        }
    }
    assert verdicts.failed_checks(verdict, "n1") == ["gpu::test_no_xid_errors[n1]: GPU 0: Xid 79 fallen off"]
    assert verdicts.failed_checks(verdict, "n2") == []
    assert verdicts.not_proven(verdict, "n1") == verdicts.failed_checks(verdict, "n1")
    # a node whose every check skipped, or that is not in the verdict, is not proven ready: it stays cordoned
    assert verdicts.not_proven(verdict, "n2") == ["n2 is not in the verdict: no check of it ran"]
    skipped = {
        "nodes": {"n3": {"verdict": "skip", "layers": {"host": {"checks": {"t": {"status": "skip"}}}}}}
    }
    assert verdicts.not_proven(skipped, "n3") == [
        "no check of n3 passed (its verdict is 'skip'): nothing was proven"
    ]
    passed = {"nodes": {"n4": {"verdict": "pass", "layers": {"host": {"checks": {"t": {"status": "pass"}}}}}}}
    assert verdicts.not_proven(passed, "n4") == []


def test_a_verdict_file_that_is_missing_or_not_a_verdict_is_named(tmp_path: Path) -> None:
    with pytest.raises(verdicts.VerdictError, match="cannot read the verdict"):
        verdicts.read(tmp_path / "verdict.json")
    (tmp_path / "verdict.json").write_text("{not json")
    with pytest.raises(verdicts.VerdictError, match="not JSON"):
        verdicts.read(tmp_path / "verdict.json")
    (tmp_path / "verdict.json").write_text("[]")
    with pytest.raises(verdicts.VerdictError, match="not a gpuready verdict"):
        verdicts.read(tmp_path / "verdict.json")


def test_policy_defaults_and_a_batch_larger_than_max_unavailable_refused(tmp_path: Path) -> None:
    node = load_fleet(write_inventory(tmp_path, upgrade_batch_size=2, upgrade_max_unavailable=4)).nodes[
        "node-1"
    ]
    assert (node.upgrade.batch_size, node.upgrade.max_unavailable) == (2, 4)
    assert (node.upgrade.drain_gpu_pods_only, node.upgrade.drain_force, node.upgrade.drain_timeout) == (
        True,
        False,
        600,
    )
    bad = tmp_path / "bad"
    bad.mkdir()
    assert problems_of(write_inventory(bad, upgrade_batch_size=3, upgrade_max_unavailable=1)) == [
        f"{bad / 'inv.py'}: host node-1: upgrade_batch_size = 3: cannot exceed upgrade_max_unavailable = 1: a "
        "batch is out of service all at once"
    ]


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("upgrade_batch_size", 0, "must be an integer >= 1 and <= 100000"),
        ("upgrade_max_unavailable", "2", "must be an integer >= 1 and <= 100000"),
        ("drain_gpu_pods_only", "yes", "must be True or False"),
        ("drain_timeout", -1, "must be an integer >= 1 and <= 604800"),
    ],
)
def test_bad_upgrade_knobs_are_refused(tmp_path: Path, key: str, value, allowed: str) -> None:
    assert problems_of(write_inventory(tmp_path, **{key: value})) == [
        f"{tmp_path / 'inv.py'}: host node-1: {key} = {value!r}: {allowed}"
    ]


@pytest.mark.parametrize(
    ("needed", "validated", "annotations", "unschedulable", "status", "detail"),
    [
        (False, False, {}, False, "skipped", "at the pinned driver and toolkit: skipped, not cordoned"),
        (True, True, {STATE_ANNOTATION: "done"}, False, "upgraded", "validated and uncordoned (a -> b)"),
        (True, False, {STATE_ANNOTATION: "failed", FAILURE_ANNOTATION: "gpu::test_xid: Xid 79"}, True,
         "failed", "stays cordoned: gpu::test_xid: Xid 79"),
        # done by an earlier run, not reached by this one: not "upgraded"
        (True, False, {STATE_ANNOTATION: "done"}, False, "not-started", "not started: the run stopped before its batch"),
        (True, False, {}, False, "not-started", "not started: the run stopped before its batch"),
        (True, False, {STATE_ANNOTATION: "rebooting"}, True, "stopped",
         f"stopped at {STATE_ANNOTATION}=rebooting, cordoned: run the deploy again to finish"),
    ],
)  # fmt: skip
def test_run_outcome_per_node(needed, validated, annotations, unschedulable, status, detail) -> None:
    work = upgrade.NodeWork(H100, ("a -> b",) if needed else (), reboot=needed, resume=None)
    after = NodeView(H100, exists=True, ready=True, unschedulable=unschedulable, annotations=annotations)
    assert upgrade.outcome(work, after, validated) == (status, detail)


def test_run_summary_is_reported_once_when_the_run_ends_not_at_a_reboot(monkeypatch) -> None:
    from pyinfra.api.state import StateStage

    from gpuready.deploy.upgrade.tasks import RunSummary

    summary = RunSummary(plan=None)  # type: ignore[arg-type]
    reports: list[str] = []
    monkeypatch.setattr(summary, "report", lambda: reports.append("report"))
    node = SimpleNamespace(name="n1")
    running = SimpleNamespace(current_stage=StateStage.Execute, active_hosts=[node])
    summary.host_disconnect(running, node)  # a reboot mid-run
    assert reports == []
    all_failed = SimpleNamespace(
        current_stage=StateStage.Execute, active_hosts=set()
    )  # "No hosts remaining!"
    summary.host_disconnect(all_failed, node)
    summary.host_disconnect(all_failed, node)
    assert reports == ["report"]
    finished = RunSummary(plan=None)  # type: ignore[arg-type]
    monkeypatch.setattr(finished, "report", lambda: reports.append("finished"))
    for stage in (StateStage.Prepare, StateStage.Disconnect, StateStage.Disconnect):  # --dry reports nothing
        finished.host_disconnect(SimpleNamespace(current_stage=stage, active_hosts=[node]), node)
    assert reports == ["report", "finished"]


def _pod(name: str, phase: str, ready: bool) -> Any:
    from kubernetes import client

    conditions = [client.V1PodCondition(type="Ready", status="True" if ready else "False")]
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name),
                        status=client.V1PodStatus(phase=phase, conditions=conditions))  # fmt: skip


def test_after_a_reboot_the_validation_waits_for_the_nodes_add_on_pods() -> None:
    """Seen on the lab's real kubelets: the node was Ready in its new boot while its device plugin pod's
    config-manager was still restarting, and the validation failed the upgrade on node/test_device_plugin_ready.
    wait_pods_ready asks for the node's pods of the add-ons namespace until all are Running and Ready."""

    from gpuready.deploy.upgrade import maintenance

    answers = iter([
        [_pod("nvidia-device-plugin-x", "Running", False), _pod("gfd-y", "Pending", False)],
        [_pod("nvidia-device-plugin-x", "Running", True), _pod("gfd-y", "Running", True), _pod("job", "Succeeded", False)],
    ])  # fmt: skip
    asked: list[tuple[str, str]] = []

    def list_namespaced_pod(namespace: str, field_selector: str) -> Any:
        asked.append((namespace, field_selector))
        return SimpleNamespace(items=next(answers))

    cluster: Any = SimpleNamespace(core=SimpleNamespace(list_namespaced_pod=list_namespaced_pod))
    ticks = iter(range(100))
    assert (
        maintenance.wait_pods_ready(cluster, "n1", "gpu-system", 30, lambda: next(ticks), lambda _s: None)
        == []
    )
    assert asked == [("gpu-system", "spec.nodeName=n1")] * 2
    # never Ready: the ones still waiting at the deadline, for the log line before the suite names them
    stuck: Any = SimpleNamespace(core=SimpleNamespace(list_namespaced_pod=lambda namespace, field_selector: SimpleNamespace(
        items=[_pod("nvidia-device-plugin-x", "Running", False), _pod("gfd-y", "Pending", False)])))  # fmt: skip
    ticks = iter(range(100))
    assert maintenance.wait_pods_ready(
        stuck, "n1", "gpu-system", 3, lambda: next(ticks), lambda _s: None
    ) == [
        "gfd-y (Pending)",
        "nvidia-device-plugin-x (Running)",
    ]


def test_after_a_reboot_a_pods_status_from_the_last_boot_does_not_count() -> None:
    """Seen on the lab's real kubelets once a host rebooted in 2 s: the node was Ready in its new boot and its
    device plugin pod still Running and Ready from the last one, until the kubelet reported it Pending. With the
    boot time, a pod counts only once every container of it started in this boot."""
    from datetime import UTC, datetime, timedelta

    from kubernetes import client

    from gpuready.deploy.upgrade import maintenance

    boot = datetime(2026, 11, 28, 20, 32, 9, tzinfo=UTC)

    def started(name: str, *ats: datetime | None) -> Any:
        pod = _pod(name, "Running", True)
        pod.status.container_statuses = [
            client.V1ContainerStatus(name=f"c{i}", image="i", image_id="", ready=True, restart_count=0,
                                     state=client.V1ContainerState(running=client.V1ContainerStateRunning(started_at=at)))
            for i, at in enumerate(ats)
        ]  # fmt: skip
        return pod

    before, after = boot - timedelta(seconds=40), boot + timedelta(seconds=3)
    pods = [started("plugin", after, before), started("gfd", after, after), started("exporter", boot)]
    assert maintenance.not_ready_pods(pods, since=boot) == ["plugin (status from before the boot)"]
    assert maintenance.not_ready_pods(pods) == []  # without a boot time, as before
    assert maintenance.not_ready_pods([_pod("no-statuses", "Running", True)], since=boot) == [
        "no-statuses (status from before the boot)"
    ]
