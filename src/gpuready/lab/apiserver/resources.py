"""The resource table: what the simulator serves, in the shape discovery documents need.

kubectl maps `kubectl get no` to `nodes` through discovery (short names, verbs, namespaced); a missing verb makes it
refuse an operation client-side, so the table lists exactly what the handlers implement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # Whether DELETE answers with the deleted object (true for pods, like the real registry) or with a Status.
    returns_deleted_object: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Store key: the resource's identity independent of version."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _core(kind: str, plural: str, namespaced: bool, **kw: object) -> Resource:
    return Resource("", "v1", kind, plural, namespaced, **kw)  # type: ignore[arg-type]


RESOURCES: tuple[Resource, ...] = (
    _core("Namespace", "namespaces", False, short_names=("ns",), subresources=("status", "finalize"),
          verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _core("Node", "nodes", False, short_names=("no",), subresources=("status", "proxy")),
    _core("Pod", "pods", True, short_names=("po",), categories=("all",),
          subresources=("status", "log", "binding", "eviction", "proxy", "exec", "attach", "portforward"),
          returns_deleted_object=True),
    _core("Event", "events", True, short_names=("ev",)),
    _core("ConfigMap", "configmaps", True, short_names=("cm",)),
    _core("Secret", "secrets", True),
    _core("Service", "services", True, short_names=("svc",), categories=("all",),
          subresources=("status", "proxy"), returns_deleted_object=True),
    _core("ServiceAccount", "serviceaccounts", True, short_names=("sa",)),
    _core("ResourceQuota", "resourcequotas", True, short_names=("quota",), subresources=("status",)),
    _core("Binding", "bindings", True, verbs=("create",)),
    Resource("apps", "v1", "DaemonSet", "daemonsets", True, short_names=("ds",), categories=("all",),
             subresources=("status",), returns_deleted_object=True),
    Resource("apps", "v1", "ReplicaSet", "replicasets", True, short_names=("rs",), categories=("all",),
             subresources=("status", "scale")),
    Resource("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, short_names=("pdb",),
             subresources=("status",)),
    Resource("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    Resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, short_names=("pc",)),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", True),
    Resource("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", False,
             short_names=("csr",), subresources=("status", "approval")),
    Resource("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False,
             verbs=("create",)),
    # Stored, not enforced: the add-ons deploy applies them (authorization here is by token, see auth.py).
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
)  # fmt: skip

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
_BY_KIND = {(r.group, r.kind): r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def by_kind(group: str, kind: str) -> Resource | None:
    return _BY_KIND.get((group, kind))


def by_api_version(api_version: str, kind: str) -> Resource | None:
    group = api_version.rpartition("/")[0]
    return _BY_KIND.get((group, kind))


def group_versions() -> dict[str, list[str]]:
    """Group name -> versions served, in table order ("" is the legacy core group)."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        versions = out.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return out


def in_group_version(group: str, version: str) -> list[Resource]:
    return [r for r in RESOURCES if r.group == group and r.version == version]
