"""Install the GPU cluster add-ons: ``pyinfra inventory/<env>.py deploys/cluster_addons.py``.

Applied from the machine running pyinfra with the official Kubernetes client and server-side apply, to the
cluster named by ``kubeconfig`` in group data: RuntimeClass ``nvidia``, the device plugin with one config per node
configuration, GPU feature discovery, node-feature-discovery (``addons_nfd``: what turns GFD's features into Node
labels), dcgm-exporter, optional quotas and priority classes. Each node is labelled
with the device-plugin config it must run. Objects gpuready applied earlier that the spec no longer renders are
named, and deleted only with ``addons_prune = True``. A field someone else changed on an add-on object (another
field manager: ``kubectl edit``, a controller) stops the deploy with the object, field and manager named, unless
``addons_take_ownership = True``. The alert rules (idle GPU held by a pod, XID errors, row remapping, temperature; proven with promtool) are written to
``reports/gpu-alerts.yaml`` for your Prometheus, by an operation: ``--dry`` writes nothing.
"""

from pyinfra import host, logger
from pyinfra.api import OperationError

from gpuready.deploy.addons import (
    ALERTS,
    PRUNED_KINDS,
    AddonSettings,
    alert_rules_text,
    prometheus_rules,
    render_all,
)
from gpuready.deploy.context import current_node, fleet_for
from gpuready.deploy.operations import cluster_objects
from gpuready.deploy.plan import nfd_note
from gpuready.kube import describe

node = current_node()
kubeconfig = node.knobs["kubeconfig"]
settings = AddonSettings.from_node(node)
try:  # fail in seconds, before any operation, when the cluster cannot be reached
    cluster_objects.cluster(kubeconfig, None)
except OperationError as exc:
    raise SystemExit(
        f"gpuready: {exc} (kubeconfig: {kubeconfig or '$KUBECONFIG or ~/.kube/config'})"
    ) from None

fleet = fleet_for(host.inventory)
if (note := nfd_note(fleet)) and node.name == next(iter(fleet.nodes)):  # said once, not once per host
    logger.warning(f"--> gpuready: {note}")
manifests = render_all(fleet, settings)
take_ownership = node.knobs["addons_take_ownership"]
for manifest in manifests:
    cluster_objects.applied(
        name=f"Apply {describe(manifest)}",
        manifest=manifest,
        kubeconfig=kubeconfig,
        take_ownership=take_ownership,
        _run_once=True,
    )
cluster_objects.pruned(
    name="Prune objects the spec no longer renders",
    rendered=manifests,
    prune=node.knobs["addons_prune"],
    kubeconfig=kubeconfig,
    also_kinds=PRUNED_KINDS,
    _run_once=True,
)

cluster_objects.node_labels(
    name="Label the node with its device-plugin config",
    node=node.name,
    labels=node.node_labels,
    kubeconfig=kubeconfig,
)

cluster_objects.local_file(
    name=f"Write the alert rules to {ALERTS}",
    path=ALERTS,
    text=alert_rules_text(prometheus_rules(settings)),
    _run_once=True,
)
