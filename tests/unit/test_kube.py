"""Kubernetes helpers: the idempotency test and a fast, clear failure on an unreachable API server."""

from __future__ import annotations

import pytest

from gpuready.kube import KubeError, connect, contains


def test_contains_ignores_server_defaults_but_not_differences():
    live = {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}], "x": 1}}
    assert contains(live, {"spec": {"containers": [{"name": "a", "image": "x"}]}})
    assert not contains(live, {"spec": {"containers": [{"name": "a", "image": "y"}]}})
    assert not contains(live, {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})
    assert not contains(live, {"spec": {"missing": "set"}})
    assert not contains({"data": {"k": "v"}}, {"data": {"k": "v", "k2": "v2"}})


@pytest.mark.parametrize("empty", [None, "", False, 0, [], {}])
def test_contains_takes_an_empty_value_for_a_field_the_server_left_out(empty):
    """The API server leaves empty fields out (omitempty): env KUBECONFIG="" comes back without a value."""
    live = {"env": [{"name": "KUBECONFIG"}]}
    assert contains(live, {"env": [{"name": "KUBECONFIG", "value": empty}]})
    assert not contains(live, {"env": [{"name": "KUBECONFIG", "value": "/etc/kubeconfig"}]})
    assert contains({"env": [{"name": "K", "value": empty}]}, {"env": [{"name": "K", "value": empty}]})


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


@pytest.fixture
def in_a_pod(tmp_path, monkeypatch):
    """A pod's service account (token, CA) in a temporary directory and the service's env; no kubeconfig."""
    from gpuready import arguments

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("pod-token")
    (account / "ca.crt").write_text(
        "-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n"
    )
    monkeypatch.setattr(arguments, "SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config
    return account


def test_in_a_pod_with_nothing_given_the_service_account_is_used(in_a_pod):
    from gpuready import arguments, kube

    assert arguments.in_pod()
    assert kube.uses_in_cluster()
    configuration = kube.configure()
    assert configuration.host == "https://127.0.0.1:1"
    assert configuration.api_key["BearerToken"].lower() == "bearer pod-token"
    assert configuration.ssl_ca_cert == str(in_a_pod / "ca.crt")
    with pytest.raises(KubeError, match=r"cannot reach the Kubernetes API at https://127.0.0.1:1: "):
        connect(timeout=2)


def test_a_kubeconfig_context_or_kubeconfig_env_wins_over_the_pod(in_a_pod, tmp_path, monkeypatch):
    from gpuready import kube

    assert not kube.uses_in_cluster("some/kubeconfig")
    assert not kube.uses_in_cluster(None, "some-context")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kc"))
    assert not kube.uses_in_cluster()
    with pytest.raises(KubeError, match=r"cannot load kubeconfig"):
        kube.configure()


def test_not_a_pod_without_the_token_or_the_service_env(in_a_pod, monkeypatch):
    from gpuready import arguments, kube

    (in_a_pod / "token").unlink()
    assert not arguments.in_pod() and not kube.uses_in_cluster()
    (in_a_pod / "token").write_text("t")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert not arguments.in_pod()


def test_a_broken_service_account_is_named(in_a_pod):
    from gpuready import kube

    (in_a_pod / "ca.crt").unlink()
    with pytest.raises(KubeError, match=r"cannot load the in-cluster configuration .*certification file"):
        kube.configure()
