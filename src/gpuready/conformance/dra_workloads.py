"""The workloads layer's pods on ``gpu_allocation = "dra"`` nodes: GPUs through ResourceClaimTemplates.

Each pod is the device-plugin pod of :func:`gpuready.conformance.workloads.gpu_pod` (same hardening, node pin and
tolerations) with its extended-resource limit replaced by a pod claim made from a ResourceClaimTemplate of the
run's namespace: ``gpu`` (one device of DeviceClass ``gpu.nvidia.com``), ``mig-<profile>`` (one ``mig.nvidia.com``
device whose ``profile`` attribute is that profile), ``gpus-<n>`` (n whole GPUs at once, the unsatisfiable claim).
The real scheduler allocates each claim from the node's ResourceSlices; the templates go with the namespace.
"""

from __future__ import annotations

import json
from typing import Any

from gpuready.conformance import workloads as wl
from gpuready.kube import MANAGED_BY
from gpuready.spec import NodeSpec, dra

Obj = dict[str, Any]
CLAIM = "gpu"  # the pod claim's and the device request's name


def claim_template(device_class: str = dra.GPU_CLASS, count: int = 1, profile: str | None = None) -> Obj:
    """A ResourceClaimTemplate asking for ``count`` devices of ``device_class`` (of one MIG ``profile``)."""
    request: Obj = {"deviceClassName": device_class, "count": count}
    name = "gpu" if count == 1 else f"gpus-{count}"
    if profile is not None:
        request["deviceClassName"] = dra.MIG_CLASS
        request["selectors"] = [
            {"cel": {"expression": f"device.attributes['{dra.DRIVER}'].profile == '{profile}'"}}
        ]
        name = "mig-" + profile.replace(".", "-").replace("+", "-")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": request}]}}},
    }


def single_device(node: NodeSpec) -> Obj:
    """The template of a single-device pod on ``node``: a whole GPU where it has one, else its first MIG profile."""
    if node.gpu_count - len(node.mig_enabled_gpus) > 0:
        return claim_template()
    return claim_template(profile=sorted(node.mig_device_counts())[0])


def dra_pod(name: str, node: NodeSpec, image: str, template: Obj, *, command: list[str] | None = None,
            check: str) -> Obj:  # fmt: skip
    """``gpu_pod``'s pod with a claim from ``template`` instead of an extended resource."""
    pod = wl.gpu_pod(name, node, image, "nvidia.com/gpu", command=command, check=check)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": CLAIM}]}
    pod["spec"]["resourceClaims"] = [
        {"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    return pod


def ensure_templates(workloads: wl.Workloads, templates: list[Obj]) -> None:
    """Create these templates in the run's namespace (each name once per run)."""
    from kubernetes import client

    workloads.ensure_namespace()
    done: set[str] = getattr(workloads, "dra_templates", set())
    api = client.ResourceV1Api(workloads.cluster.api)
    for template in templates:
        name = template["metadata"]["name"]
        if name not in done:
            api.create_namespaced_resource_claim_template(workloads.namespace, template)  # type: ignore[arg-type]
            workloads.requests += 1
            done.add(name)
    workloads.dra_templates = done  # type: ignore[attr-defined]


def list_dra_objects(cluster: Any) -> tuple[list[Obj], dict[str, Obj]]:
    """(every ResourceSlice, DeviceClasses by name): two LISTs for the whole fleet."""
    from kubernetes import client

    api = client.ResourceV1Api(cluster.api)
    # with _preload_content=False the client returns the raw urllib3 response, not the list it is annotated with
    raw: Any = api.list_resource_slice(_preload_content=False)
    slices = json.loads(raw.data)["items"]
    raw = api.list_device_class(_preload_content=False)
    classes = json.loads(raw.data)["items"]
    return slices, {c["metadata"]["name"]: c for c in classes}
