"""Decoding of Kubernetes protobuf request bodies for the few types kubectl's typed clients send.

kubectl's generators and helpers (`create namespace|configmap|secret|serviceaccount|priorityclass`, `drain`'s
evictions, `delete` options) post `application/vnd.kubernetes.protobuf`, and client-go does not fall back to JSON
on a 415. The envelope is `k8s\\x00` + runtime.Unknown{typeMeta, raw}; `raw` is decoded with the field numbers of
k8s.io/api's generated.proto for the types below. Responses are always JSON (clients accept it).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from . import errors

MAGIC = b"k8s\x00"

# field number -> (json name, kind); kinds: str, bytes, bool, int, time, map, mapbytes, strs, msg:X, msgs:X
Schema = dict[int, tuple[str, str]]
SCHEMAS: dict[str, Schema] = {
    "Unknown": {1: ("typeMeta", "msg:TypeMeta"), 2: ("raw", "raw"), 3: ("contentEncoding", "str"),
                4: ("contentType", "str")},
    "TypeMeta": {1: ("apiVersion", "str"), 2: ("kind", "str")},
    "ObjectMeta": {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 4: ("selfLink", "str"),
                   5: ("uid", "str"), 6: ("resourceVersion", "str"), 7: ("generation", "int"),
                   8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"),
                   10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", "map"), 12: ("annotations", "map"),
                   13: ("ownerReferences", "msgs:OwnerReference"), 14: ("finalizers", "strs")},
    "OwnerReference": {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
                       6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")},
    "Namespace": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "strs")},
    "ConfigMap": {1: ("metadata", "msg:ObjectMeta"), 2: ("data", "map"), 3: ("binaryData", "mapbytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "msg:ObjectMeta"), 2: ("data", "mapbytes"), 3: ("type", "str"),
               4: ("stringData", "map"), 5: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", "msg:ObjectMeta"), 2: ("secrets", "msgs:ObjectReference"),
                       3: ("imagePullSecrets", "msgs:LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool")},
    "ObjectReference": {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str"), 4: ("uid", "str"),
                        5: ("apiVersion", "str"), 6: ("resourceVersion", "str"), 7: ("fieldPath", "str")},
    "LocalObjectReference": {1: ("name", "str")},
    "PriorityClass": {1: ("metadata", "msg:ObjectMeta"), 2: ("value", "int"), 3: ("globalDefault", "bool"),
                      4: ("description", "str"), 5: ("preemptionPolicy", "str")},
    "Eviction": {1: ("metadata", "msg:ObjectMeta"), 2: ("deleteOptions", "msg:DeleteOptions")},
    "DeleteOptions": {1: ("gracePeriodSeconds", "int"), 2: ("preconditions", "msg:Preconditions"),
                      3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"), 5: ("dryRun", "strs")},
    "Preconditions": {1: ("uid", "str"), 2: ("resourceVersion", "str")},
    "Binding": {1: ("metadata", "msg:ObjectMeta"), 2: ("target", "msg:ObjectReference")},
    "SelfSubjectAccessReview": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {1: ("resourceAttributes", "msg:ResourceAttributes"),
                                    2: ("nonResourceAttributes", "msg:NonResourceAttributes")},
    "ResourceAttributes": {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"), 4: ("version", "str"),
                           5: ("resource", "str"), 6: ("subresource", "str"), 7: ("name", "str")},
    "NonResourceAttributes": {1: ("path", "str"), 2: ("verb", "str")},
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "MapEntry": {1: ("key", "str"), 2: ("value", "raw")},
}  # fmt: skip


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((num, value))
        elif wire == 2:
            length, pos = _varint(buf, pos)
            out.append((num, buf[pos : pos + length]))
            pos += length
        elif wire == 1:
            out.append((num, int.from_bytes(buf[pos : pos + 8], "little")))
            pos += 8
        elif wire == 5:
            out.append((num, int.from_bytes(buf[pos : pos + 4], "little")))
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def decode_message(buf: bytes, schema_name: str) -> dict[str, Any]:
    schema = SCHEMAS[schema_name]
    obj: dict[str, Any] = {}
    for num, value in _fields(buf):
        if num not in schema:
            continue  # a field this table does not know; the real server would keep it
        name, kind = schema[num]
        if value in (b"", 0) and kind in ("str", "int", "bool"):
            continue  # Go omits empty strings, zero numbers and false in JSON (omitempty)
        if kind == "str":
            obj[name] = bytes(value).decode()  # type: ignore[arg-type]
        elif kind == "raw":
            obj[name] = bytes(value)  # type: ignore[arg-type]
        elif kind == "bool":
            obj[name] = bool(value)
        elif kind == "int":
            v = int(value)  # type: ignore[arg-type]
            obj[name] = v - (1 << 64) if v >= 1 << 63 else v
        elif kind == "time":
            t = decode_message(bytes(value), "Time")  # type: ignore[arg-type]
            obj[name] = datetime.fromtimestamp(t.get("seconds", 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        elif kind in ("map", "mapbytes"):
            entry = decode_message(bytes(value), "MapEntry")  # type: ignore[arg-type]
            raw = entry.get("value", b"")
            obj.setdefault(name, {})[entry.get("key", "")] = (
                base64.b64encode(raw).decode() if kind == "mapbytes" else raw.decode()
            )
        elif kind == "strs":
            obj.setdefault(name, []).append(bytes(value).decode())  # type: ignore[arg-type]
        elif kind.startswith("msgs:"):
            obj.setdefault(name, []).append(decode_message(bytes(value), kind[5:]))  # type: ignore[arg-type]
        elif kind.startswith("msg:"):
            obj[name] = decode_message(bytes(value), kind[4:])  # type: ignore[arg-type]
    return obj


def decode_object(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded API object as the JSON dict the rest of the server works with."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("provided protobuf data does not start with the Kubernetes magic number")
    try:
        unknown = decode_message(body[len(MAGIC) :], "Unknown")
        type_meta = unknown.get("typeMeta") or {}
        kind = type_meta.get("kind", "")
        if kind not in SCHEMAS or kind in ("Unknown", "TypeMeta", "Time", "MapEntry"):
            raise errors.ApiError(415, "UnsupportedMediaType", f"the simulator cannot decode protobuf {kind or 'data'}; "
                                  "send application/json", {})  # fmt: skip
        obj = decode_message(unknown.get("raw", b""), kind)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"error decoding protobuf body: {exc}") from None
    if type_meta.get("apiVersion"):
        obj = {"apiVersion": type_meta["apiVersion"], "kind": kind, **obj}
    else:
        obj = {"kind": kind, **obj}
    return obj
