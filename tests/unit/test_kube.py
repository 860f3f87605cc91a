"""Kubernetes helpers: the idempotency test and a fast, clear failure on an unreachable API server."""

from __future__ import annotations

import pytest

from gpuready.kube import KubeError, connect, contains


def test_contains_ignores_server_defaults_but_not_differences():
    live = {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}], "x": 1}}
    assert contains(live, {"spec": {"containers": [{"name": "a", "image": "x"}]}})
    assert not contains(live, {"spec": {"containers": [{"name": "a", "image": "y"}]}})
    assert not contains(live, {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})
    assert not contains(live, {"spec": {"missing": None}})
    assert not contains({"data": {"k": "v"}}, {"data": {"k": "v", "k2": "v2"}})


def test_unreachable_api_server_fails_fast_with_the_url(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    with pytest.raises(KubeError, match=r"cannot reach the Kubernetes API at https://127.0.0.1:1: .*refused"):
        connect(str(kubeconfig))


def test_missing_kubeconfig_is_named(tmp_path):
    with pytest.raises(KubeError, match=r"cannot load kubeconfig .*nope"):
        connect(str(tmp_path / "nope"))
