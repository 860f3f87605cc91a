"""Kubernetes syntax rules for labels and taints, so bad inventory data fails before kubeadm or the API does.

The rules are those of k8s.io/apimachinery validation (IsQualifiedName, IsValidLabelValue) and the taint syntax
kubeadm and kubectl accept (``key[=value]:Effect``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Every pattern here is applied with fullmatch: `$` with re.match lets a trailing newline through.
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid label/taint key, or None."""
    if not isinstance(key, str) or not key:
        return "a key must be a non-empty string"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a key has at most one '/' (prefix/name)"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "the prefix must be a DNS subdomain (lower case, digits, '-', '.'), at most 253 characters"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return (
            "the name part must be at most 63 characters of [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a valid label value, or None (the empty string is valid)."""
    if not isinstance(value, str):
        return "a value must be a string"
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        return (
            "a value must be empty or at most 63 characters of [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )
    return None


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def as_dict(self) -> dict[str, str]:
        """The shape of ``spec.taints[]`` in a Node and of JoinConfiguration ``nodeRegistration.taints[]``."""
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


def dns_name_problem(name: object) -> str | None:
    """Why ``name`` is not a Kubernetes node name (an RFC 1123 DNS subdomain: lower case, at most 253 characters,
    labels of at most 63), or None. An IPv4 address passes, as a DNS subdomain of digits."""
    allowed = (
        "must be a DNS name, the node's name in Kubernetes: lower-case letters, digits, '-' and '.', labels of "
        "1-63 characters starting and ending with a letter or digit, at most 253 in all"
    )
    if not isinstance(name, str) or not name or len(name) > 253:
        return allowed
    if not all(_DNS_LABEL.fullmatch(label) for label in name.split(".")):
        return allowed
    return None


def parse_taint(text: object) -> Taint:
    """Parse ``key[=value]:Effect``; raise ValueError saying what is wrong and what is allowed."""
    if isinstance(text, dict):
        text = f"{text.get('key', '')}{'=' + text['value'] if text.get('value') else ''}:{text.get('effect', '')}"
    if not isinstance(text, str) or ":" not in text:
        raise ValueError("a taint is 'key[=value]:Effect'")
    kv, _, effect = text.rpartition(":")
    key, _, value = kv.partition("=")
    if effect not in TAINT_EFFECTS:
        raise ValueError(f"effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    for problem in (label_key_problem(key), label_value_problem(value)):
        if problem:
            raise ValueError(problem)
    return Taint(key, value, effect)


# Container image references, as the distribution reference grammar (what containerd and the kubelet parse) has
# them: [registry[:port]/]path[:tag][@sha256:digest]; path components lower case.
_IMAGE_DOMAIN_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_DOMAIN = rf"{_IMAGE_DOMAIN_PART}(?:\.{_IMAGE_DOMAIN_PART})*(?::(?P<port>[0-9]{{1,5}}))?"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_IMAGE_DOMAIN})/)?(?P<path>{_IMAGE_PATH}(?:/{_IMAGE_PATH})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)
IMAGE_REFERENCE_FORM = (
    "must be an image reference [registry[:port]/]repository[:tag][@sha256:<64 lower-case hex>], with lower-case "
    "repository path components ([a-z0-9] separated by '.', '_', '__' or '-'), a tag of at most 128 "
    "[A-Za-z0-9_.-] not starting with '.' or '-', e.g. 'registry.example.com:5000/nvidia/cuda:12.4.1-base-ubuntu22.04'"
)


def image_reference_problem(ref: object) -> str | None:
    """Why ``ref`` is not a valid container image reference, or None."""
    if not isinstance(ref, str) or (m := _IMAGE_REFERENCE.fullmatch(ref)) is None:
        return IMAGE_REFERENCE_FORM
    if m.group("port") is not None and not 1 <= int(m.group("port")) <= 65535:
        return f"the registry port {m.group('port')} is not in 1..65535"
    if len(image_repository(ref)) > 255:
        return "the repository name is longer than 255 characters"
    return None


def image_repository(ref: str) -> str:
    """The repository of an image reference, without tag or digest: 'nvcr.io/nvidia/cuda' of
    'nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04'."""
    name = ref.split("@", 1)[0]
    head, sep, tail = name.rpartition(":")
    return head if sep and "/" not in tail else name
