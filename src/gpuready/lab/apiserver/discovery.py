"""Discovery documents: /version, /api, /apis, group-version resource lists and a minimal OpenAPI v3.

kubectl needs OpenAPI v3 only to learn that the server validates fields itself (the `fieldValidation` query
parameter on each PATCH operation); with that, `kubectl apply` skips client-side schema validation. Schemas are
omitted, so `kubectl explain` is not supported.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .resources import Resource, group_versions, in_group_version

KUBE_VERSION = "v1.37.1"
_MAJOR, _MINOR = KUBE_VERSION[1:].split(".")[:2]

_SUB_KIND = {"binding": "Binding", "eviction": "Eviction", "log": "Pod", "proxy": "PodProxyOptions",
             "approval": "CertificateSigningRequest", "finalize": "Namespace", "scale": "Scale"}  # fmt: skip
_SUB_VERBS = {"status": ["get", "patch", "update"], "binding": ["create"], "eviction": ["create"], "log": ["get"],
              "proxy": ["create", "delete", "get", "patch", "update"], "approval": ["get", "patch", "update"],
              "finalize": ["update"], "scale": ["get", "patch", "update"]}  # fmt: skip


def version() -> dict[str, Any]:
    return {"major": _MAJOR, "minor": _MINOR, "emulationMajor": _MAJOR, "emulationMinor": _MINOR,
            "minCompatibilityMajor": _MAJOR, "minCompatibilityMinor": str(int(_MINOR) - 1),
            "gitVersion": KUBE_VERSION, "gitCommit": "0" * 40, "gitTreeState": "clean",
            "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.25.4", "compiler": "gc",
            "platform": "linux/amd64"}  # fmt: skip


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}  # fmt: skip


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list() -> dict[str, Any]:
    groups = [_group(g, vs) for g, vs in group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(name: str) -> dict[str, Any] | None:
    versions = group_versions().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _storage_hash(r: Resource) -> str:
    return hashlib.sha256(f"{r.group}/{r.version}/{r.kind}".encode()).digest()[:8].hex()


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources = in_group_version(group, version)
    if not resources:
        return None
    out = []
    for r in resources:
        entry: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": list(r.verbs)}  # fmt: skip
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        if "list" in r.verbs:
            entry["storageVersionHash"] = _storage_hash(r)
        out.append(entry)
        for sub in r.subresources:
            s: dict[str, Any] = {"name": f"{r.plural}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                 "kind": _SUB_KIND.get(sub, r.kind), "verbs": _SUB_VERBS.get(sub, ["get"])}  # fmt: skip
            if sub == "eviction":
                s.update({"group": "policy", "version": "v1"})
            elif sub == "scale":
                s.update({"group": "autoscaling", "version": "v1"})
            out.append(s)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


# OpenAPI v3 ----------------------------------------------------------------------------------------------------

_PARAMS = [{"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
           for n in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")]  # fmt: skip


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_index() -> dict[str, Any]:
    paths = {}
    for group, versions in group_versions().items():
        for v in versions:
            p = _gv_path(group, v)
            digest = (
                hashlib.sha512(json.dumps(openapi_doc(group, v), sort_keys=True).encode())
                .hexdigest()[:128]
                .upper()
            )
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={digest}"}
    return {"paths": paths}


def openapi_doc(group: str, version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for r in in_group_version(group, version):
        base = "/" + _gv_path(group, version)
        item = (
            f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}"
            if r.namespaced
            else f"{base}/{r.plural}/{{name}}"
        )
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        op = {"operationId": f"patch{r.kind}", "parameters": _PARAMS, "x-kubernetes-action": "patch",
              "x-kubernetes-group-version-kind": gvk,
              "responses": {"200": {"description": "OK"}}}  # fmt: skip
        if "patch" in r.verbs:
            paths[item] = {
                "patch": op,
                "put": {**op, "operationId": f"replace{r.kind}", "x-kubernetes-action": "put"},
            }
        coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
        paths[coll] = {"post": {**op, "operationId": f"create{r.kind}", "x-kubernetes-action": "post"}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION}, "paths": paths,
            "components": {"schemas": {}}}  # fmt: skip
