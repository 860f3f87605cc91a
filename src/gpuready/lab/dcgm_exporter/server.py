"""The lab's dcgm-exporter for real-kubelet hosts: the entrypoint of the image the lab builds under the
``dcgm_exporter_image`` knob's name (:mod:`gpuready.lab.cuda_images`).

NVIDIA's exporter (open source Go) reads the GPUs through DCGM's host engine, ``libdcgm``, which the lab does not
build or mock, so the exporter stays an emulation and says so (``/health`` and the start-up line): a small HTTP
server on ``DCGM_EXPORTER_LISTEN`` (``:9400``) serving ``/metrics`` and ``/health``. The scrape is
:func:`.scrape.dcgm_scrape` over the emulated machine read by :class:`.host.HostView` from the container's own
filesystem: the host's runc wrapper bind-mounts the machine's files read-only into a container the nvidia runtime
gave ``/dev/nvidiactl``
(:data:`gpuready.lab.realhost.MACHINE_DIRS`), which it does for this pod because the image sets
``NVIDIA_VISIBLE_DEVICES=all`` (as NVIDIA's image does) and the DaemonSet runs with the ``nvidia`` RuntimeClass.

Kubernetes mapping (``DCGM_EXPORTER_KUBERNETES=true``): as the real exporter, it asks the kubelet's pod-resources
gRPC API (``v1.PodResourcesLister/List`` on ``/var/lib/kubelet/pod-resources/kubelet.sock``, which the DaemonSet
mounts) which pod's container holds which device; the GPU's series then carry ``container``, ``namespace`` and
``pod``. grpcio's generic ``unary_unary`` sends the empty request and returns the response's bytes, which
:func:`pod_devices` decodes by hand (the four messages and fields the mapping needs, no generated code).
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuready.spec.dra import DRIVER

from .dra import ClaimRef, host_devices
from .host import HostState, HostView
from .scrape import Owner, dcgm_scrape, dra_mapping

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
HARDWARE = "/opt/gpuready-lab/machine/hardware.json"  # gpuready.lab.hardware.HOST_MACHINE_DIR's file
BANNER = "gpuready lab: emulated dcgm-exporter (no DCGM here: the lab's emulated GPUs)"


# --- the pod-resources API's response, decoded by hand -----------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: an int for varint and fixed fields, bytes for
    length-delimited ones (strings, embedded messages, packed repeated fields)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated field")
        yield number, value


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else ""


def _two_texts_and_messages(
    message: bytes, first: int, second: int, repeated: int
) -> tuple[str, str, list[bytes]]:
    """Two string fields of a message and the embedded messages of one repeated field (a pod's name, namespace and
    containers; a claim's name, namespace and resources)."""
    texts = {first: "", second: ""}
    messages: list[bytes] = []
    for n, v in fields(message):
        if n in texts:
            texts[n] = _text(v)
        elif n == repeated and isinstance(v, bytes):
            messages.append(v)
    return texts[first], texts[second], messages


def _containers(response: bytes) -> Iterator[tuple[str, str, str, list[tuple[int, int | bytes]]]]:
    """(namespace, pod, container, the container's fields) of a ``ListPodResourcesResponse``
    (k8s.io/kubelet/pkg/apis/podresources/v1: ``pod_resources = 1``; PodResources ``name = 1``,
    ``namespace = 2``, ``containers = 3``; ContainerResources ``name = 1``)."""
    for number, pod in fields(response):
        if number != 1 or not isinstance(pod, bytes):
            continue
        name, namespace, containers = _two_texts_and_messages(pod, 1, 2, 3)
        for c in containers:
            found = list(fields(c))
            container = next((_text(v) for n, v in found if n == 1), "")
            yield namespace, name, container, found


def pod_devices(response: bytes) -> list[tuple[str, str, str, str, list[str]]]:
    """(namespace, pod, container, resource name, device IDs) of a ``ListPodResourcesResponse``: the device
    plugins' devices (ContainerResources ``devices = 2``; ContainerDevices ``resource_name = 1``,
    ``device_ids = 2``). CPUs and memory are skipped; claims are :func:`pod_claims`."""
    out = []
    for namespace, name, container, found in _containers(response):
        for n, d in found:
            if n != 2 or not isinstance(d, bytes):
                continue
            resource, ids = "", []
            for m, v in fields(d):
                if m == 1:
                    resource = _text(v)
                elif m == 2:
                    ids.append(_text(v))
            out.append((namespace, name, container, resource, ids))
    return out


def pod_claims(response: bytes) -> list[tuple[str, str, str, str, str, str, str, str]]:
    """(namespace, pod, container, claim namespace, claim name, driver, pool, device) for each device a container
    holds through a ResourceClaim (ContainerResources ``dynamic_resources = 5``; DynamicResource
    ``claim_name = 2``, ``claim_namespace = 3``, ``claim_resources = 4``; ClaimResource ``driver_name = 2``,
    ``pool_name = 3``, ``device_name = 4``)."""
    out = []
    for namespace, name, container, found in _containers(response):
        for n, dynamic in found:
            if n != 5 or not isinstance(dynamic, bytes):
                continue
            claim, claim_ns, resources = _two_texts_and_messages(dynamic, 2, 3, 4)
            for r in resources:
                got = {m: _text(v) for m, v in fields(r) if m in (2, 3, 4)}
                out.append((namespace, name, container, claim_ns, claim, got.get(2, ""), got.get(3, ""),
                            got.get(4, "")))  # fmt: skip
    return out


def claim_owners(
    entries: list[tuple[str, str, str, str, str, str, str, str]], host: HostState
) -> tuple[dict[str, Owner], dict[str, ClaimRef]]:
    """Device UUID -> its pod, and -> its claim, for the devices NVIDIA's DRA driver (``gpu.nvidia.com``) prepared:
    the driver's device names (``gpu-<minor>``, MIG devices after them) are the machine's."""
    devices = host_devices(host)
    pods: dict[str, Owner] = {}
    claims: dict[str, ClaimRef] = {}
    for namespace, pod, container, claim_ns, claim, driver, pool, device in entries:
        if driver != DRIVER or device not in devices:
            continue
        gpu, mig = devices[device]
        uuid = mig.uuid if mig else gpu.uuid
        pods.setdefault(uuid, (namespace, pod, container))
        claims.setdefault(uuid, ClaimRef.of(claim_ns, claim, pool, device, mig))
    return pods, claims


def owners(entries: list[tuple[str, str, str, str, list[str]]]) -> dict[str, Owner]:
    """Device UUID -> (namespace, pod, container) of NVIDIA's resources, the first pod per device; a time-sliced
    replica's ID (``<uuid>::<n>``) names its GPU."""
    out: dict[str, Owner] = {}
    for namespace, pod, container, resource, ids in entries:
        if not resource.startswith("nvidia.com/"):
            continue
        for device in ids:
            out.setdefault(device.split("::", 1)[0], (namespace, pod, container))
    return out


def list_pod_resources(socket_path: str = POD_RESOURCES_SOCKET, timeout: float = 5.0) -> bytes:
    """The kubelet's ``List`` response, as bytes (grpcio, imported here: the image has it, the lab need not)."""
    import grpc  # type: ignore[import-untyped]  # in the image only (cuda_images), not a gpuready dependency

    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        call = channel.unary_unary(LIST_METHOD)
        response: bytes = call(b"", timeout=timeout)
        return response


# --- the HTTP server ---------------------------------------------------------------------------------------------


def exporter_object(env: dict[str, str], argv: list[str], hostname: str) -> dict[str, Any]:
    """What :func:`dcgm_scrape` reads of the exporter's pod: its name (the ``Hostname`` label without host
    networking, as the real exporter's ``os.Hostname()``) and its container's environment and arguments."""
    return {
        "metadata": {"name": hostname},
        "spec": {
            "containers": [
                {
                    "env": [{"name": k, "value": v} for k, v in sorted(env.items()) if k.startswith("DCGM_")],
                    "args": list(argv),
                }
            ]
        },
    }


class Exporter:
    """One scrape's inputs: the machine (a HostView), the pod's own settings, and the kubelet's pod resources (the
    ``List`` response: ``lookup``, None with Kubernetes mapping off)."""

    def __init__(
        self,
        view: HostView,
        exporter: dict[str, Any],
        image: str,
        lookup: Callable[[], bytes] | None,
    ) -> None:
        self.view, self.exporter, self.image, self.lookup = view, exporter, image, lookup
        self.started = time.monotonic()

    def mapping(self, host: HostState) -> tuple[dict[str, Owner], dict[str, ClaimRef]]:
        """(device UUID -> pod, device UUID -> claim): the claims only with DRA mapping on, as the real exporter."""
        if self.lookup is None:
            return {}, {}
        try:
            response = self.lookup()
        except Exception as exc:  # the real exporter logs it and exports without pod labels
            print(f"pod-resources: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return {}, {}
        pods = owners(pod_devices(response))
        if not dra_mapping(self.exporter):
            return pods, {}
        held, claims = claim_owners(pod_claims(response), host)
        return {**held, **pods}, claims

    def metrics(self) -> str:
        host = self.view.snapshot()
        pods, claims = self.mapping(host)
        return dcgm_scrape(host, self.exporter, pods, self.started, self.image, claims)


def handler(exporter: Exporter) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body = exporter.metrics().encode()
                self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/health":
                self._send(200, b"OK\n", "text/plain; charset=utf-8")
            else:
                self._send(404, f"{BANNER}: /metrics or /health\n".encode(), "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # a scrape every few seconds: no access log

    return Handler


def listen_address(value: str) -> tuple[str, int]:
    """``DCGM_EXPORTER_LISTEN`` (``:9400``, ``host:port``) as a bind address."""
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def serve(exporter: Exporter, address: tuple[str, int]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(address, handler(exporter))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    hostname = socket.gethostname()
    kubernetes = env.get("DCGM_EXPORTER_KUBERNETES", "").lower() == "true" or bool(
        {"-k", "--kubernetes"} & set(argv)
    )
    socket_path = env.get("GPUREADY_LAB_POD_RESOURCES_SOCKET", POD_RESOURCES_SOCKET)
    view = HostView(
        hostname, Path("/"), Path(env.get("GPUREADY_LAB_HARDWARE", HARDWARE)), env.get("GPUREADY_LAB_BOOT_ID")
    )
    exporter = Exporter(
        view,
        exporter_object(env, argv, hostname),
        env.get("GPUREADY_LAB_IMAGE", ""),
        (lambda: list_pod_resources(socket_path)) if kubernetes else None,
    )
    address = listen_address(env.get("DCGM_EXPORTER_LISTEN", ":9400"))
    server = http.server.ThreadingHTTPServer(address, handler(exporter))
    stop_on_sigterm(server)
    print(f"{BANNER}; listening on {env.get('DCGM_EXPORTER_LISTEN', ':9400')}, Kubernetes mapping "
          f"{'on' if kubernetes else 'off'}", flush=True)  # fmt: skip
    server.serve_forever()
    server.server_close()
    return 0


def stop_on_sigterm(server: http.server.HTTPServer) -> None:
    """End ``serve_forever`` on SIGTERM, as NVIDIA's exporter exits on it.

    The exporter is its container's PID 1, and the kernel drops a signal to a PID namespace's init that has no
    handler: without one, each pod deletion waited out its grace period and each host shutdown systemd's 90 s stop
    timeout for the container's scope (measured: a rebooting lab host took 92 s, and 2.2 s with the handler).
    ``shutdown`` blocks until the loop ends, so it runs on its own thread, not in the handler that interrupted the
    loop."""
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())


if __name__ == "__main__":
    sys.exit(main())
