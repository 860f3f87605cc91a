"""Kubernetes client helpers shared by the add-ons deploy, the upgrade deploy and the conformance suite.

The official client, configured once per kubeconfig; a reachability check that fails in seconds with the URL and
the reason (the client's own retries would otherwise take minutes on an unreachable server); server-side apply;
and the "does the live object already say what we want" test that keeps deploys idempotent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

FIELD_MANAGER = "gpuready"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuready"}  # on every object gpuready creates
MANAGED_BY_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())


class KubeError(RuntimeError):
    """The cluster could not be reached or refused a request; the message says which and why."""


@dataclass
class Cluster:
    api: client.ApiClient
    url: str
    # seconds one API request may take (the connect timeout: --command-timeout in the suite), for callers that
    # make single requests on the cluster (reading a log, deleting a namespace)
    request_timeout: float = 10.0

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def dynamic(self) -> DynamicClient:
        dyn = getattr(self, "_dynamic", None)
        if dyn is None:
            dyn = DynamicClient(self.api)
            self._dynamic = dyn
        return dyn


def uses_in_cluster(kubeconfig: str | None = None, context: str | None = None) -> bool:
    """Whether :func:`connect` takes the pod's service account: no kubeconfig, no context, no ``$KUBECONFIG``
    and no ``~/.kube/config`` given, in a pod (:func:`gpuready.arguments.in_pod`) - the client's own order."""
    from gpuready.arguments import in_pod

    nothing_given = not (kubeconfig or context or os.environ.get("KUBECONFIG"))
    return nothing_given and not os.path.exists(os.path.expanduser("~/.kube/config")) and in_pod()


def configure(kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """The client configuration of ``kubeconfig``/``context``, else of the pod's service account when the
    process runs in a pod and nothing names a kubeconfig (:func:`uses_in_cluster`); nothing is contacted."""
    configuration = client.Configuration()
    if uses_in_cluster(kubeconfig, context):
        from kubernetes.config.incluster_config import InClusterConfigLoader

        from gpuready.arguments import SERVICE_ACCOUNT_DIR

        loader = InClusterConfigLoader(
            token_filename=os.path.join(SERVICE_ACCOUNT_DIR, "token"),
            cert_filename=os.path.join(SERVICE_ACCOUNT_DIR, "ca.crt"),
            environ=os.environ,
        )
        try:
            loader.load_and_set(configuration)
        except Exception as exc:
            raise KubeError(
                f"cannot load the in-cluster configuration ({SERVICE_ACCOUNT_DIR}): {exc}"
            ) from exc
        return configuration
    path = os.path.expanduser(kubeconfig) if kubeconfig else None
    try:
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except Exception as exc:
        raise KubeError(f"cannot load kubeconfig {path or '$KUBECONFIG/~/.kube/config'}: {exc}") from exc
    return configuration


def connect(kubeconfig: str | None = None, context: str | None = None, timeout: float = 5.0) -> Cluster:
    """A client for the cluster named by ``kubeconfig``/``context`` (in a pod, with none given: the pod's service
    account, see :func:`configure`), checked with one ``GET /version``."""
    configuration = configure(kubeconfig, context)
    configuration.retries = urllib3.Retry(total=0, connect=0, read=0)
    api = client.ApiClient(configuration)
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout)
    except client.ApiException as exc:  # it answered, and said no
        raise KubeError(
            f"the Kubernetes API at {configuration.host} refused the kubeconfig's request: "
            f"{exc.status} {exc.reason}{REFUSED.get(exc.status or 0, '')}"
        ) from exc
    except Exception as exc:
        raise KubeError(f"cannot reach the Kubernetes API at {configuration.host}: {_cause(exc)}") from exc
    return Cluster(api=api, url=configuration.host, request_timeout=timeout)


REFUSED = {
    401: " (its credentials were not accepted: an expired token or certificate, or another cluster's)",
    403: " (its user may not read the API's version: anonymous, or no RBAC)",
}


def _cause(exc: BaseException) -> str:
    """Why a request got no answer, without urllib3's wrapping ("HTTPSConnection object at 0x...: ", "Max retries
    exceeded with url"): e.g. "[Errno 111] Connection refused", "timed out (read timeout=5)"."""
    import re

    reason: object = getattr(exc, "reason", None) or exc
    text = str(reason)
    text = re.sub(r"^(<[^>]*>|\w+Connection\([^)]*\)): ", "", text)
    text = re.sub(r"^Failed to establish a new connection: ", "", text)
    return text


