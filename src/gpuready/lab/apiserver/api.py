"""REST semantics of the Kubernetes API, independent of HTTP: routing, verbs, admission, lists and watches.

`RestApi.handle` takes a parsed request and returns a `Reply` (a JSON body, raw bytes, or a chunk iterator for
watches and followed logs). The HTTP layer only does transport, TLS and authentication.
"""

from __future__ import annotations

import base64
import json
import queue
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import yaml

from . import admission, discovery, errors, tables
from .auth import Request, User, allowed, forbidden
from .disruption import evict
from .patch import json_patch, merge_patch, record_update_manager, server_side_apply, strategic_merge
from .protobuf import decode_object
from .replicaset import scale_of
from .resources import RESOURCES, Resource, lookup
from .scheduler import bind_pod
from .selectors import exact_field, parse_field_selector, parse_label_selector
from .store import Event, Store, now_rfc3339

if TYPE_CHECKING:
    from .server import ApiServer

Obj = dict[str, Any]
WATCH_DEFAULT_TIMEOUT = 1800
# Resources whose main endpoint ignores status changes (status has its own subresource).
_STATUS_SPLIT = {"pods", "nodes", "daemonsets.apps", "services", "namespaces", "resourcequotas",
                 "certificatesigningrequests.certificates.k8s.io", "replicasets.apps",
                 "poddisruptionbudgets.policy"}  # fmt: skip
_GENERATION = {"daemonsets.apps", "pods", "replicasets.apps", "poddisruptionbudgets.policy"}
# Resources whose create strategy drops a status sent by the client.
_STATUS_RESET = {"pods", "replicasets.apps", "poddisruptionbudgets.policy"}
_PATCHERS = {"application/merge-patch+json": merge_patch, "application/strategic-merge-patch+json": strategic_merge,
             "application/json-patch+json": json_patch}  # fmt: skip


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"
    stream: Iterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    user: User
    raw_query: str = ""

    def q(self, name: str, default: str = "") -> str:
        return self.query.get(name, default)

    @property
    def accept(self) -> str:
        return self.headers.get("accept", "")


@dataclass
class Target:
    resource: Resource
    namespace: str
    name: str
    subresource: str
    rest: str  # path after a proxy subresource


