"""Defaulting and validation at create/update time, matching the real API's observable results.

Only what clients look at is defaulted (pod restartPolicy, container imagePullPolicy, QoS class, service
clusterIP, namespace phase, ...) and only what users hit is validated (names, required fields, quantities,
extended-resource requests == limits, DaemonSet selector vs template labels, immutable pod fields).
"""

from __future__ import annotations

import base64
import ipaddress
import itertools
import re
from typing import Any

from . import errors
from .quantity import is_valid_quantity, parse_quantity
from .resources import Resource

Obj = dict[str, Any]
Cause = tuple[str, str, str]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
# Resources whose names must be DNS-1123 labels rather than subdomains.
_LABEL_NAMED = {"namespaces", "services"}
_STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
_cluster_ips = (str(ipaddress.ip_address("10.96.0.0") + i) for i in itertools.count(10))

DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def validate_metadata(res: Resource, obj: Obj, creating: bool) -> None:
    meta = obj.get("metadata")
    name = (meta or {}).get("name") or ""
    if not isinstance(meta, dict) or (not name and not (creating and meta.get("generateName"))):
        raise errors.invalid(
            res.kind, res.group, name, [("metadata.name", "FieldValueRequired",
                                                  "Required value: name or generateName is required")]
        )  # fmt: skip
    check = name or (meta.get("generateName", "") + "a")
    pattern, msg = (_LABEL, _LABEL_MSG) if res.plural in _LABEL_NAMED else (_SUBDOMAIN, _SUBDOMAIN_MSG)
    if res.plural in ("nodes",):
        pattern, msg = _SUBDOMAIN, _SUBDOMAIN_MSG
    if len(check) > 253 or not pattern.match(check):
        field = "metadata.name" if name else "metadata.generateName"
        raise errors.invalid(res.kind, res.group, name,
                             [(field, "FieldValueInvalid", f'Invalid value: "{check}": {msg}')])  # fmt: skip
    for k, v in (meta.get("labels") or {}).items():
        if (
            not isinstance(v, str)
            or len(v) > 63
            or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", v)
        ):
            raise errors.invalid(
                res.kind, res.group, name,
                [("metadata.labels", "FieldValueInvalid", f'Invalid value: "{v}": a valid label must be an empty '
                  "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                  "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation "
                  "is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")],
            )  # fmt: skip
        if not re.match(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", k):  # fmt: skip
            raise errors.invalid(res.kind, res.group, name,
                                 [("metadata.labels", "FieldValueInvalid", f'Invalid value: "{k}": name part must '
                                   "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                   "with an alphanumeric character")])  # fmt: skip


# defaulting ------------------------------------------------------------------------------------------------


def default(res: Resource, obj: Obj, store_lookup: Any = None) -> None:
    fn = _DEFAULTERS.get(res.key)
    if fn is not None:
        fn(obj, store_lookup)


def _default_namespace(obj: Obj, _: Any) -> None:
    meta = obj["metadata"]
    if meta.get("name"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")


def _default_container(c: Obj) -> None:
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = (
            "Always" if ("@" not in tag and (":" not in tag or tag.endswith(":latest"))) else "IfNotPresent"
        )
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        requests = res.setdefault("requests", {})
        for k, v in limits.items():
            requests.setdefault(k, v)
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def default_pod_spec(spec: Obj) -> None:
    for c in itertools.chain(spec.get("initContainers") or [], spec.get("containers") or []):
        _default_container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    if "serviceAccountName" not in spec and "serviceAccount" in spec:
        spec["serviceAccountName"] = spec["serviceAccount"]


def _default_pod(obj: Obj, lookup: Any) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if "priority" not in spec:
        spec["priority"] = _priority(spec.get("priorityClassName"), lookup)
    tolerations = spec.setdefault("tolerations", [])
    for t in DEFAULT_TOLERATIONS:
        if not any(
            x.get("key") == t["key"] and x.get("effect", t["effect"]) == t["effect"] for x in tolerations
        ):
            tolerations.append(dict(t))
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", qos_class(spec))


def admit_pod(pod: Obj, lookup: Any) -> None:
    """The Priority and RuntimeClass admission plugins: unknown class names are rejected with 403 Forbidden, and a
    RuntimeClass's overhead and scheduling constraints are merged into the pod."""
    spec = pod.get("spec") or {}
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    pc_name = spec.get("priorityClassName")
    if pc_name and lookup("priorityclasses.scheduling.k8s.io", "", pc_name) is None:
        raise errors.ApiError(403, "Forbidden", f'pods "{name}" is forbidden: no PriorityClass with name {pc_name} '
                              "was found", {"name": name, "kind": "pods"})  # fmt: skip
    rc_name = spec.get("runtimeClassName")
    if not rc_name:
        return
    rc = lookup("runtimeclasses.node.k8s.io", "", rc_name)
    if rc is None:
        raise errors.ApiError(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: RuntimeClass '
                              f'"{rc_name}" not found', {"name": name, "kind": "pods"})  # fmt: skip
    overhead = (rc.get("overhead") or {}).get("podFixed")
    if overhead and "overhead" not in spec:
        spec["overhead"] = dict(overhead)
    scheduling = rc.get("scheduling") or {}
    for k, v in (scheduling.get("nodeSelector") or {}).items():
        if spec.setdefault("nodeSelector", {}).get(k, v) != v:
            raise errors.ApiError(403, "Forbidden", f'pods "{name}" is forbidden: conflict: runtimeClass.scheduling.'
                                  f"nodeSelector[{k}] = {v}; pod.spec.nodeSelector[{k}] = "
                                  f"{spec['nodeSelector'][k]}", {"name": name, "kind": "pods"})  # fmt: skip
        spec["nodeSelector"][k] = v
    tolerations = spec.setdefault("tolerations", [])
    for t in scheduling.get("tolerations") or []:
        if t not in tolerations:
            tolerations.append(dict(t))


def _priority(class_name: str | None, lookup: Any) -> int:
    if class_name and lookup is not None:
        pc = lookup("priorityclasses.scheduling.k8s.io", "", class_name)
        if pc is not None:
            return int(pc.get("value", 0))
    return 0


def qos_class(spec: Obj) -> str:
    containers = spec.get("containers") or []
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and parse_quantity(req[r]) != parse_quantity(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_daemonset(obj: Obj, _: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})  # fmt: skip
    spec.setdefault("revisionHistoryLimit", 10)
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {})
    default_pod_spec(template.setdefault("spec", {}))
    obj.setdefault("status", {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                              "numberReady": 0})  # fmt: skip


def _default_replicaset(obj: Obj, _: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {})
    default_pod_spec(template.setdefault("spec", {}))
    if not obj.get("status"):
        obj["status"] = {"replicas": 0}


def _default_pdb(obj: Obj, _: Any) -> None:
    obj.setdefault("spec", {})
    if not obj.get("status"):
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def _default_service(obj: Obj, _: Any) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if "clusterIP" not in spec:
        spec["clusterIP"] = next(_cluster_ips)
    if spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))
    obj.setdefault("status", {"loadBalancer": {}})


def _default_secret(obj: Obj, _: Any) -> None:
    obj.setdefault("type", "Opaque")
    # stringData is write-only: the server folds it into data, as the real one does
    for k, v in (obj.pop("stringData", None) or {}).items():
        obj.setdefault("data", {})[k] = base64.b64encode(str(v).encode()).decode()


def _default_node(obj: Obj, _: Any) -> None:
    obj.setdefault("spec", {})
    obj.setdefault("status", {}).setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})


