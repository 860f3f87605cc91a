"""``gpuready manifests``: the objects that run the conformance suite inside the cluster, as plain dicts (no I/O).

A Namespace (Pod Security ``restricted`` enforced), a ServiceAccount, a ClusterRole with the least RBAC the selected
layers need and its ClusterRoleBinding, a Job and a CronJob whose one container runs the command a user runs today,
``gpuready check --discover --connection pod --report-dir /reports`` (the suite installed with the package). The
pod takes its credentials from its service account (:func:`gpuready.kube.connect`'s in-cluster configuration).

Why a ClusterRole and not a Role: every pod the suite starts lives in a namespace of the run's own
(``gpuready-conformance-<random>``, created and deleted by the run), whose name no Role can know in advance, and
the node, metrics and policy layers read nodes and pods across namespaces.

The rules are derived from the API calls the layers make (see ``src/gpuready/conformance/suite/README.md``, "Running in the
cluster", for the table): one rule set per layer, merged for the selected layers. The host, gpu and diag layers
reach the nodes through probe pods (``--connection pod``), so they need what those pods need.
"""

from __future__ import annotations

import shlex
from typing import Any

from gpuready import __version__
from gpuready.conformance import report

Obj = dict[str, Any]
Rule = tuple[str, str, tuple[str, ...]]  # (API group, resource, verbs)

DEFAULT_NAMESPACE = "gpuready-conformance"
DEFAULT_SCHEDULE = "0 3 * * *"
NAME = "gpuready-conformance"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpuready"}
REPORTS = "/reports"
# the suite's layers (a --site directory's checks are a team's own, not in the image)
LAYERS = tuple(x for x in report.LAYERS if x != "site")
COMMAND = ("gpuready", "check", "--discover", "--connection", "pod", "--report-dir", REPORTS)
# the suite image of this release: a pinned tag, so the API server defaults imagePullPolicy to IfNotPresent (":latest"
# would make it Always, and the kubelet would pull on every run even where the image is loaded on the nodes)
DEFAULT_IMAGE = f"gpuready:{__version__}"
RUN_AS = 65532  # a non-root uid/gid (the "nonroot" user of distroless images); runAsNonRoot needs a number
TTL_SECONDS = 86400  # a finished Job (and its pod, with its log) is kept a day

# The suite's own pods, in a namespace of the run's own: created at once, followed with one watch (list + watch),
# their logs read, events of the failed ones listed, deleted with the namespace (and per check: deletecollection).
RUN_PODS: tuple[Rule, ...] = (
    ("", "namespaces", ("create", "delete")),
    ("", "pods", ("create", "get", "list", "watch", "delete", "deletecollection")),
    ("", "pods/log", ("get",)),
    ("", "events", ("list",)),
)
DRA_READ: tuple[Rule, ...] = (
    ("resource.k8s.io", "resourceslices", ("list",)),
    ("resource.k8s.io", "deviceclasses", ("list",)),
)
DRA_CLAIMS: tuple[Rule, ...] = (
    ("resource.k8s.io", "resourceclaims", ("create", "list")),
    ("resource.k8s.io", "resourceclaimtemplates", ("create",)),
)

# layer -> the rules its checks need (what each calls: gpuready/conformance/suite/test_<layer>.py and the modules they use)
LAYER_RULES: dict[str, tuple[Rule, ...]] = {
    # probe pods (gpuready.conformance.probe): one privileged pod per node in the run's probe namespace
    "host": RUN_PODS,
    "gpu": RUN_PODS,
    # one LIST of nodes and one of pods for the fleet, RuntimeClass nvidia, ResourceSlices and DeviceClasses
    "node": (
        ("", "nodes", ("list",)),
        ("", "pods", ("list",)),
        ("node.k8s.io", "runtimeclasses", ("get",)),
        *DRA_READ,
    ),
    # GPU pods on every node, DRA claims and claim templates of the run
    "workloads": (*RUN_PODS, *DRA_CLAIMS, *DRA_READ),
    # holder pods (and DRA claims) of the run, every pod listed to find dcgm-exporter, scraped through pods/proxy
    "metrics": (*RUN_PODS, *DRA_CLAIMS, ("", "pods/proxy", ("get",))),
    # taint, affinity and preemption pods; PriorityClasses; ResourceQuotas and a dry-run pod in their namespaces
    "policy": (
        *RUN_PODS,
        ("", "nodes", ("list",)),
        ("", "resourcequotas", ("list",)),
        ("scheduling.k8s.io", "priorityclasses", ("list",)),
    ),
    # bandwidth and DCGM diagnostics, run in probe pods as the host layer's commands are
    "diag": RUN_PODS,
}
# --discover: the expectations from GFD's labels, the device plugin's pods and its config (a ConfigMap anywhere),
# and a probe pod per node for what no label says (the toolkit's version)
DISCOVER_RULES: tuple[Rule, ...] = (
    *RUN_PODS,
    ("", "nodes", ("list",)),
    ("", "pods", ("list",)),
    ("", "configmaps", ("get",)),
)
# --write-back (and --taint-failed): the GPUConformance condition, the label and the taint on each node
WRITE_BACK_RULES: tuple[Rule, ...] = (
    ("", "nodes", ("get", "patch")),
    ("", "nodes/status", ("patch",)),
)
VERB_ORDER = ("get", "list", "watch", "create", "patch", "update", "delete", "deletecollection")


