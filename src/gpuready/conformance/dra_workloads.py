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


# two pods, one claim: time-slicing as a config on the claim ------------------------------------------------------

SHARED_PODS = 2
TIME_SLICING = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
}


def shares_whole_gpu(node: NodeSpec) -> bool:
    """Time-slicing settings apply to whole GPUs only: the node needs one with MIG off."""
    return node.gpu_count - len(node.mig_enabled_gpus) > 0


def shared_claim(node: NodeSpec) -> Obj:
    """A ResourceClaim of one whole GPU with the driver's time-slicing config, for pods of ``node`` to share."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"shared-{node.name}", "labels": dict(MANAGED_BY)},
        "spec": {
            "devices": {
                "requests": [{"name": CLAIM, "exactly": {"deviceClassName": dra.GPU_CLASS, "count": 1}}],
                "config": [
                    {"requests": [CLAIM], "opaque": {"driver": dra.DRIVER, "parameters": TIME_SLICING}}
                ],
            }
        },
    }


def shared_pod_names(node: NodeSpec) -> list[str]:
    return [f"{shared_claim(node)['metadata']['name']}-{i}" for i in range(SHARED_PODS)]


def claim_pod(name: str, node: NodeSpec, image: str, claim: str, command: list[str], check: str) -> Obj:
    """``gpu_pod``'s pod with the devices of the ResourceClaim ``claim`` (of the run's namespace)."""
    pod = wl.gpu_pod(name, node, image, "nvidia.com/gpu", command=command, check=check)
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": CLAIM}]}
    pod["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimName": claim}]
    return pod


def shared_pods(node: NodeSpec, image: str, command: list[str], check: str) -> list[Obj]:
    """``SHARED_PODS`` pods on ``node`` naming the same ResourceClaim (``shared_claim``)."""
    claim = shared_claim(node)["metadata"]["name"]
    return [claim_pod(name, node, image, claim, command, check) for name in shared_pod_names(node)]


def held_claim(node: NodeSpec) -> Obj:
    """A ResourceClaim ``holder-<node>`` of one device of ``node`` (``single_device``'s request), for a pod that
    holds it while the metrics layer looks for the claim in dcgm-exporter's labels."""
    request = single_device(node)["spec"]["spec"]["devices"]["requests"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"holder-{node.name}", "labels": dict(MANAGED_BY)},
        "spec": {"devices": {"requests": request}},
    }


def create_claims(workloads: wl.Workloads, claims: list[Obj]) -> None:
    """Create these ResourceClaims in the run's namespace (they go with it)."""
    from kubernetes import client

    workloads.ensure_namespace()
    api = client.ResourceV1Api(workloads.cluster.api)
    for claim in claims:
        api.create_namespaced_resource_claim(workloads.namespace, claim)  # type: ignore[arg-type]
        workloads.requests += 1


def allocated(workloads: wl.Workloads, names: list[str]) -> dict[str, list[str]]:
    """Claim name -> the devices (``pool/device``) the scheduler allocated to it (empty: not allocated)."""
    from kubernetes import client

    if not names:
        return {}
    api = client.ResourceV1Api(workloads.cluster.api)
    raw: Any = api.list_namespaced_resource_claim(workloads.namespace, _preload_content=False)
    workloads.requests += 1
    out: dict[str, list[str]] = {name: [] for name in names}
    for claim in json.loads(raw.data)["items"]:
        name = claim["metadata"]["name"]
        if name in out:
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            )
            out[name] = [f"{r.get('pool')}/{r.get('device')}" for r in results or []]
    return out
