"""Label and field selectors: the query-string forms and the object forms used in specs.

Parsing errors are 400 BadRequest with the real server's wording, because kubectl shows them verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import bad_request

Labels = Mapping[str, str]
LabelMatcher = Callable[[Labels], bool]

_REQ = re.compile(
    r"""\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*
        (?:(?P<op>==|=|!=)\s*(?P<val>[A-Za-z0-9_.-]*)
          |\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\)
        )?\s*(?:,|$)""",
    re.VERBOSE,
)


def parse_label_selector(text: str | None) -> LabelMatcher | None:
    """`a=b,c!=d,e in (x,y),f notin (z),g,!h`; None when empty (matches everything)."""
    if not text or not text.strip():
        return None
    reqs: list[LabelMatcher] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _REQ.match(text, pos)
        if not m or m.end() == pos:
            raise bad_request(
                f"unable to parse requirement: found '{text[pos:]}', expected: in, notin, =, ==, !=, gt, lt"
            )
        pos = m.end()
        key = m["key"]
        if m["neg"]:
            if m["op"] or m["setop"]:
                raise bad_request(f"unable to parse requirement: found '{text}', expected: identifier")
            reqs.append(lambda labels, k=key: k not in labels)
        elif m["op"] in ("=", "=="):
            reqs.append(lambda labels, k=key, v=m["val"]: labels.get(k) == v)
        elif m["op"] == "!=":
            reqs.append(lambda labels, k=key, v=m["val"]: labels.get(k) != v)
        elif m["setop"]:
            values = frozenset(v.strip() for v in m["set"].split(",") if v.strip())
            if m["setop"] == "in":
                reqs.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                reqs.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        else:
            reqs.append(lambda labels, k=key: k in labels)
    return lambda labels: all(r(labels) for r in reqs)


def match_label_selector_object(selector: Mapping[str, Any] | None, labels: Labels) -> bool:
    """metav1.LabelSelector (matchLabels + matchExpressions); an empty selector matches everything."""
    if not selector:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not _match_expression(expr, labels.get(expr.get("key", "")), expr.get("key", "") in labels):
            return False
    return True


def _match_expression(expr: Mapping[str, Any], value: str | None, present: bool) -> bool:
    op = expr.get("operator")
    values = expr.get("values") or []
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            left, right = int(value or ""), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def match_node_selector_terms(terms: list[Mapping[str, Any]], node: Mapping[str, Any]) -> bool:
    """Required node affinity: terms are ORed, expressions inside a term ANDed (matchFields: metadata.name)."""
    labels = node.get("metadata", {}).get("labels") or {}
    name = node.get("metadata", {}).get("name")
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        ok = all(
            _match_expression(e, labels.get(e.get("key", "")), e.get("key", "") in labels) for e in exprs
        )
        ok = ok and all(
            _match_expression(f, name, True) if f.get("key") == "metadata.name" else False for f in fields
        )
        if ok:
            return True
    return False


# Field selectors ---------------------------------------------------------------------------------------------

FieldMatcher = Callable[[Mapping[str, Any]], bool]

# Per resource key: the field labels the real server accepts besides metadata.name/metadata.namespace.
FIELD_LABELS: dict[str, tuple[str, ...]] = {
    "pods": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    "nodes": ("spec.unschedulable",),
    "events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
               "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
               "reason", "reportingComponent", "source", "type"),
    "secrets": ("type",),
    "namespaces": ("status.phase",),
    "certificatesigningrequests": ("spec.signerName",),
}  # fmt: skip


def field_value(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":
        return (obj.get("source") or {}).get("component", "")
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, resource_key: str) -> FieldMatcher | None:
    if not text or not text.strip():
        return None
    allowed = {"metadata.name", "metadata.namespace", *FIELD_LABELS.get(resource_key, ())}
    reqs: list[tuple[str, bool, str]] = []
    for part in _split_unescaped(text):
        m = re.match(r"^\s*([^=!]+?)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, value = m.groups()
        if key not in allowed:
            raise bad_request(f"field label not supported: {key}")
        reqs.append((key, op == "!=", value.replace("\\,", ",").replace("\\=", "=")))
    return lambda obj: all(
        (field_value(obj, k) != v) if neg else (field_value(obj, k) == v) for k, neg, v in reqs
    )


def _split_unescaped(text: str) -> list[str]:
    parts, cur, escaped = [], [], False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def exact_field(text: str | None, key: str) -> str | None:
    """The value of an `key=value` requirement, so the store can use an index instead of scanning."""
    if not text:
        return None
    for part in _split_unescaped(text):
        m = re.match(r"^\s*([^=!]+?)\s*(==|=)\s*(.*?)\s*$", part)
        if m and m.group(1) == key:
            return m.group(3)
    return None
