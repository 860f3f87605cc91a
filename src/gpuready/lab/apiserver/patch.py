"""PATCH semantics: JSON merge patch, strategic merge patch, JSON patch and server-side apply.

Strategic merge needs per-field list semantics that the real server takes from Go struct tags; the table below
covers the fields of the resources served here (containers by name, env by name, conditions by type, ...). Any
other list is replaced atomically, which is what the real tags say for them too (tolerations, taints, args).
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ApiError, bad_request
from .store import clone

# field name -> merge key for lists of objects merged element-wise.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath", "imagePullSecrets": "name",
    "conditions": "type", "ownerReferences": "uid", "hostAliases": "ip", "addresses": "type",
    "topologySpreadConstraints": "topologyKey", "secrets": "name", "resourceClaims": "name",
    "readinessGates": "conditionType",
}  # fmt: skip
# lists of scalars merged as sets.
MERGE_SCALAR_LISTS = {"finalizers"}


def _merge_key(name: str, items: list[Any]) -> str | None:
    if name == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in sample else "port"
    return MERGE_KEYS.get(name)


# JSON merge patch (RFC 7386) ---------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# Strategic merge patch -----------------------------------------------------------------------------------------


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k.startswith("$setElementOrder/") or k in ("$retainKeys", "$patch"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            result[name] = [x for x in result.get(name) or [] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list):
            result[k] = _merge_list(result.get(k), v, k)
        elif isinstance(v, dict):
            merged = strategic_merge(result.get(k), v, k)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        else:
            result[k] = v
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: Any, patch: list[Any], name: str) -> list[Any]:
    current = current if isinstance(current, list) else []
    if name in MERGE_SCALAR_LISTS:
        out = list(current)
        out.extend(x for x in patch if x not in out)
        return out
    key = _merge_key(name, patch + current)
    if not key or not all(isinstance(x, dict) for x in patch):
        return [clone(x) for x in patch if not (isinstance(x, dict) and x.get("$patch"))]
    out = [dict(x) if isinstance(x, dict) else x for x in current]
    for item in patch:
        if item.get("$patch") == "replace":
            return [clone(x) for x in patch if x.get("$patch") != "replace"]
        idx = next(
            (i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item.get(key)), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge({}, item, name))
        else:
            out[idx] = strategic_merge(out[idx], item, name)
    return out


# JSON patch (RFC 6902) -----------------------------------------------------------------------------------------


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("the server rejected our request due to an error in our request")
    doc = clone(target)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                               f"testing value {path} failed")  # fmt: skip
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "add":
            doc = _add(doc, path, clone(op.get("value")))
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, clone(op.get("value")), replace=True)
        elif kind in ("move", "copy"):
            value = clone(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for t in _tokens(path):
        try:
            cur = cur[int(t)] if isinstance(cur, list) else cur[t]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                           f"doc is missing path: \"{path}\"") from exc  # fmt: skip
    return cur


def _remove(doc: Any, path: str) -> Any:
    toks = _tokens(path)
    parent = (
        _get(doc, "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in toks[:-1]))
        if len(toks) > 1
        else doc
    )
    last = toks[-1]
    try:
        if isinstance(parent, list):
            parent.pop(int(last))
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError) as exc:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                       f"unable to remove nonexistent key: {last}: missing value") from exc  # fmt: skip
    return doc


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    toks = _tokens(path)
    if not toks:
        return value
    parent = (
        _get(doc, "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in toks[:-1]))
        if len(toks) > 1
        else doc
    )
    last = toks[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            parent.insert(int(last), value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                       f"doc is missing path: \"{path}\"")  # fmt: skip
    return doc


# Server-side apply ---------------------------------------------------------------------------------------------

_IGNORED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
}


def field_set(obj: Any, name: str = "", top: bool = True) -> dict[str, Any]:
    """The FieldsV1 set of an applied configuration (`f:` fields, `k:{...}` list entries, `v:` set values)."""
    out: dict[str, Any] = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if top and k in ("apiVersion", "kind"):
            continue
        if top and k == "metadata":
            sub = {f"f:{mk}": field_set(mv, mk, False) for mk, mv in v.items() if mk not in _IGNORED_META}
            if sub:
                out["f:metadata"] = sub
            continue
        entry: dict[str, Any] = {}
        if isinstance(v, dict):
            entry = field_set(v, k, False)
        elif isinstance(v, list):
            key = _merge_key(k, v)
            if k in MERGE_SCALAR_LISTS:
                entry = {f"v:{json.dumps(x)}": {} for x in v}
            elif key and all(isinstance(x, dict) for x in v):
                for item in v:
                    ident = {key: item.get(key)}
                    if key == "containerPort" and "protocol" in item:
                        ident["protocol"] = item["protocol"]
                    entry[f"k:{json.dumps(ident, separators=(',', ':'), sort_keys=True)}"] = {
                        ".": {},
                        **field_set(item, k, False),
                    }
        out[f"f:{k}"] = entry
    return out


def _remove_fields(obj: Any, fields: dict[str, Any], keep: dict[str, Any]) -> None:
    """Remove from `obj` the leaves of `fields` that are absent from `keep` (fields no longer applied)."""
    if not isinstance(obj, dict):
        return
    for fk, sub in fields.items():
        if not fk.startswith("f:"):
            continue
        name = fk[2:]
        if name not in obj:
            continue
        if fk not in keep:
            del obj[name]
            continue
        val = obj[name]
        if isinstance(val, dict) and sub:
            _remove_fields(val, sub, keep[fk])
        elif isinstance(val, list) and sub:
            keys = {k for k in sub if k.startswith("k:")}
            gone = [json.loads(k[2:]) for k in keys if k not in keep[fk]]
            obj[name] = [
                x for x in val if not (isinstance(x, dict) and any(_ident_match(x, g) for g in gone))
            ]
            for k in keys & set(keep[fk]):
                ident = json.loads(k[2:])
                for x in obj[name]:
                    if isinstance(x, dict) and _ident_match(x, ident):
                        _remove_fields(x, sub[k], keep[fk][k])
            values = {k for k in sub if k.startswith("v:")}
            gone_values = [json.loads(k[2:]) for k in values if k not in keep[fk]]
            if gone_values:
                obj[name] = [x for x in obj[name] if x not in gone_values]


def _ident_match(item: dict[str, Any], ident: dict[str, Any]) -> bool:
    return all(item.get(k) == v for k, v in ident.items())


def server_side_apply(
    live: dict[str, Any] | None, applied: dict[str, Any], manager: str, now: str
) -> dict[str, Any]:
    """Merge an applied configuration; fields this manager applied before and dropped now are removed.

    Ownership is kept simple: a manager's set is exactly what it last applied; no conflicts are raised with
    other managers (the real server would report a 409 only when two managers set different values).
    """
    api_version = applied.get("apiVersion", "")
    new_fields = field_set(applied)
    base = clone(live) if live is not None else {}
    managed = list((base.get("metadata") or {}).get("managedFields") or [])
    previous = next(
        (m for m in managed if m.get("manager") == manager and m.get("operation") == "Apply"), None
    )
    if previous is not None:
        _remove_fields(base, previous.get("fieldsV1") or {}, new_fields)
    body = {k: v for k, v in applied.items()}
    meta = dict(body.get("metadata") or {})
    for k in ("managedFields", "resourceVersion", "uid", "creationTimestamp"):
        meta.pop(k, None)
    body["metadata"] = meta
    result = strategic_merge(base, body)
    managed = [m for m in managed if not (m.get("manager") == manager and m.get("operation") == "Apply")]
    managed.append({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now,
                    "fieldsType": "FieldsV1", "fieldsV1": new_fields})  # fmt: skip
    result.setdefault("metadata", {})["managedFields"] = managed
    return result


def record_update_manager(
    obj: dict[str, Any], manager: str, operation: str, now: str, subresource: str = ""
) -> None:
    """Note an Update-operation manager the way `kubectl get -o yaml --show-managed-fields` shows it."""
    meta = obj.setdefault("metadata", {})
    managed = [m for m in meta.get("managedFields") or [] if not (m.get("manager") == manager
               and m.get("operation") == operation and m.get("subresource", "") == subresource)]  # fmt: skip
    entry = {"manager": manager, "operation": operation, "apiVersion": obj.get("apiVersion", ""), "time": now,
             "fieldsType": "FieldsV1", "fieldsV1": field_set({k: v for k, v in obj.items() if k != "status"}
                                                              if not subresource else {"status": obj.get("status")})}  # fmt: skip
    if subresource:
        entry["subresource"] = subresource
    managed.append(entry)
    meta["managedFields"] = managed
