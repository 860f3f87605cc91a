"""`ApiServer`: wires the store, REST API, HTTPS transport, controllers and node backends together.

Embed it in-process (tests, the lab CLI) with `ApiServer(state_dir).start()`, or run it as a process with
`python -m gpuready.lab.apiserver`. Either way it writes `<state_dir>/kubeconfig` (admin bearer token) and
`<state_dir>/apiserver.json` (pid, url, CA path).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from . import errors
from .api import Call, Reply, RestApi
from .auth import Authenticator
from .certificates import CsrController
from .controllers import (
    DaemonSetController,
    NamespaceController,
    NodeLifecycleController,
    TaintEvictionController,
)
from .disruption import DisruptionController
from .http import make_http_server
from .kubelet import Kubelet
from .replicaset import ReplicaSetController
from .resources import RESOURCES, Resource
from .runtime import NodeBackend, ProxyResponse
from .scheduler import Scheduler
from .store import Store
from .tls import ensure_pki
from .virtual import VirtualNodes

Obj = dict[str, Any]
ProxyHandler = Callable[[str, str, str, bytes], ProxyResponse]


class ApiServer:
    def __init__(
        self,
        state_dir: str | Path,
        address: str = "127.0.0.1",
        port: int = 0,
        *,
        node_grace_period: float = 40.0,
        node_monitor_period: float = 5.0,
        anonymous_auth: bool = True,
        extra_sans: tuple[str, ...] = (),
        heartbeat_interval: float | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.address = address
        self.port = port
        self.store = Store()
        self.authn = Authenticator(self.store, anonymous=anonymous_auth)
        self.admin_token = secrets.token_hex(24)
        self.authn.add_token(self.admin_token, "kubernetes-admin", ("system:masters",))
        self.api = RestApi(self)
        self.stopping = threading.Event()
        self._backends: dict[str, NodeBackend] = {}
        self._default_backend = NodeBackend()
        self._proxies: dict[tuple[str, str, str], ProxyHandler] = {}
        ips = [a for a in (address, *extra_sans) if a.replace(".", "").isdigit() or ":" in a]
        dns = [a for a in extra_sans if a not in ips]
        self.pki = ensure_pki(self.state_dir / "pki", ips, dns)
        self.kubelet = Kubelet(self)
        self.scheduler = Scheduler(self)
        self.controllers = [DaemonSetController(self), NamespaceController(self),
                            NodeLifecycleController(self, node_grace_period, node_monitor_period),
                            TaintEvictionController(self, node_monitor_period), CsrController(self),
                            ReplicaSetController(self), DisruptionController(self)]  # fmt: skip
        # Like a kubelet's lease renewals (10 s for the default 40 s grace), scaled down when tests shorten the grace.
        self.virtual = VirtualNodes(self, heartbeat_interval or min(10.0, node_grace_period / 4))
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    # lifecycle -----------------------------------------------------------------------------------------------

    @property
    def host_port(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"https://{self.host_port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        return self.pki.ca_cert

    def ca_pem(self) -> str:
        return self.pki.ca_pem().decode()

    def start(self) -> ApiServer:
        self._bootstrap()
        self._httpd = make_http_server(self, self.address, self.port, str(self.pki.serving_cert),
                                       str(self.pki.serving_key), str(self.pki.ca_cert))  # fmt: skip
        self.port = self._httpd.server_address[1]
        self._write_cluster_info()
        self.kubelet.start()
        self.scheduler.start()
        for c in self.controllers:
            c.start()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="sim-http", daemon=True)  # fmt: skip
        self._thread.start()
        self._write_files()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.virtual.shutdown()
        self.store.close_watchers()
        for c in (*self.controllers, self.scheduler, self.kubelet):
            c.stop()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bootstrap(self) -> None:
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create_internal("namespaces", {"metadata": {"name": ns}})
        for name, value in (("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000)):
            self.create_internal("priorityclasses.scheduling.k8s.io", {
                "metadata": {"name": name}, "value": value,
                "description": "Used for system critical pods that must run in the cluster, but can be moved to "
                               "another node if necessary." if value == 2000000000 else
                               "Used for system critical pods that must not be moved from their current node.",
            })  # fmt: skip
        self.create_internal("services", {"metadata": {"name": "kubernetes", "namespace": "default",
                                                       "labels": {"component": "apiserver", "provider": "kubernetes"}},
                                          "spec": {"clusterIP": "10.96.0.1", "ports": [
                                              {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}})  # fmt: skip

    def _write_cluster_info(self) -> None:
        kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "", "cluster": {
            "certificate-authority-data": base64.b64encode(self.pki.ca_pem()).decode(), "server": self.url}}],
            "contexts": None, "current-context": "", "preferences": {}, "users": None}  # fmt: skip
        self.create_internal("configmaps", {"metadata": {"name": "cluster-info", "namespace": "kube-public"},
                                            "data": {"kubeconfig": yaml.safe_dump(kubeconfig)}})  # fmt: skip

    def kubeconfig(self, user: str = "kubernetes-admin", token: str | None = None) -> Obj:
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": f"{user}@gpuready-lab",
            "clusters": [{"name": "gpuready-lab", "cluster": {
                "certificate-authority-data": base64.b64encode(self.pki.ca_pem()).decode(), "server": self.url}}],
            "contexts": [{"name": f"{user}@gpuready-lab", "context": {"cluster": "gpuready-lab", "user": user}}],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "preferences": {},
        }  # fmt: skip

    def _write_files(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.kubeconfig_path
        path.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        path.chmod(0o600)
        info = {"pid": os.getpid(), "url": self.url, "ca": str(self.pki.ca_cert), "kubeconfig": str(path)}
        (self.state_dir / "apiserver.json").write_text(json.dumps(info, indent=2) + "\n")

    # internal object operations (controllers) ----------------------------------------------------------------

    def resource(self, key: str) -> Resource:
        return next(r for r in RESOURCES if r.key == key)

    def create_internal(self, key: str, obj: Obj, missing_ok: bool = False) -> Obj:
        """Create through admission (defaults, validation) like an API call from a controller."""
        res = self.resource(key)
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        try:
            return self.api.create(res, namespace, obj, None, internal=True)
        except errors.ApiError as exc:
            if missing_ok and exc.code in (404, 409):
                return {}
            raise

    def delete_internal(self, key: str, namespace: str, name: str) -> None:
        res = self.resource(key)
        try:
            self.api.delete(res, namespace, name)
        except errors.ApiError as exc:
            if exc.code != 404:
                raise

    # node backends and proxies -------------------------------------------------------------------------------

    def set_backend(self, node_name: str, backend: NodeBackend) -> None:
        self._backends[node_name] = backend

    def backend(self, node_name: str) -> NodeBackend:
        return self._backends.get(node_name, self._default_backend)

    def node_changed(self, node_name: str) -> None:
        self.backend(node_name).sync_node(self, node_name)

    def register_proxy(self, namespace: str, pod: str, port: str, handler: ProxyHandler) -> None:
        """Serve `/api/v1/namespaces/NS/pods/POD:PORT/proxy/...` with handler(method, path, query, body)."""
        self._proxies[(namespace, pod, str(port))] = handler

    def proxy(self, res: Resource, namespace: str, name: str, rest: str, call: Call) -> Reply:
        pod_name, _, port = name.partition(":")
        if res.plural == "services":
            svc = self.store.get("services", namespace, pod_name)
            if svc is None:
                raise errors.not_found("", "services", pod_name)
            pod, port = self._service_endpoint(svc, port)
        elif res.plural == "pods":
            pod = self.store.get("pods", namespace, pod_name)
            if pod is None:
                raise errors.not_found("", "pods", pod_name)
        else:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource", {})
        port = port or _first_port(pod)
        path = "/" + rest
        handler = self._proxies.get((namespace, pod["metadata"]["name"], port))
        answer: ProxyResponse | None = None
        if handler is not None:
            answer = handler(call.method, path, call.raw_query, call.body)
        elif (pod.get("spec") or {}).get("nodeName") and (pod.get("status") or {}).get("phase") == "Running":
            answer = self.backend(pod["spec"]["nodeName"]).proxy(
                pod, port, call.method, path, call.raw_query, call.body
            )
        if answer is None:
            ip = (pod.get("status") or {}).get("podIP") or ""
            raise errors.service_unavailable(f"error trying to reach service: dial tcp {ip}:{port}: connect: "
                                             "connection refused")  # fmt: skip
        return Reply(answer.status, raw=answer.body, content_type=answer.content_type)

    def _service_endpoint(self, svc: Obj, port: str) -> tuple[Obj, str]:
        from .selectors import match_label_selector_object

        spec = svc.get("spec") or {}
        ports = spec.get("ports") or []
        chosen = next(
            (p for p in ports if port in (p.get("name"), str(p.get("port")))), ports[0] if ports else None
        )
        selector = spec.get("selector") or {}
        ns = svc["metadata"].get("namespace", "")
        for pod in self.store.list("pods", ns)[0]:
            labels = pod["metadata"].get("labels") or {}
            running = (pod.get("status") or {}).get("phase") == "Running"
            if selector and running and match_label_selector_object({"matchLabels": selector}, labels):
                target = str((chosen or {}).get("targetPort", (chosen or {}).get("port", "")))
                if not target.isdigit():
                    target = _named_port(pod, target) or target
                return pod, target
        raise errors.service_unavailable(f'no endpoints available for service "{svc["metadata"]["name"]}"')

    # virtual nodes -------------------------------------------------------------------------------------------

    def add_virtual_nodes(self, count: int, profile: str = "dgx-h100") -> list[str]:
        return self.virtual.add(count, profile)


def _first_port(pod: Obj) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            return str(p.get("containerPort"))
    return "80"


def _named_port(pod: Obj, name: str) -> str | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == name:
                return str(p.get("containerPort"))
    return None