class RestApi:
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.store: Store = server.store

    # routing -----------------------------------------------------------------------------------------------

    def handle(self, call: Call) -> Reply:
        path = call.path.rstrip("/") or "/"
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        if parts and parts[0] in ("api", "apis") and self._is_resource_path(parts):
            target, verb = self._parse_resource(call, parts)
            req = Request(verb, group=target.resource.group, resource=target.resource.plural,
                          subresource=target.subresource, namespace=target.namespace, name=target.name)  # fmt: skip
            if not allowed(call.user, req):
                raise forbidden(call.user, req)
            return self._dispatch(call, target, verb)
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "DELETE": "delete"}.get(
            call.method, "get"
        )
        req = Request(verb, path=path)
        if not allowed(call.user, req):
            raise forbidden(call.user, req)
        return self._non_resource(call, path, parts)

    @staticmethod
    def _is_resource_path(parts: list[str]) -> bool:
        return (parts[0] == "api" and len(parts) >= 3) or (parts[0] == "apis" and len(parts) >= 4)

    def _non_resource(self, call: Call, path: str, parts: list[str]) -> Reply:
        if path == "/version":
            return Reply(body=discovery.version())
        if path in ("/healthz", "/livez", "/readyz"):
            return Reply(raw=b"ok", content_type="text/plain; charset=utf-8")
        if path == "/api":
            return Reply(body=discovery.api_versions(self.server.host_port))
        if path == "/apis":
            return Reply(body=discovery.api_group_list())
        if parts[:1] == ["api"] and len(parts) == 2:
            doc = discovery.resource_list("", parts[1])
            if doc is not None:
                return Reply(body=doc)
        if parts[:1] == ["apis"] and len(parts) == 2:
            doc = discovery.api_group(parts[1])
            if doc is not None:
                return Reply(body=doc)
        if parts[:1] == ["apis"] and len(parts) == 3:
            doc = discovery.resource_list(parts[1], parts[2])
            if doc is not None:
                return Reply(body=doc)
        if path == "/openapi/v3":
            return Reply(body=discovery.openapi_index())
        if parts[:2] == ["openapi", "v3"] and len(parts) >= 4:
            if parts[2] == "api" and len(parts) == 4:
                return Reply(body=discovery.openapi_doc("", parts[3]))
            if parts[2] == "apis" and len(parts) == 5 and discovery.api_group(parts[3]):
                return Reply(body=discovery.openapi_doc(parts[3], parts[4]))
        return Reply(404, raw=b"404 page not found\n", content_type="text/plain; charset=utf-8")

    def _parse_resource(self, call: Call, parts: list[str]) -> tuple[Target, str]:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        res = lookup(group, version, rest[0])
        if res is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        tail = "/".join(rest[3:]) if len(rest) > 3 else ""
        if sub and sub not in res.subresources:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if res.namespaced and not namespace and name:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        m = call.method
        if sub == "proxy":
            verb = {
                "GET": "get",
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
            }.get(m, "get")
        elif not name:
            watching = call.q("watch") in ("true", "1")
            verb = {
                "GET": "watch" if watching else "list",
                "POST": "create",
                "DELETE": "deletecollection",
            }.get(m, "")
        else:
            verb = {
                "GET": "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
                "POST": "create",
            }.get(m, "")
        if not verb:
            raise errors.method_not_allowed()
        return Target(res, namespace, name, sub, tail), verb

    # dispatch ------------------------------------------------------------------------------------------------

    def _dispatch(self, call: Call, t: Target, verb: str) -> Reply:
        res = t.resource
        if res.plural == "bindings":
            return self._binding(call, t.namespace, None)
        if res.plural == "selfsubjectaccessreviews":
            return self._access_review(call, res)
        if t.subresource == "proxy":
            return self.server.proxy(res, t.namespace, t.name, t.rest, call)
        if t.subresource == "log":
            return self._log(call, t)
        if t.subresource == "binding":
            return self._binding(call, t.namespace, t.name)
        if t.subresource == "eviction":
            return self._evict(call, t)
        if t.subresource == "scale":
            return self._scale(call, t, verb)
        if verb == "list":
            return self._list(call, t)
        if verb == "watch":
            return self._watch(call, t)
        if verb == "get":
            obj = self._get_or_404(res, t.namespace, t.name)
            return self._object_reply(call, res, obj)
        if verb == "create":
            if t.name:
                raise errors.method_not_allowed()
            obj = self._decode(call, res)
            return self._object_reply(call, res, self.create(res, t.namespace, obj, call), 201)
        if verb == "update":
            obj = self._decode(call, res)
            return self._object_reply(call, res, self.update(res, t, obj, call))
        if verb == "patch":
            return self._patch(call, t)
        if verb == "delete":
            return self._delete(call, t)
        if verb == "deletecollection":
            return self._delete_collection(call, t)
        raise errors.method_not_allowed()

    def _object_reply(self, call: Call, res: Resource, obj: Obj, code: int = 200) -> Reply:
        if tables.wants_table(call.accept):
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return Reply(code, body=tables.table(res.key, [obj], meta, call.q("includeObject", "Metadata"),
                                                 res.group_version, res.kind))  # fmt: skip
        return Reply(code, body=with_kind(res, obj))

    def _get_or_404(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self.store.get(res.key, namespace, name)
        if obj is None:
            raise errors.not_found(res.group, res.plural, name)
        return obj

    def _decode(self, call: Call, res: Resource) -> Obj:
        ctype = call.headers.get("content-type", "application/json").split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            return decode_object(call.body)
        if ctype not in ("application/json", "application/yaml", "application/apply-patch+yaml",
                         "application/merge-patch+json", "application/strategic-merge-patch+json",
                         "application/json-patch+json", "*/*", ""):  # fmt: skip
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                  "accepted media types include: application/json, application/yaml", {})  # fmt: skip
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml"):
                return yaml.safe_load(call.body.decode() or "{}")
            return json.loads(call.body or b"{}")
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"error decoding request body: {exc}") from None

    # create / update -----------------------------------------------------------------------------------------

    def _check_kind(self, res: Resource, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {res.kind})")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if api_version and api_version != res.group_version:
            raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                                     f"version ({res.group_version})")  # fmt: skip
        if kind and kind != res.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
            )

    def create(
        self, res: Resource, namespace: str, obj: Obj, call: Call | None = None, *, internal: bool = False
    ) -> Obj:
        self._check_kind(res, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                         "the request")  # fmt: skip
            meta["namespace"] = namespace
            ns = self.store.get("namespaces", "", namespace)
            if ns is None:
                raise errors.not_found("", "namespaces", namespace)
            if (ns.get("status") or {}).get("phase") == "Terminating":
                raise errors.ApiError(403, "Forbidden", f'{res.plural} "{meta.get("name", "")}" is forbidden: unable '
                                      f"to create new content in namespace {namespace} because it is being "
                                      "terminated", {"name": meta.get("name", ""), "kind": res.plural})  # fmt: skip
        else:
            meta.pop("namespace", None)
        for k in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "selfLink"):
            meta.pop(k, None)
        obj["apiVersion"], obj["kind"] = res.group_version, res.kind
        if res.key in _STATUS_RESET:
            obj["status"] = {}
        if res.key == "certificatesigningrequests.certificates.k8s.io" and call is not None:
            # the requester's identity is recorded by the server, never taken from the body
            obj.setdefault("spec", {}).update({"username": call.user.name, "groups": list(call.user.groups)})
            obj["status"] = {}
        admission.validate_metadata(res, obj, creating=True)
        if res.key == "pods":
            admission.admit_pod(obj, self.store.get)
        admission.default(res, obj, self.store.get)
        admission.validate(res, obj, None)
        if res.key in _GENERATION:
            meta["generation"] = 1
        if not internal and call is not None:
            record_update_manager(obj, manager_name(call), "Update", now_rfc3339())
        if call is not None and call.q("dryRun") == "All":
            return obj
        return self.store.create(res.key, obj, group=res.group, plural=res.plural)

    def update(self, res: Resource, t: Target, obj: Obj, call: Call) -> Obj:
        self._check_kind(res, obj)
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                                     f"({t.name})")  # fmt: skip
        meta["name"] = t.name
        obj["metadata"] = meta
        if res.namespaced:
            meta["namespace"] = t.namespace
        old = self._get_or_404(res, t.namespace, t.name)
        expected = meta.get("resourceVersion") or None
        if old["metadata"].get("deletionTimestamp"):
            meta["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
        return self._store_update(res, t, old, obj, expected, call, "Update")

    def _store_update(self, res: Resource, t: Target, old: Obj, new: Obj, expected: str | None, call: Call | None,
                      operation: str, record: bool = True) -> Obj:  # fmt: skip
        new["apiVersion"], new["kind"] = res.group_version, res.kind
        if t.subresource in ("status", "approval"):
            merged = dict(old)
            merged["metadata"] = dict(old["metadata"])
            merged["status"] = new.get("status", {})
            new = merged
        elif res.key in _STATUS_SPLIT and "status" in old:
            new["status"] = old["status"]
        admission.validate_metadata(res, new, creating=False)
        admission.default(res, new, self.store.get)
        admission.validate(res, new, old)
        if res.key in _GENERATION:
            gen = old["metadata"].get("generation", 1)
            new["metadata"]["generation"] = gen + 1 if new.get("spec") != old.get("spec") else gen
        # A request that rewrites managedFields itself (kubectl's client-side to server-side apply upgrade) is
        # taken as is, as the real server does.
        explicit = new["metadata"].get("managedFields") != old["metadata"].get("managedFields")
        if record and call is not None and not explicit:
            record_update_manager(new, manager_name(call), operation, now_rfc3339(), t.subresource)
        if call is not None and call.q("dryRun") == "All":
            return new
        return self.store.update(res.key, new, expected_rv=expected, group=res.group, plural=res.plural)

    def _patch(self, call: Call, t: Target) -> Reply:
        # Read-patch-write is atomic (the store lock is re-entrant), as the real server retries a patch internally
        # instead of failing it with a conflict when a controller wrote in between.
        with self.store.lock:
            return self._patch_locked(call, t)

    def _patch_locked(self, call: Call, t: Target) -> Reply:
        res = t.resource
        ctype = call.headers.get("content-type", "").split(";")[0].strip()
        old = self.store.get(res.key, t.namespace, t.name)
        if ctype == "application/apply-patch+yaml":
            return self._apply(call, t, old)
        if old is None:
            raise errors.not_found(res.group, res.plural, t.name)
        try:
            patch = json.loads(call.body or b"null")
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        if ctype == "application/merge-patch+json":
            new = merge_patch(old, patch)
        elif ctype == "application/strategic-merge-patch+json":
            new = strategic_merge(old, patch)
        elif ctype == "application/json-patch+json":
            new = json_patch(old, patch)
        else:
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                                  "accepted media types include: application/json-patch+json, "
                                  "application/merge-patch+json, application/apply-patch+yaml", {})  # fmt: skip
        if not isinstance(new, dict):
            raise errors.bad_request("patch did not produce an object")
        new = json.loads(json.dumps(new))
        meta = new.setdefault("metadata", {})
        if meta.get("name") != t.name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the "
                                     f"URL ({t.name})")  # fmt: skip
        if res.namespaced:
            meta["namespace"] = t.namespace
        patch_meta = (patch.get("metadata") if isinstance(patch, dict) else None) or {}
        expected = patch_meta.get("resourceVersion") if isinstance(patch_meta, dict) else None
        if expected and expected != old["metadata"].get("resourceVersion"):
            raise errors.conflict(res.group, res.plural, t.name, "the object has been modified; please apply your "
                                  "changes to the latest version and try again")  # fmt: skip
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        updated = self._store_update(res, t, old, new, old["metadata"]["resourceVersion"], call, "Update")
        return self._object_reply(call, res, updated)

    def _apply(self, call: Call, t: Target, old: Obj | None) -> Reply:
        res = t.resource
        manager = call.q("fieldManager")
        if not manager:
            raise errors.bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
        applied = self._decode(call, res)
        self._check_kind(res, applied)
        meta = applied.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                                     f"({t.name})")  # fmt: skip
        if not applied.get("apiVersion") or not applied.get("kind"):
            raise errors.bad_request("apiVersion and kind must be set in an applied configuration")
        new = server_side_apply(old, applied, manager, now_rfc3339())
        new["metadata"]["name"] = t.name
        if old is None:
            if res.key in _STATUS_SPLIT and t.subresource != "status":
                new.pop("status", None)
            # internal: the Apply entry server_side_apply wrote is the only manager, as on a real server
            return self._object_reply(call, res, self.create(res, t.namespace, new, call, internal=True), 201)
        if res.namespaced:
            new["metadata"]["namespace"] = t.namespace
        updated = self._store_update(res, t, old, new, None, call, "Apply", record=False)
        return self._object_reply(call, res, updated)

    # delete --------------------------------------------------------------------------------------------------

    def _delete_options(self, call: Call) -> Obj:
        if not call.body:
            return {}
        if call.headers.get("content-type", "").startswith("application/vnd.kubernetes.protobuf"):
            return decode_object(call.body)
        try:
            opts = json.loads(call.body)
        except ValueError:
            return {}
        return opts if isinstance(opts, dict) else {}

    def delete(
        self, res: Resource, namespace: str, name: str, opts: Obj | None = None, dry_run: bool = False
    ) -> Obj:
        opts = opts or {}
        obj = self._get_or_404(res, namespace, name)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"].get("uid"):
            raise errors.conflict(res.group, res.plural, name, f"Precondition failed: UID in precondition: "
                                  f"{pre['uid']}, UID in object meta: {obj['metadata'].get('uid')}")  # fmt: skip
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            raise errors.conflict(res.group, res.plural, name, "the object has been modified; please apply your "
                                  "changes to the latest version and try again")  # fmt: skip
        if dry_run:
            return obj
        if res.key == "namespaces":
            return self._delete_namespace(obj)
        policy = opts.get("propagationPolicy") or ("Orphan" if opts.get("orphanDependents") else "Background")
        deleted = self.store.delete(res.key, namespace, name, group=res.group, plural=res.plural)
        uid = obj["metadata"].get("uid", "")
        for key, dns, dname in self.store.dependents(uid):
            if policy == "Orphan":

                def strip(o: Obj, uid: str = uid) -> None:
                    o["metadata"]["ownerReferences"] = [r for r in o["metadata"].get("ownerReferences") or []
                                                        if r.get("uid") != uid] or None  # fmt: skip
                    if o["metadata"]["ownerReferences"] is None:
                        del o["metadata"]["ownerReferences"]

                self.store.modify(key, dns, dname, strip)
            else:
                dres = _by_key(key)
                if dres is not None and self.store.get(key, dns, dname) is not None:
                    self.delete(dres, dns, dname, {"propagationPolicy": policy})
        return deleted

    def _delete_namespace(self, ns: Obj) -> Obj:
        name = ns["metadata"]["name"]
        if name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            raise errors.ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be '
                                  "deleted", {"name": name, "kind": "namespaces"})  # fmt: skip

        def terminating(o: Obj) -> None:
            o["metadata"]["deletionTimestamp"] = now_rfc3339()
            o.setdefault("status", {})["phase"] = "Terminating"

        marked = self.store.modify("namespaces", "", name, terminating) or ns
        for r in RESOURCES:
            if r.namespaced and r.plural != "bindings":
                for o in self.store.list(r.key, name)[0]:
                    if self.store.get(r.key, name, o["metadata"]["name"]) is not None:
                        self.store.delete(r.key, name, o["metadata"]["name"])
        self.store.delete("namespaces", "", name)
        return marked

    def _delete(self, call: Call, t: Target) -> Reply:
        res = t.resource
        opts = self._delete_options(call)
        if call.q("propagationPolicy"):
            opts["propagationPolicy"] = call.q("propagationPolicy")
        deleted = self.delete(res, t.namespace, t.name, opts, dry_run=call.q("dryRun") == "All")
        if res.returns_deleted_object or res.key == "namespaces":
            return self._object_reply(call, res, deleted)
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": t.name, **({"group": res.group} if res.group else {}), "kind": res.plural,
                            "uid": deleted["metadata"].get("uid", "")}}  # fmt: skip
        return Reply(200, body=body)

    def _delete_collection(self, call: Call, t: Target) -> Reply:
        res = t.resource
        items = self._select(call, t)
        deleted = []
        for o in items:
            if self.store.get(res.key, o["metadata"].get("namespace", ""), o["metadata"]["name"]) is not None:
                deleted.append(self.delete(res, o["metadata"].get("namespace", ""), o["metadata"]["name"],
                                           self._delete_options(call), dry_run=call.q("dryRun") == "All"))  # fmt: skip
        body = {"kind": f"{res.kind}List", "apiVersion": res.group_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": [strip_kind(o) for o in deleted]}  # fmt: skip
        return Reply(200, body=body)

    # lists and watches ---------------------------------------------------------------------------------------

    def _select(self, call: Call, t: Target) -> list[Obj]:
        res = t.resource
        labels = parse_label_selector(call.q("labelSelector"))
        fields = parse_field_selector(call.q("fieldSelector"), res.key)
        if res.key == "pods" and call.q("fieldSelector"):
            node = exact_field(call.q("fieldSelector"), "spec.nodeName")
            if node:
                items = [p for p in self.store.pods_on_node(node)
                         if not t.namespace or p["metadata"].get("namespace") == t.namespace]  # fmt: skip
            else:
                items = self.store.list(res.key, t.namespace or None)[0]
        else:
            items = self.store.list(res.key, t.namespace or None)[0]
        if labels is not None:
            items = [o for o in items if labels(o["metadata"].get("labels") or {})]
        if fields is not None:
            items = [o for o in items if fields(o)]
        return items

    def _list(self, call: Call, t: Target) -> Reply:
        res = t.resource
        rv = str(self.store.resource_version)
        items = self._select(call, t)
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        meta: Obj = {"resourceVersion": rv}
        limit = int(call.q("limit") or 0)
        cont = call.q("continue")
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()))
                start = tuple(token["start"])
                rv = token["rv"]
                meta["resourceVersion"] = rv
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid: illegal base64 data") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > start]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = {"v": "meta.k8s.io/v1", "rv": rv, "start": [last.get("namespace", ""), last["name"]]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if tables.wants_table(call.accept):
            return Reply(body=tables.table(res.key, items, meta, call.q("includeObject", "Metadata"),
                                           res.group_version, res.kind))  # fmt: skip
        body = {"kind": f"{res.kind}List", "apiVersion": res.group_version, "metadata": meta,
                "items": [strip_kind(o) for o in items]}  # fmt: skip
        return Reply(body=body)

    def _watch(self, call: Call, t: Target) -> Reply:
        res = t.resource
        labels = parse_label_selector(call.q("labelSelector"))
        fields = parse_field_selector(call.q("fieldSelector"), res.key)
        rv_param = call.q("resourceVersion")
        timeout = float(call.q("timeoutSeconds") or _go_duration(call.q("timeout")) or WATCH_DEFAULT_TIMEOUT)
        bookmarks = call.q("allowWatchBookmarks") in ("true", "1")
        send_initial = call.q("sendInitialEvents") in ("true", "1")
        as_table = tables.wants_table(call.accept)
        include = call.q("includeObject", "Metadata")
        ns = t.namespace or None

        def matches(o: Obj | None) -> bool:
            if o is None:
                return False
            if t.name and o["metadata"]["name"] != t.name:
                return False
            if labels is not None and not labels(o["metadata"].get("labels") or {}):
                return False
            return fields is None or fields(o)

        initial: list[Obj] = []
        if rv_param in ("", "0") or send_initial:
            items, rv, watcher = self.store.list_and_watch(res.key, ns)
            initial = sorted((o for o in items if matches(o)),
                             key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))  # fmt: skip
        else:
            try:
                since = int(rv_param)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv_param}") from None
            try:
                watcher = self.store.watch(res.key, ns, since=since)
            except errors.ApiError as exc:
                return Reply(200, stream=iter([_line({"type": "ERROR", "object": exc.status()})]),
                             content_type="application/json")  # fmt: skip
            rv = since
        first = [True]

        def encode(kind: str, obj: Obj) -> bytes:
            if as_table:
                body = tables.table(res.key, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                                    include, res.group_version, res.kind, with_columns=first[0])  # fmt: skip
                first[0] = False
            else:
                body = with_kind(res, obj)
            return _line({"type": kind, "object": body})

        def bookmark(rv_now: int, initial_end: bool = False) -> bytes:
            meta: Obj = {"resourceVersion": str(rv_now)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return _line({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.group_version,
                                                         "metadata": meta}})  # fmt: skip

        stopping = self.server.stopping

        def stream() -> Iterator[bytes]:
            deadline = time.monotonic() + timeout
            last_rv = rv
            try:
                for o in initial:
                    yield encode("ADDED", o)
                if send_initial and bookmarks:
                    yield bookmark(rv, initial_end=True)
                last_bookmark = time.monotonic()
                while not stopping.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    try:
                        ev = watcher.queue.get(timeout=min(remaining, 1.0))
                    except queue.Empty:
                        if bookmarks and time.monotonic() - last_bookmark > 30:
                            last_bookmark = time.monotonic()
                            yield bookmark(last_rv)
                        yield b""
                        continue
                    if ev is None:
                        return
                    last_rv = ev.rv
                    out = _translate(ev, matches)
                    if out is not None:
                        yield encode(out[0], out[1])
            finally:
                watcher.close()

        return Reply(200, stream=stream(), content_type="application/json")

    # pod subresources ----------------------------------------------------------------------------------------

    def _binding(self, call: Call, namespace: str, name: str | None) -> Reply:
        try:
            if call.headers.get("content-type", "").startswith("application/vnd.kubernetes.protobuf"):
                body = decode_object(call.body)
            else:
                body = json.loads(call.body or b"{}")
        except ValueError:
            raise errors.bad_request("error decoding Binding") from None
        pod_name = name or (body.get("metadata") or {}).get("name", "")
        target = (body.get("target") or {}).get("name", "")
        pod = self.store.get("pods", namespace, pod_name)
        if pod is None:
            raise errors.not_found("", "pods", pod_name)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise errors.conflict(
                "", "pods/binding", pod_name, f'pod {pod_name} is already assigned to node "{bound}"'
            )
        if not target:
            raise errors.invalid(
                "Binding", "", pod_name, [("target.name", "FieldValueRequired", "Required value")]
            )
        bind_pod(self.store, namespace, pod_name, target)
        return Reply(
            201, body={"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def _access_review(self, call: Call, res: Resource) -> Reply:
        """`kubectl auth can-i`: answer with the same authorizer that guards every request."""
        review = self._decode(call, res)
        spec = review.get("spec") or {}
        attrs, path_attrs = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if attrs:
            req = Request(attrs.get("verb", ""), group=attrs.get("group", ""), resource=attrs.get("resource", ""),
                          subresource=attrs.get("subresource", ""), namespace=attrs.get("namespace", ""),
                          name=attrs.get("name", ""))  # fmt: skip
        elif path_attrs:
            req = Request(path_attrs.get("verb", ""), path=path_attrs.get("path", ""))
        else:
            raise errors.invalid(res.kind, res.group, "", [("spec.resourceAttributes", "FieldValueRequired",
                                                            "Required value: exactly one of nonResourceAttributes or "
                                                            "resourceAttributes must be specified")])  # fmt: skip
        ok = allowed(call.user, req)
        status: Obj = {"allowed": ok}
        if ok and "system:masters" in call.user.groups:
            status["reason"] = ""
        body = {"kind": res.kind, "apiVersion": res.group_version, "metadata": {"creationTimestamp": None},
                "spec": spec, "status": status}  # fmt: skip
        return Reply(201, body=body)

    def _evict(self, call: Call, t: Target) -> Reply:
        """policy/v1 Eviction: a delete that PodDisruptionBudgets may refuse (disruption.py)."""
        body = self._delete_options(call)
        code, status, headers = evict(self.server, t.namespace, t.name, body, call.q("dryRun") == "All")
        return Reply(code, body=status, headers=headers)

    def _scale(self, call: Call, t: Target, verb: str) -> Reply:
        """autoscaling/v1 Scale of a ReplicaSet: spec.replicas read and written through a view object."""
        res = t.resource
        with self.store.lock:
            rs = self._get_or_404(res, t.namespace, t.name)
            current = scale_of(rs)
            if verb == "get":
                return Reply(body=current)
            if verb == "update":
                wanted = self._decode(call, res)
            else:
                ctype = call.headers.get("content-type", "").split(";")[0].strip()
                patcher = _PATCHERS.get(ctype)
                if patcher is None:
                    raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown "
                                          "format - accepted media types include: application/json-patch+json, "
                                          "application/merge-patch+json", {})  # fmt: skip
                try:
                    wanted = patcher(current, json.loads(call.body or b"null"))
                except ValueError as exc:
                    raise errors.bad_request(f"error decoding patch: {exc}") from None
            if not isinstance(wanted, dict):
                raise errors.bad_request("the object provided is unrecognized (must be of type Scale)")
            expected = (wanted.get("metadata") or {}).get("resourceVersion")
            if verb == "update" and expected and expected != rs["metadata"]["resourceVersion"]:
                raise errors.conflict(res.group, res.plural, t.name, "the object has been modified; please apply "
                                      "your changes to the latest version and try again")  # fmt: skip
            replicas = (wanted.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise errors.invalid("Scale", "autoscaling", t.name, [("spec.replicas", "FieldValueInvalid",
                                     f"Invalid value: {replicas}: must be greater than or equal to 0")])  # fmt: skip
            new = json.loads(json.dumps(rs))
            new["spec"]["replicas"] = replicas
            stored = self._store_update(res, t, rs, new, None, call, "Update")
            return Reply(body=scale_of(stored))

    def _log(self, call: Call, t: Target) -> Reply:
        pod = self._get_or_404(t.resource, t.namespace, t.name)
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = call.q("container")
        if not container:
            if len(names) != 1:
                raise errors.bad_request(f"a container name must be specified for pod {t.name}, choose one of: "
                                         f"[{' '.join(names)}]")  # fmt: skip
            container = names[0]
        if container not in names:
            raise errors.bad_request(f"container {container} is not valid for pod {t.name}")
        previous = call.q("previous") in ("true", "1")
        text = self.server.kubelet.logs(pod, container, previous)
        status = next(
            (s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s["name"] == container),
            None,
        )
        waiting = (
            ((status or {}).get("state") or {}).get("waiting") if status else {"reason": "ContainerCreating"}
        )
        if previous and not ((status or {}).get("lastState") or {}).get("terminated"):
            raise errors.bad_request(
                f'previous terminated container "{container}" in pod "{t.name}" not found'
            )
        if text is None or (waiting and not text and not (status or {}).get("restartCount")):
            reason = (waiting or {}).get("reason", "ContainerCreating")
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                reason = "trying and failing to pull image"
            raise errors.bad_request(
                f'container "{container}" in pod "{t.name}" is waiting to start: {reason}'
            )
        tail = call.q("tailLines")
        if tail:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) > 0 else ""
        limit = call.q("limitBytes")
        if limit:
            text = text[: int(limit)]
        running = "running" in ((status or {}).get("state") or {})
        if call.q("follow") in ("true", "1") and running:
            return Reply(200, stream=self._follow(pod, container, text), content_type="text/plain")
        return Reply(200, raw=text.encode(), content_type="text/plain")

    def _follow(self, pod: Obj, container: str, sent: str) -> Iterator[bytes]:
        """`logs -f`: what is there, then new output until the container stops or the pod goes away."""
        yield sent.encode()
        meta = pod["metadata"]
        while not self.server.stopping.is_set():
            live = self.store.get("pods", meta.get("namespace", ""), meta["name"])
            if live is None or live["metadata"].get("uid") != meta.get("uid"):
                return
            text = self.server.kubelet.logs(live, container, False) or ""
            if text.startswith(sent) and len(text) > len(sent):
                yield text[len(sent) :].encode()
                sent = text
            cs = next(
                (
                    c
                    for c in (live.get("status") or {}).get("containerStatuses") or []
                    if c["name"] == container
                ),
                {},
            )
            if "running" not in (cs.get("state") or {}):
                return
            yield b""
            time.sleep(0.5)


def _go_duration(text: str) -> float:
    """Seconds in a Go duration such as "5s", "1m30s", "250ms" (the `timeout` query parameter); 0 if absent."""
    total = 0.0
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    for value, unit in re.findall(r"([0-9.]+)(ms|us|µs|ns|h|m|s)", text or ""):
        total += float(value) * units[unit]
    return total


def _line(obj: Obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _translate(ev: Event, matches: Any) -> tuple[str, Obj] | None:
    """Selector-aware event type: an object entering a selection is ADDED, leaving it is DELETED."""
    if ev.type == "ADDED":
        return ("ADDED", ev.obj) if matches(ev.obj) else None
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if matches(ev.old) else None
    now, before = matches(ev.obj), matches(ev.old)
    if now and before:
        return "MODIFIED", ev.obj
    if now:
        return "ADDED", ev.obj
    if before:
        return "DELETED", ev.obj
    return None


def with_kind(res: Resource, obj: Obj) -> Obj:
    if obj.get("kind") == res.kind and obj.get("apiVersion") == res.group_version:
        return obj
    return {
        "kind": res.kind,
        "apiVersion": res.group_version,
        **{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")},
    }


def strip_kind(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def manager_name(call: Call) -> str:
    name = call.q("fieldManager")
    if name:
        return name
    agent = call.headers.get("user-agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"


def _by_key(key: str) -> Resource | None:
    return next((r for r in RESOURCES if r.key == key), None)