def _default_priorityclass(obj: Obj, _: Any) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


_DEFAULTERS = {
    "namespaces": _default_namespace,
    "pods": _default_pod,
    "daemonsets.apps": _default_daemonset,
    "replicasets.apps": _default_replicaset,
    "poddisruptionbudgets.policy": _default_pdb,
    "services": _default_service,
    "secrets": _default_secret,
    "nodes": _default_node,
    "priorityclasses.scheduling.k8s.io": _default_priorityclass,
}


# validation ------------------------------------------------------------------------------------------------


def validate(res: Resource, obj: Obj, old: Obj | None) -> None:
    causes: list[Cause] = []
    fn = _VALIDATORS.get(res.key)
    if fn is not None:
        fn(obj, old, causes)
    if causes:
        raise errors.invalid(res.kind, res.group, obj["metadata"].get("name", ""), causes)


def _validate_pod_spec(spec: Obj, prefix: str, causes: list[Cause]) -> None:
    containers = spec.get("containers")
    if not containers:
        causes.append((f"{prefix}.containers", "FieldValueRequired", "Required value"))
        return
    seen: set[str] = set()
    for i, c in enumerate(containers):
        path = f"{prefix}.containers[{i}]"
        if not c.get("name"):
            causes.append((f"{path}.name", "FieldValueRequired", "Required value"))
        elif c["name"] in seen:
            causes.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{c["name"]}"'))
        else:
            seen.add(c["name"])
        if not c.get("image"):
            causes.append((f"{path}.image", "FieldValueRequired", "Required value"))
        res = c.get("resources") or {}
        for section in ("requests", "limits"):
            for rname, q in (res.get(section) or {}).items():
                if not is_valid_quantity(q):
                    causes.append((f"{path}.resources.{section}[{rname}]", "FieldValueInvalid",
                                   f'Invalid value: "{q}": must be a valid quantity'))  # fmt: skip
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for rname in set(req) | set(lim):
            if rname in _STANDARD_RESOURCES or "/" not in rname or rname.startswith("hugepages-"):
                continue
            if rname not in lim:
                causes.append((f"{path}.resources.limits", "FieldValueRequired",
                               "Required value: Limit must be set for non overcommitable resources"))  # fmt: skip
            elif (
                rname in req
                and is_valid_quantity(req[rname])
                and is_valid_quantity(lim[rname])
                and (parse_quantity(req[rname]) != parse_quantity(lim[rname]))
            ):
                causes.append((f"{path}.resources.requests[{rname}]", "FieldValueInvalid",
                               f'Invalid value: "{req[rname]}": must be equal to {rname} limit of {lim[rname]}'))  # fmt: skip
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append((f"{prefix}.restartPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "Always", "OnFailure", "Never"'))  # fmt: skip


def _validate_pod(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    _validate_pod_spec(obj.get("spec") or {}, "spec", causes)
    if old is not None:
        a, b = dict(old.get("spec") or {}), dict(obj.get("spec") or {})
        for s in (a, b):
            s.pop("activeDeadlineSeconds", None)
            s["containers"] = [
                {k: v for k, v in c.items() if k != "image"} for c in s.get("containers") or []
            ]
            s.pop("tolerations", None)
        if a != b:
            causes.append(("spec", "FieldValueForbidden", "Forbidden: pod updates may not change fields other "
                           "than `spec.containers[*].image`,`spec.initContainers[*].image`,"
                           "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
                           "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                           "previously negative)"))  # fmt: skip


def _validate_daemonset(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    from .selectors import match_label_selector_object

    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector:
        causes.append(("spec.selector", "FieldValueRequired", "Required value"))
    elif not match_label_selector_object(selector, labels):
        causes.append(("spec.template.metadata.labels", "FieldValueInvalid",
                       f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`"))  # fmt: skip
    if old is not None and selector != (old.get("spec") or {}).get("selector"):
        causes.append(("spec.selector", "FieldValueInvalid",
                       f"Invalid value: {_go_selector(selector)}: field is immutable"))  # fmt: skip
    _validate_pod_spec(template.get("spec") or {}, "spec.template.spec", causes)
    policy = (template.get("spec") or {}).get("restartPolicy", "Always")
    if policy != "Always":
        causes.append(("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "Always"'))  # fmt: skip


def _validate_replicaset(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    """ValidateReplicaSetSpec (apps/v1): selector required, non-empty, matching the template labels, immutable."""
    from .selectors import match_label_selector_object

    spec = obj.get("spec") or {}
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 0:
        causes.append(("spec.replicas", "FieldValueInvalid",
                       f"Invalid value: {replicas}: must be greater than or equal to 0"))  # fmt: skip
    selector = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector is None:
        causes.append(("spec.selector", "FieldValueRequired", "Required value"))
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(("spec.selector", "FieldValueInvalid",
                       f"Invalid value: {_go_selector(selector)}: empty selector is invalid for deployment"))  # fmt: skip
    elif not match_label_selector_object(selector, labels):
        causes.append(("spec.template.metadata.labels", "FieldValueInvalid",
                       f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`"))  # fmt: skip
    if old is not None and selector != (old.get("spec") or {}).get("selector"):
        causes.append(("spec.selector", "FieldValueInvalid",
                       f"Invalid value: {_go_selector(selector)}: field is immutable"))  # fmt: skip
    _validate_pod_spec(template.get("spec") or {}, "spec.template.spec", causes)
    policy = (template.get("spec") or {}).get("restartPolicy", "Always")
    if policy != "Always":
        causes.append(("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "Always"'))  # fmt: skip


def _validate_pdb(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    """ValidatePodDisruptionBudgetSpec: each budget a non-negative int or a percentage up to 100%."""
    spec = obj.get("spec") or {}
    for name in ("minAvailable", "maxUnavailable"):
        value = spec.get(name)
        path = f"spec.{name}"
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            causes.append((path, "FieldValueInvalid", f"Invalid value: {value}: must be an integer or percentage "
                           "(e.g '5%%')"))  # fmt: skip
        elif isinstance(value, int):
            if value < 0:
                causes.append((path, "FieldValueInvalid",
                               f"Invalid value: {value}: must be greater than or equal to 0"))  # fmt: skip
        elif not re.match(r"^[0-9]+%$", value):
            causes.append((path, "FieldValueInvalid",
                           f"Invalid value: {value}: must be an integer or percentage (e.g '5%%')"))  # fmt: skip
        elif int(value[:-1]) > 100:
            causes.append(
                (path, "FieldValueInvalid", f"Invalid value: {value}: must not be greater than 100%")
            )
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(("spec", "FieldValueInvalid",
                       "Invalid value: policy.PodDisruptionBudgetSpec: minAvailable and maxUnavailable cannot be "
                       "both set"))  # fmt: skip
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("AlwaysAllow", "IfHealthyBudget"):
        causes.append(("spec.unhealthyPodEvictionPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "AlwaysAllow", "IfHealthyBudget"'))  # fmt: skip


def _go_map(labels: dict[str, str]) -> str:
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(labels.items())) + "}"


def _go_selector(selector: Any) -> str:
    labels = (selector or {}).get("matchLabels") or {}
    return (
        "v1.LabelSelector{MatchLabels:"
        + _go_map(labels)
        + ", MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
    )


def _validate_configmap(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    for section in ("data", "binaryData"):
        for k in obj.get(section) or {}:
            if not re.match(r"^[-._a-zA-Z0-9]+$", k):
                causes.append((f"{section}[{k}]", "FieldValueInvalid", f'Invalid value: "{k}": a valid config key '
                               "must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                               "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))  # fmt: skip
    if old is not None and old.get("immutable") and (old.get("data") != obj.get("data")):
        causes.append(
            ("data", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set")
        )


def _validate_node(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    for i, t in enumerate((obj.get("spec") or {}).get("taints") or []):
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append((f"metadata.taints[{i}].effect", "FieldValueNotSupported",
                           f'Unsupported value: "{t.get("effect", "")}": supported values: "NoSchedule", '
                           '"PreferNoSchedule", "NoExecute"'))  # fmt: skip
    for section in ("capacity", "allocatable"):
        for rname, q in ((obj.get("status") or {}).get(section) or {}).items():
            if not is_valid_quantity(q):
                causes.append((f"status.{section}[{rname}]", "FieldValueInvalid",
                               f'Invalid value: "{q}": must be a valid quantity'))  # fmt: skip


def _validate_priorityclass(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    if not isinstance(obj.get("value"), int):
        causes.append(("value", "FieldValueRequired", "Required value"))
    elif old is not None and old.get("value") != obj.get("value"):
        causes.append(("value", "FieldValueForbidden", "Forbidden: may not be changed in an update."))


def _validate_runtimeclass(obj: Obj, old: Obj | None, causes: list[Cause]) -> None:
    handler = obj.get("handler")
    if not handler:
        causes.append(("handler", "FieldValueRequired", "Required value"))
    elif not _LABEL.match(handler):
        causes.append(("handler", "FieldValueInvalid", f'Invalid value: "{handler}": {_LABEL_MSG}'))
    elif old is not None and old.get("handler") != handler:
        causes.append(("handler", "FieldValueInvalid", f'Invalid value: "{handler}": field is immutable'))


_VALIDATORS = {
    "pods": _validate_pod,
    "daemonsets.apps": _validate_daemonset,
    "replicasets.apps": _validate_replicaset,
    "poddisruptionbudgets.policy": _validate_pdb,
    "configmaps": _validate_configmap,
    "nodes": _validate_node,
    "priorityclasses.scheduling.k8s.io": _validate_priorityclass,
    "runtimeclasses.node.k8s.io": _validate_runtimeclass,
}