def contains(live: Any, desired: Any) -> bool:
    """Whether ``live`` already says everything ``desired`` says (the server may add defaults, never differ).

    An empty value (``""``, ``[]``, ``{}``, ``false``, ``0``, ``null``) matches a field the live object lacks: the API
    server leaves such fields out of what it returns (``omitempty``), e.g. an env var ``KUBECONFIG=""`` comes back
    with no ``value``; comparing them by key re-applied the device plugin's DaemonSet on every run."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            contains(live[k], v) if k in live else _empty(v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(contains, live, desired))
    return live == desired


def _empty(value: Any) -> bool:
    return value in (None, "", False, 0) or (isinstance(value, list | dict) and not value)


def _resource(cluster: Cluster, manifest: dict[str, Any]):
    return cluster.dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])


def get_live(cluster: Cluster, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The live object named by ``manifest``, or None."""
    from kubernetes.dynamic.exceptions import NotFoundError

    meta = manifest["metadata"]
    try:
        obj = _resource(cluster, manifest).get(name=meta["name"], namespace=meta.get("namespace"))
    except NotFoundError:
        return None
    return obj.to_dict()


def needs_apply(cluster: Cluster, manifest: dict[str, Any]) -> bool:
    live = get_live(cluster, manifest)
    desired = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    return live is None or not contains(live, desired)


# Fields the API server refuses to change on a live object: a new value means a new object.
IMMUTABLE: dict[tuple[str, str], tuple[str, ...]] = {("scheduling.k8s.io/v1", "PriorityClass"): ("value",)}


def immutable_changes(live: dict[str, Any] | None, manifest: dict[str, Any]) -> list[str]:
    """The immutable fields whose live value differs from ``manifest``'s, as ``field live -> wanted``."""
    if live is None:
        return []
    fields = IMMUTABLE.get((manifest["apiVersion"], manifest["kind"]), ())
    return [
        f"{f} {live.get(f)!r} -> {manifest[f]!r}"
        for f in fields
        if f in manifest and live.get(f) != manifest[f]
    ]


def apply(cluster: Cluster, manifest: dict[str, Any], take_ownership: bool = False) -> None:
    """Server-side apply as field manager ``gpuready``. A field another manager set since (``kubectl edit``, a
    controller, a person) is not overwritten: the API server's conflict is raised as `KubeError` naming the
    object, each field and its manager, unless `take_ownership` forces the apply (SSA's ``force``)."""
    from kubernetes.dynamic.exceptions import ConflictError

    meta = manifest["metadata"]
    try:
        _resource(cluster, manifest).server_side_apply(
            body=manifest,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=take_ownership,
        )
    except ConflictError as exc:
        raise KubeError(conflict_message(manifest, exc.body)) from None


def check_apply(cluster: Cluster, manifest: dict[str, Any]) -> None:
    """The apply as a server-side dry run without force: raises `KubeError` naming conflicts, changes nothing."""
    from kubernetes.dynamic.exceptions import ConflictError

    meta = manifest["metadata"]
    try:
        _resource(cluster, manifest).server_side_apply(
            body=manifest, name=meta["name"], namespace=meta.get("namespace"), field_manager=FIELD_MANAGER,
            force_conflicts=False, dry_run="All",
        )  # fmt: skip
    except ConflictError as exc:
        raise KubeError(conflict_message(manifest, exc.body)) from None


def conflict_message(manifest: dict[str, Any], body: Any) -> str:
    """`describe(manifest)`: each conflicting field with the manager that owns it, and the two ways out."""
    import json

    try:
        status = json.loads(body) if isinstance(body, (str, bytes)) else dict(body or {})
    except ValueError:
        status = {}
    causes = (status.get("details") or {}).get("causes") or []
    fields = [f"{c.get('field', '?')} (owned by {c.get('message', 'another field manager').removeprefix('conflict with ')})"
              for c in causes] or [status.get("message", "a field another field manager owns")]  # fmt: skip
    return (
        f"{describe(manifest)}: another field manager changed what gpuready applies: {'; '.join(fields)}. "
        "gpuready does not overwrite it silently: undo that change, or set addons_take_ownership = True "
        "to take these fields over"
    )


def delete(cluster: Cluster, manifest: dict[str, Any]) -> None:
    meta = manifest["metadata"]
    _resource(cluster, manifest).delete(name=meta["name"], namespace=meta.get("namespace"))


def describe(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{manifest['kind']} {where}{meta['name']}"
