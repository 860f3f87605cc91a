"""Authentication (bearer tokens, bootstrap tokens, client certificates) and a minimal RBAC.

Who can do what mirrors a kubeadm cluster's defaults closely enough for the lab's three kinds of callers:
the admin kubeconfig (system:masters, everything), a bootstrap token (`kubeadm join`: read cluster-info and the
kubeadm ConfigMaps, get nodes, create CSRs) and node credentials (system:node:<name>: its own Node, Lease and
pod statuses, read most things). Missing credentials are `system:anonymous`, as with `--anonymous-auth=true`.
"""

from __future__ import annotations

import base64
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import errors
from .store import Store

ANONYMOUS_PATHS = ("/version", "/healthz", "/livez", "/readyz")
_BOOTSTRAP = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @property
    def node_name(self) -> str | None:
        if "system:nodes" in self.groups and self.name.startswith("system:node:"):
            return self.name[len("system:node:") :]
        return None


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))


@dataclass(frozen=True)
class Request:
    """An authorization attribute record (like RBAC's): resource requests have `resource`, others `path`."""

    verb: str
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


class Authenticator:
    def __init__(self, store: Store, anonymous: bool = True) -> None:
        self._store = store
        self._tokens: dict[str, User] = {}
        self.anonymous = anonymous

    def add_token(self, token: str, name: str, groups: tuple[str, ...]) -> None:
        self._tokens[token] = User(name, (*groups, "system:authenticated"))

    def authenticate(self, authorization: str | None, peer_cert: dict[str, Any] | None) -> User:
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise errors.unauthorized()
            user = self._token_user(token.strip())
            if user is None:
                raise errors.unauthorized()
            return user
        if peer_cert:
            user = _cert_user(peer_cert)
            if user is not None:
                return user
        if not self.anonymous:
            raise errors.unauthorized()
        return ANONYMOUS

    def _token_user(self, token: str) -> User | None:
        for known, user in self._tokens.items():
            if hmac.compare_digest(known, token):
                return user
        m = _BOOTSTRAP.match(token)
        if not m:
            return None
        secret = self._store.get("secrets", "kube-system", f"bootstrap-token-{m[1]}")
        if secret is None or secret.get("type") != "bootstrap.kubernetes.io/token":
            return None
        data = {k: _b64(v) for k, v in (secret.get("data") or {}).items()}
        data.update(secret.get("stringData") or {})
        if data.get("token-id") != m[1] or not hmac.compare_digest(data.get("token-secret", ""), m[2]):
            return None
        if data.get("usage-bootstrap-authentication") != "true":
            return None
        expiration = data.get("expiration")
        if expiration:
            try:
                expires = datetime.fromisoformat(expiration.replace("Z", "+00:00"))
            except ValueError:
                return None
            if expires < datetime.now(UTC):
                return None
        extra = tuple(g for g in data.get("auth-extra-groups", "").split(",") if g)
        return User(f"system:bootstrap:{m[1]}", ("system:bootstrappers", *extra, "system:authenticated"))


def _b64(value: str) -> str:
    try:
        return base64.b64decode(value).decode()
    except ValueError:
        return ""


def _cert_user(cert: dict[str, Any]) -> User | None:
    cn, orgs = None, []
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                cn = v
            elif k == "organizationName":
                orgs.append(v)
    if not cn:
        return None
    return User(cn, (*orgs, "system:authenticated"))


# authorization -----------------------------------------------------------------------------------------------

_READ = {"get", "list", "watch"}


def allowed(user: User, req: Request) -> bool:
    if "system:masters" in user.groups:
        return True
    if not req.resource:
        if req.path in ANONYMOUS_PATHS or req.path.startswith("/version"):
            return True
        discovery = req.path in ("/api", "/apis") or req.path.startswith(("/api/", "/apis/", "/openapi/"))
        return discovery and "system:authenticated" in user.groups
    res, verb = req.resource, req.verb
    full = f"{res}/{req.subresource}" if req.subresource else res
    if full == "selfsubjectaccessreviews" and verb == "create" and "system:authenticated" in user.groups:
        return True  # system:basic-user
    if user is ANONYMOUS or user.name == "system:anonymous":
        return (
            full == "configmaps"
            and verb == "get"
            and req.namespace == "kube-public"
            and req.name == "cluster-info"
        )
    if "system:bootstrappers" in user.groups:
        if full == "certificatesigningrequests" and verb in {"create", *_READ}:
            return True
        if full == "nodes" and verb == "get":
            return True
        if full == "configmaps" and verb == "get":
            return (req.namespace, req.name) in {("kube-public", "cluster-info"), ("kube-system", "kubeadm-config"),
                                                 ("kube-system", "kubelet-config")}  # fmt: skip
        return False
    node = user.node_name
    if node is not None:
        return _node_allowed(node, full, verb, req)
    return False


def _node_allowed(node: str, full: str, verb: str, req: Request) -> bool:
    if full in ("nodes", "nodes/status"):
        if verb in _READ or verb == "create":
            return True
        return req.name == node and verb in ("update", "patch", "delete")
    if full == "pods" and verb in {*_READ, "create", "delete"}:
        return True
    if full in ("pods/status", "pods/eviction") and verb in ("update", "patch", "create", "get"):
        return True
    if full == "events" and verb in ("create", "update", "patch"):
        return True
    if full == "leases" and req.namespace == "kube-node-lease":
        return verb == "create" or (req.name == node and verb in {*_READ, "update", "patch"})
    if full == "certificatesigningrequests":
        return verb in {"create", *_READ}
    return (
        full in ("configmaps", "secrets", "services", "runtimeclasses", "namespaces", "endpoints")
        and verb in _READ
    )


def forbidden(user: User, req: Request) -> errors.ApiError:
    if not req.resource:
        return errors.ApiError(
            403, "Forbidden", f'forbidden: User "{user.name}" cannot {req.verb} path "{req.path}"', {}
        )
    full = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    qualified = f"{req.resource}.{req.group}" if req.group else req.resource
    head = f'{qualified} "{req.name}"' if req.name else qualified
    scope = f'in the namespace "{req.namespace}"' if req.namespace else "at the cluster scope"
    details: dict[str, Any] = {}
    if req.name:
        details["name"] = req.name
    if req.group:
        details["group"] = req.group
    details["kind"] = req.resource
    return errors.ApiError(
        403, "Forbidden",
        f'{head} is forbidden: User "{user.name}" cannot {req.verb} resource "{full}" in API group "{req.group}" {scope}',
        details,
    )  # fmt: skip