def rules(layers: list[str] | tuple[str, ...], write_back: bool = False) -> list[Obj]:
    """The ClusterRole's rules for ``layers`` (with --discover's, and --write-back's when asked): the union of the
    layers' rule sets, one rule per API group and resource, sorted."""
    unknown = [x for x in layers if x not in LAYER_RULES]
    if unknown:
        raise ValueError(f"unknown layer(s) {', '.join(unknown)}: the layers are {', '.join(LAYERS)}")
    merged: dict[tuple[str, str], set[str]] = {}
    wanted = [r for x in layers for r in LAYER_RULES[x]] + list(DISCOVER_RULES)
    for group, resource, verbs in wanted + (list(WRITE_BACK_RULES) if write_back else []):
        merged.setdefault((group, resource), set()).update(verbs)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(verbs, key=VERB_ORDER.index)}
        for (group, resource), verbs in sorted(merged.items())
    ]


def command(
    layers: list[str] | tuple[str, ...], write_back: bool = False, taint: float | None = None
) -> list[str]:
    """The container's command: the one users run, with ``-m`` when not every layer is selected, and with
    ``--taint-failed --taint-max-fraction <taint>`` when a taint fraction is given (it needs ``write_back``)."""
    if taint is not None and not write_back:
        raise ValueError("--taint-failed taints through the verdict written back: add --write-back")
    argv = list(COMMAND)  # the suite's pytest.ini says -p no:cacheprovider: the root filesystem is read-only
    if set(layers) != set(LAYERS):
        argv += ["-m", " or ".join(x for x in LAYERS if x in layers)]
    if write_back:
        argv.append("--write-back")
    if taint is not None:
        argv += ["--taint-failed", "--taint-max-fraction", f"{taint:g}"]
    return argv


def pod_spec(
    image: str, layers: list[str] | tuple[str, ...], write_back: bool = False, taint: float | None = None
) -> Obj:
    """The suite's pod: non-root, no privilege escalation, no capabilities, RuntimeDefault seccomp, a read-only
    root filesystem with /reports and /tmp as emptyDirs, requests and a memory limit."""
    return {
        "serviceAccountName": NAME,
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "conformance",
                "image": image,
                "command": command(layers, write_back, taint),
                "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "volumeMounts": [
                    {"name": "reports", "mountPath": REPORTS},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }
        ],
        "volumes": [{"name": "reports", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
    }


def _meta(name: str, namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name, "labels": dict(LABELS)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _job_spec(image: str, layers: list[str] | tuple[str, ...], write_back: bool, taint: float | None) -> Obj:
    return {
        "backoffLimit": 0,  # a failed run is a verdict, not a reason to run again
        "ttlSecondsAfterFinished": TTL_SECONDS,
        "template": {
            "metadata": {"labels": dict(LABELS)},
            "spec": pod_spec(image, layers, write_back, taint),
        },
    }


def render(
    namespace: str = DEFAULT_NAMESPACE,
    image: str = DEFAULT_IMAGE,
    schedule: str = DEFAULT_SCHEDULE,
    layers: list[str] | tuple[str, ...] = LAYERS,
    write_back: bool = False,
    taint: float | None = None,
) -> list[Obj]:
    """Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, Job, CronJob (in that order). ``taint``: the
    run's ``--taint-max-fraction`` with ``--taint-failed`` (None: no taint)."""
    layers = [x for x in LAYERS if x in layers] + [x for x in layers if x not in LAYERS]
    role = f"{NAME}-{namespace}" if namespace != DEFAULT_NAMESPACE else NAME  # cluster-wide: one per install
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {**LABELS, "pod-security.kubernetes.io/enforce": "restricted"},
            },
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(role),
            "rules": rules(layers, write_back),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(role),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _meta(NAME, namespace),
            "spec": _job_spec(image, layers, write_back, taint),
        },
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": _meta(NAME, namespace),
            "spec": {
                "schedule": schedule,
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 3,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {
                    "metadata": {"labels": dict(LABELS)},
                    "spec": _job_spec(image, layers, write_back, taint),
                },
            },
        },
    ]


SONOBUOY_RESULTS = "/tmp/sonobuoy/results"  # where Sonobuoy's worker collects a plugin's results


def sonobuoy_plugin(
    image: str = DEFAULT_IMAGE,
    layers: list[str] | tuple[str, ...] = LAYERS,
    write_back: bool = False,
    taint: float | None = None,
) -> Obj:
    """A Sonobuoy plugin definition (``sonobuoy run --plugin <file>``) whose results are the suite's JUnit.

    A Job-driver plugin: one pod runs the same command as the Job above, its reports in Sonobuoy's results
    directory, then names ``fleet.xml`` (one testsuite per node) in the ``done`` file, which is how a plugin tells
    Sonobuoy's worker it finished and which file to hand to the aggregator (``result-format: junit``). The file is
    written whatever the suite's exit status: a failing node is a result, not a plugin error. The pod runs under
    Sonobuoy's own service account (the ClusterRole above lists what the suite needs of it)."""
    reports = f"{SONOBUOY_RESULTS}/gpuready"
    argv = [*command(layers, write_back, taint)]
    argv[argv.index(REPORTS)] = reports
    run = " ".join(shlex.quote(word) for word in argv)
    return {
        "sonobuoy-config": {
            "driver": "Job",
            "plugin-name": "gpuready",
            "result-format": "junit",
            "description": f"gpuready's GPU node conformance suite ({', '.join(x for x in LAYERS if x in layers)}), "
            "one JUnit testsuite per GPU node",
        },
        "spec": {
            "name": "plugin",
            "image": image,
            "command": ["sh", "-c", f"{run}; echo {reports}/fleet.xml > {SONOBUOY_RESULTS}/done"],
            "volumeMounts": [{"mountPath": SONOBUOY_RESULTS, "name": "results"}],
        },
    }
