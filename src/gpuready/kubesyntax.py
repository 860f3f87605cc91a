"""Kubernetes syntax rules for labels and taints, so bad inventory data fails before kubeadm or the API does.

The rules are those of k8s.io/apimachinery validation (IsQualifiedName, IsValidLabelValue) and the taint syntax
kubeadm and kubectl accept (``key[=value]:Effect``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid label/taint key, or None."""
    if not isinstance(key, str) or not key:
        return "a key must be a non-empty string"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a key has at most one '/' (prefix/name)"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "the prefix must be a DNS subdomain (lower case, digits, '-', '.'), at most 253 characters"
    if len(name) > 63 or not _NAME.match(name):
        return (
            "the name part must be at most 63 characters of [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a valid label value, or None (the empty string is valid)."""
    if not isinstance(value, str):
        return "a value must be a string"
    if value and (len(value) > 63 or not _NAME.match(value)):
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
