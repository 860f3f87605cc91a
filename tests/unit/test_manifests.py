"""``gpuready manifests``: the least RBAC per layer and their union, the hardened pod, YAML that validates."""

from __future__ import annotations

import shlex
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from gpuready import cli
from gpuready.conformance import manifests
from gpuready.conformance.manifests import LAYERS

KUBERNETES = "1.34.0"  # resource.k8s.io/v1 (the suite's DRA calls) is GA from 1.34


def granted(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def by_kind(objects: list[dict]) -> dict[str, dict]:
    return {o["kind"]: o for o in objects}


def test_every_layer_has_a_rule_set():
    assert set(manifests.LAYER_RULES) == set(LAYERS)


def test_node_layer_only_reads():
    assert granted(_as_rules(manifests.LAYER_RULES["node"])) == {
        ("", "nodes", "list"),
        ("", "pods", "list"),
        ("node.k8s.io", "runtimeclasses", "get"),
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "deviceclasses", "list"),
    }


def _as_rules(rules):
    return [{"apiGroups": [g], "resources": [r], "verbs": list(v)} for g, r, v in rules]


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_gets_exactly_its_rules_and_discovers(layer):
    expected = granted(_as_rules(manifests.LAYER_RULES[layer])) | granted(_as_rules(manifests.DISCOVER_RULES))
    assert granted(manifests.rules([layer])) == expected


def test_the_selected_layers_get_the_union():
    union = granted(manifests.rules(["node", "metrics", "policy"]))
    for layer in ("node", "metrics", "policy"):
        assert granted(manifests.rules([layer])) <= union
    assert ("", "pods/proxy", "get") in union  # metrics' scrape
    assert ("scheduling.k8s.io", "priorityclasses", "list") in union  # policy's
    assert ("", "pods/proxy", "get") not in granted(manifests.rules(["node", "policy"]))
    rules = manifests.rules(list(LAYERS))
    keys = [(r["apiGroups"][0], r["resources"][0]) for r in rules]
    assert len(keys) == len(set(keys)), "one rule per API group and resource"


def test_write_back_is_granted_only_when_asked():
    nodes_writes = {("", "nodes", "patch"), ("", "nodes/status", "patch"), ("", "nodes", "get")}
    assert not nodes_writes & granted(manifests.rules(list(LAYERS)))
    assert nodes_writes <= granted(manifests.rules(list(LAYERS), write_back=True))


def test_nothing_beyond_what_the_suite_calls():
    everything = granted(manifests.rules(list(LAYERS), write_back=True))
    assert not {v for _, _, v in everything} & {"*", "escalate", "bind", "impersonate", "update"}
    assert not {r for _, r, _ in everything} & {"*", "secrets", "pods/exec", "pods/attach", "nodes/proxy"}
    assert all(g != "*" for g, _, _ in everything)


def test_non_disruptive_layers_create_no_claims():
    rules = granted(manifests.rules(["host", "gpu", "node"]))
    assert not {r for _, r, v in rules if v == "create"} & {"resourceclaims", "resourceclaimtemplates"}


def test_unknown_layer_is_refused():
    with pytest.raises(ValueError, match=r"unknown layer.*nope"):
        manifests.rules(["node", "nope"])


def test_the_pod_is_hardened():
    objects = by_kind(manifests.render(image="registry.example/gpuready:1"))
    for spec in (
        objects["Job"]["spec"]["template"]["spec"],
        objects["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ):
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["serviceAccountName"] == manifests.NAME
        (container,) = spec["containers"]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["privileged"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["readOnlyRootFilesystem"] is True
        assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
        assert container["image"] == "registry.example/gpuready:1"
        assert container["command"][:7] == [
            "gpuready", "check", "--discover", "--connection", "pod", "--report-dir", "/reports",
        ]  # fmt: skip
    assert objects["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_job_and_cronjob_run_once_at_a_time():
    objects = by_kind(manifests.render(schedule="*/30 * * * *"))
    job, cron = objects["Job"]["spec"], objects["CronJob"]["spec"]
    for spec in (job, cron["jobTemplate"]["spec"]):
        assert spec["backoffLimit"] == 0
        assert spec["ttlSecondsAfterFinished"] > 0
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["schedule"] == "*/30 * * * *"


def test_selected_layers_become_the_marker_expression():
    assert "-m" not in manifests.command(list(LAYERS))
    argv = manifests.command(["node", "host", "gpu"], write_back=True)
    assert argv[argv.index("-m") + 1] == "host or gpu or node"
    assert argv[-1] == "--write-back"


def test_the_binding_names_the_service_account_of_the_namespace():
    objects = by_kind(manifests.render(namespace="gpu-checks"))
    binding = objects["ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": manifests.NAME, "namespace": "gpu-checks"}
    ]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]
    for kind in ("ServiceAccount", "Job", "CronJob"):
        assert objects[kind]["metadata"]["namespace"] == "gpu-checks"


@pytest.mark.parametrize("argv", [[], ["--layers", "host,gpu,node", "--write-back", "--namespace", "x"]])
def test_the_cli_prints_yaml_that_validates(argv, capsys):
    assert cli.main(["manifests", "--image", "gpuready:test", *argv]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["kind"] for o in objects] == [
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job", "CronJob",
    ]  # fmt: skip
    for manifest in objects:
        kubernetes_validate.validate(manifest, KUBERNETES, strict=True)


def test_validation_would_catch_a_bad_job():
    job = by_kind(manifests.render())["Job"]
    job["spec"]["backofLimit"] = job["spec"].pop("backoffLimit")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES, strict=True)


def test_the_cli_refuses_an_unknown_layer(capsys):
    assert cli.main(["manifests", "--layers", "host,bogus"]) == 2
    assert "unknown layer(s) bogus" in capsys.readouterr().err


def test_the_sonobuoy_plugin_runs_the_suite_and_hands_over_its_junit(tmp_path):
    """The plugin's command is the Job's (same layers, same options), its reports under Sonobuoy's results
    directory, and the done file names fleet.xml whatever the suite's exit status; an unknown layer is refused."""
    plugin = yaml.safe_load(
        subprocess.run(
            [sys.executable, "-m", "gpuready.cli", "manifests", "--sonobuoy", "--layers", "host,gpu,node",
             "--image", "registry.example/gpuready:1"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    config, spec = plugin["sonobuoy-config"], plugin["spec"]
    assert (config["driver"], config["plugin-name"], config["result-format"]) == ("Job", "gpuready", "junit")
    assert spec["image"] == "registry.example/gpuready:1"
    assert spec["volumeMounts"] == [{"mountPath": "/tmp/sonobuoy/results", "name": "results"}]
    shell, flag, script = spec["command"]
    assert (shell, flag) == ("sh", "-c")
    run, done = script.split("; ")
    job = manifests.command(["host", "gpu", "node"])
    job[job.index(manifests.REPORTS)] = "/tmp/sonobuoy/results/gpuready"
    assert shlex.split(run) == job
    assert done == "echo /tmp/sonobuoy/results/gpuready/fleet.xml > /tmp/sonobuoy/results/done"
    # the file the done line names is the one the suite writes: report.write_reports' JUnit
    from gpuready.conformance.report import FleetResults, write_reports

    written = write_reports(FleetResults([], "inventory.py"), tmp_path, 0)
    assert (tmp_path / "fleet.xml") in written
    bad = subprocess.run(
        [sys.executable, "-m", "gpuready.cli", "manifests", "--sonobuoy", "--layers", "host,gpus"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown layer(s) gpus" in bad.stderr and not bad.stdout
