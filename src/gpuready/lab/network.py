"""The lab's own network namespace: private addresses for its hosts and servers, reached from here by a route.

A real kube-apiserver refuses to proxy to loopback addresses and must reach kubelets and pods at their node and pod
addresses, and this machine allows test hosts and services to listen only on loopback or on private addresses inside
network namespaces the lab creates itself. So every lab gets a network namespace of its own, and everything in the
lab listens there; this machine's namespace (where pytest, pyinfra, ssh and kubectl run) reaches it through a veth
pair and one route, and nothing listens in this machine's namespace.

Address plan (relative to the lab's subnet, 10.213.0.0/16 for a lab alone on the machine; a lab brought up beside
another takes the next free /16 of SUBNETS, 10.214.0.0/16 and so on, so the route here stays unambiguous):

    10.213.0.1          the control plane: the API server listens here (port 6443)
    10.213.0.2          the lab's apt repository server (port 80) and its egress proxy (port 3128, see below)
    10.213.1.N          host N (gpu-node-N, N = 1..250): its sshd on port 22, its kubelet's node address
    10.213.128.0/17     reserved for pod IPs
    10.213.0.254        this machine's end of the veth pair: the source of connections from here; nothing listens

Devices:

- in the lab's namespace (``gpuready-lab-<8 hex of the state dir>``, so labs with different state dirs never share
  one): ``lo`` up; ``lab0`` carrying every lab address as a /32 (a dummy interface; a bridge without ports, which
  behaves the same, on kernels built without the dummy driver); ``uplink0``, the namespace's end of the veth pair,
  with a /32 route back to 10.213.0.254 and no default route, so nothing in the lab reaches past it on its own;
- in this machine's namespace: ``grlab-<8 hex>``, the other end, holding 10.213.0.254/32, and the route
  ``10.213.0.0/16 dev grlab-<8 hex> src 10.213.0.254``. Deleting the veth deletes both ends, the address and
  the route with it.

The one way out: the hosts install containerd and friends from the Debian mirror their base root was built from.
The egress proxy (``python -m gpuready.lab.network egress``) runs in this machine's namespace, where the mirror is
reachable, but listens on a socket created inside the lab's namespace (on 10.213.0.2:3128): a socket belongs to the
namespace it was created in, so only the lab's hosts can connect to it. It forwards plain HTTP requests and CONNECT
tunnels to the hosts:ports it is given (the base root's apt sources) and refuses everything else; the hosts' apt is
pointed at it, and at the lab's own repository directly.

Kernel settings: net.ipv4.ip_forward is per network namespace and is set inside the lab's; the bridge-nf-call ones
are per namespace on recent kernels (then set inside too) and machine-wide on older ones (the caller keeps setting
those here). The hosts cannot set them themselves: nspawn mounts /proc/sys read-only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import http.client
import ipaddress
import json
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/run/netns")
DEFAULT_SUBNET = "10.213.0.0/16"
SUBNETS = tuple(f"10.{second}.0.0/16" for second in range(213, 223))  # the first free one is the lab's
LAB_INTERFACE = "lab0"
UPLINK = "uplink0"
CONTROL_PLANE_OFFSET = 1  # 10.213.0.1
REPO_OFFSET = 2  # 10.213.0.2
ROOT_OFFSET = 254  # 10.213.0.254
HOSTS_THIRD_OCTET = 1  # 10.213.1.N
REPO_PORT = 80
EGRESS_PORT = 3128
# Kernel settings a Kubernetes node needs that live in its network namespace (where this kernel has them there).
NETNS_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
}
HOW_TO_GET_IP = "install iproute2 (apt-get install iproute2)"
CLONE_NEWNET = 0x40000000


class NetworkError(RuntimeError):
    pass


# --- names and addresses ------------------------------------------------------------------------------------------


def lab_id(state_dir: Path) -> str:
    """8 hex digits naming one lab (its state dir), shared with its cgroups."""
    return hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]


def netns_name(state_dir: Path) -> str:
    return f"gpuready-lab-{lab_id(state_dir)}"


def root_veth_name(state_dir: Path) -> str:
    return f"grlab-{lab_id(state_dir)}"  # 14 characters: interface names have at most 15


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


@dataclass(frozen=True)
class LabNetwork:
    """One lab's namespace, veth and subnet; every address of the plan derives from the subnet."""

    netns: str
    root_veth: str
    subnet: str = DEFAULT_SUBNET

    @property
    def _net(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    def _at(self, third: int, fourth: int) -> str:
        return str(self._net.network_address + third * 256 + fourth)

    @property
    def control_plane(self) -> str:
        return self._at(0, CONTROL_PLANE_OFFSET)

    @property
    def repo(self) -> str:
        return self._at(0, REPO_OFFSET)

    @property
    def root_address(self) -> str:
        return self._at(0, ROOT_OFFSET)

    @property
    def pod_cidr(self) -> str:
        return str(list(self._net.subnets(new_prefix=17))[1])

    def host_address(self, index: int) -> str:
        return host_address(self.subnet, index)

    def to_state(self) -> dict[str, Any]:
        return {
            "netns": self.netns,
            "root_veth": self.root_veth,
            "subnet": self.subnet,
            "interface": LAB_INTERFACE,
            "uplink": UPLINK,
            "control_plane": self.control_plane,
            "repo": self.repo,
            "root_address": self.root_address,
            "pod_cidr": self.pod_cidr,
        }

    @classmethod
    def from_state(cls, entry: dict[str, Any]) -> LabNetwork:
        return cls(entry["netns"], entry["root_veth"], entry["subnet"])


def host_address(subnet: str, index: int) -> str:
    """Host N's address: 10.213.1.N in 10.213.0.0/16."""
    if not 1 <= index <= 250:
        raise NetworkError(f"host numbers must be between 1 and 250, got {index}")
    return str(ipaddress.IPv4Network(subnet).network_address + HOSTS_THIRD_OCTET * 256 + index)


def plan(state_dir: Path, subnet: str | None = None) -> LabNetwork:
    """The network of the lab in state_dir: its names, and subnet (or the first of SUBNETS nothing here uses)."""
    return LabNetwork(netns_name(state_dir), root_veth_name(state_dir), subnet or choose_subnet())


def choose_subnet(candidates: Sequence[str] = SUBNETS, used: list[str] | None = None) -> str:
    """The first candidate that no route or address of this machine's namespace overlaps (another lab's, a VPN's)."""
    taken = [ipaddress.ip_network(n, strict=False) for n in (used if used is not None else _root_networks())]
    for candidate in candidates:
        net = ipaddress.IPv4Network(candidate)
        if not any(net.overlaps(t) for t in taken if t.version == 4 and t.prefixlen > 0):
            return candidate
    raise NetworkError(
        f"every lab subnet ({candidates[0]}..{candidates[-1]}) is in use here: too many labs up?"
    )


def _root_networks() -> list[str]:
    routes = json.loads(_ip("-4", "-j", "route", "show", "table", "all").stdout or "[]")
    found = [r["dst"] for r in routes if r.get("dst") not in (None, "default")]
    for link in json.loads(_ip("-4", "-j", "addr", "show").stdout or "[]"):
        found += [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if "local" in a]
    return found


# --- prerequisites, `ip` ------------------------------------------------------------------------------------------


def check_prerequisites() -> None:
    """Fail early, naming what is missing, before anything of the lab is created."""
    if shutil.which("ip") is None:
        raise NetworkError(
            f"`ip` not found: the lab puts its hosts in a network namespace of their own; {HOW_TO_GET_IP}"
        )
    if not Path("/proc/self/ns/net").exists():
        raise NetworkError("this kernel has no network namespaces (CONFIG_NET_NS): the lab cannot run here")
    if os.geteuid() != 0:
        raise NetworkError(f"creating the lab's network namespace needs root (running as uid {os.geteuid()})")


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise NetworkError(f"`ip` not found: {HOW_TO_GET_IP}") from exc
    if check and result.returncode != 0:
        raise NetworkError(f"`{shlex.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
    return result


def exec_argv(netns: str, argv: Sequence[str]) -> list[str]:
    """argv run inside the namespace (`ip netns exec` execs it in place: the PID is the command's own)."""
    return ["ip", "netns", "exec", netns, *argv]


def run(netns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run of argv inside the namespace."""
    return subprocess.run(exec_argv(netns, argv), **kwargs)


def exists(netns: str) -> bool:
    return netns_path(netns).exists()


def _link_exists(name: str, netns: str | None = None) -> bool:
    if netns is None:
        return Path("/sys/class/net", name).exists()
    return _ip("link", "show", name, netns=netns, check=False).returncode == 0


def addresses(netns: str) -> list[str]:
    """The IPv4 addresses on the lab interface."""
    out = _ip("-4", "-j", "addr", "show", "dev", LAB_INTERFACE, netns=netns).stdout or "[]"
    return [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])]


def add_address(netns: str, address: str) -> None:
    """Put an address (a host's, the control plane's) on the lab interface; adding one that is there already is
    fine."""
    _ip("addr", "replace", f"{address}/32", "dev", LAB_INTERFACE, netns=netns)


def pids(netns: str) -> list[int]:
    """The processes whose network namespace is the lab's."""
    if not exists(netns):
        return []
    return [int(p) for p in _ip("netns", "pids", netns, check=False).stdout.split()]


# --- create and remove --------------------------------------------------------------------------------------------


def ensure(net: LabNetwork, extra_addresses: Sequence[str] = ()) -> dict[str, Any]:
    """Create whatever of the lab's network is missing; returns its state entry. Safe to run again."""
    check_prerequisites()
    if not exists(net.netns):
        result = _ip("netns", "add", net.netns, check=False)
        if result.returncode != 0:
            raise NetworkError(
                f"cannot create the network namespace {net.netns}: {result.stderr.strip()} (the lab needs root, "
                f"a kernel with network namespaces and iproute2's `ip netns`: {HOW_TO_GET_IP})"
            )
    _ip("link", "set", "lo", "up", netns=net.netns)
    kind = _ensure_lab_interface(net.netns)
    for address in (net.control_plane, net.repo, *extra_addresses):
        add_address(net.netns, address)

    if _link_exists(net.root_veth) and not _link_exists(UPLINK, net.netns):
        _ip("link", "del", net.root_veth)  # half a pair (its other end is gone): start again
    if not _link_exists(net.root_veth):
        _ip("link", "add", net.root_veth, "type", "veth", "peer", "name", UPLINK, "netns", net.netns)
    _ip("link", "set", net.root_veth, "up")
    _ip("link", "set", UPLINK, "up", netns=net.netns)
    _ip("addr", "replace", f"{net.root_address}/32", "dev", net.root_veth)
    routed = json.loads(_ip("-4", "-j", "route", "show", "exact", net.subnet).stdout or "[]")
    if any(r.get("dev") != net.root_veth for r in routed):
        raise NetworkError(f"{net.subnet} is already routed here via {routed[0].get('dev')}: another lab's?")
    _ip("route", "replace", net.subnet, "dev", net.root_veth, "src", net.root_address)
    _ip("route", "replace", f"{net.root_address}/32", "dev", UPLINK, netns=net.netns)
    sysctls = set_sysctls(net.netns, NETNS_SYSCTLS)
    return {**net.to_state(), "interface_kind": kind, "sysctls_set": sysctls}


def _ensure_lab_interface(netns: str) -> str:
    """lab0: a dummy interface, or a bridge without ports where the kernel has no dummy driver."""
    if not _link_exists(LAB_INTERFACE, netns):
        dummy = _ip("link", "add", LAB_INTERFACE, "type", "dummy", netns=netns, check=False)
        if dummy.returncode != 0:
            _ip("link", "add", LAB_INTERFACE, "type", "bridge", netns=netns)
    _ip("link", "set", LAB_INTERFACE, "up", netns=netns)
    info = json.loads(_ip("-d", "-j", "link", "show", LAB_INTERFACE, netns=netns).stdout)
    return str(info[0].get("linkinfo", {}).get("info_kind", "unknown"))


def set_sysctls(netns: str, values: dict[str, str]) -> dict[str, str]:
    """Set the keys the namespace has (a kernel may keep some machine-wide); returns what it set."""
    script = "".join(
        f"p={shlex.quote(str(Path('/proc/sys', *key.split('.'))))}; "
        f'if [ -e "$p" ]; then echo {shlex.quote(value)} > "$p" && echo {shlex.quote(key)}; fi; '
        for key, value in values.items()
    )
    result = run(netns, ["sh", "-c", script], capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"setting {', '.join(values)} in {netns} failed: {result.stderr.strip()}")
    done = result.stdout.split()
    return {key: values[key] for key in done}


def destroy(netns: str, root_veth: str, subnet: str | None = None) -> None:
    """Remove the lab's network: kill what still runs in it, then the veth (and its route), then the namespace.

    Safe to call twice and after a crash: it removes what exists. Whatever still runs in the lab's namespace when
    this is called is the lab's (nothing else starts processes in it), and would keep the namespace alive.
    """
    if shutil.which("ip") is None:
        if exists(netns) or _link_exists(root_veth):
            raise NetworkError(
                f"cannot remove the lab's network namespace {netns}: `ip` not found; {HOW_TO_GET_IP}"
            )
        return
    leftovers = pids(netns)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pids(netns) and time.monotonic() < deadline:
        time.sleep(0.05)
    if subnet and _link_exists(root_veth):
        _ip("route", "del", subnet, "dev", root_veth, check=False)
    if _link_exists(root_veth):
        _ip("link", "del", root_veth)
    if exists(netns):
        _ip("netns", "del", netns)
        _remove_empty_netns_dir()
    if exists(netns) or _link_exists(root_veth):
        raise NetworkError(f"{netns} or {root_veth} is still there after removing them")


def _remove_empty_netns_dir() -> None:
    """`ip netns add` makes /run/netns a mount (bound on itself) the first time; when no namespace is left in it,
    take it away again (the next `ip netns add` makes it anew), so a lab leaves no mount behind."""
    try:
        if any(NETNS_DIR.iterdir()):
            return
    except OSError:
        return
    for _ in range(_mount_count(NETNS_DIR)):  # a bind on itself: os.path.ismount cannot tell, mountinfo can
        subprocess.run(["umount", str(NETNS_DIR)], capture_output=True, stdin=subprocess.DEVNULL)
    with contextlib.suppress(OSError):
        NETNS_DIR.rmdir()


def _mount_count(path: Path) -> int:
    """How many mounts sit on path (from /proc/self/mountinfo, whose 5th field is the mount point)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return 0
    return sum(1 for line in lines if line.split()[4].encode().decode("unicode_escape") == str(path))


# --- sockets inside the namespace -------------------------------------------------------------------------------


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(netns: str) -> Iterator[None]:
    """Run the block with this thread in the lab's network namespace (sockets created there stay in it)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(netns_path(netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def listening_socket(address: str, port: int, netns: str | None = None, backlog: int = 64) -> socket.socket:
    """A TCP socket listening on address:port, in the lab's namespace when netns is given."""
    with entered(netns) if netns else contextlib.nullcontext():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


# --- the egress proxy ---------------------------------------------------------------------------------------------

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


def start_egress(sock: socket.socket, allow: Sequence[str], log_path: Path, lab: str = "") -> int:
    """Serve the proxy on an already listening socket, in a child process of this machine's namespace; its PID.

    lab (the state dir) only labels the command line, so that `ps` tells whose proxy it is.
    """
    argv = [sys.executable, "-m", "gpuready.lab.network", "egress", "--fd", str(sock.fileno()), "--lab", lab]
    for target in allow:
        argv += ["--allow", target]
    return _serve_in_child(argv, sock, log_path)


def _serve_in_child(argv: list[str], sock: socket.socket, log_path: Path) -> int:
    """Run `argv` (a server of this module, given `sock`'s descriptor) as a child of its own session; its PID."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            pass_fds=[sock.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


def allow_entry(url: str) -> str | None:
    """ "host:port" of an http(s) URL (what the proxy is told to forward to), None for other schemes."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


class EgressHandler(BaseHTTPRequestHandler):
    """A forward proxy for the hosts' apt: absolute http:// requests and CONNECT, to allowed host:ports only."""

    allowed: frozenset[str] = frozenset()
    server_version = "gpuready-lab-egress"
    timeout = 300

    def _refuse(self, target: str) -> None:
        allowed = ", ".join(sorted(self.allowed)) or "nothing"
        self.send_error(403, f"the lab's egress proxy forwards only to {allowed}, not {target}")

    def _forward(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.send_error(400, "a proxy request needs an absolute http:// URL")
            return
        target = f"{url.hostname}:{url.port or 80}"
        if target not in self.allowed:
            self._refuse(target)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        upstream = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        try:
            upstream.request(self.command, path, body=body, headers=headers)
            response = upstream.getresponse()
        except OSError as exc:
            upstream.close()
            self.send_error(502, f"{target}: {exc}")
            return
        try:
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if self.command != "HEAD":
                shutil.copyfileobj(response, self.wfile, 64 * 1024)
        finally:
            upstream.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = _forward

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if self.path not in self.allowed:
            self._refuse(self.path)
            return
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=60)
        except (OSError, ValueError) as exc:
            self.send_error(502, f"{self.path}: {exc}")
            return
        with upstream:
            self.send_response(200, "Connection established")
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            _relay(self.connection, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    with selectors.DefaultSelector() as sel:
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        while True:
            for key, _ in sel.select(timeout=300):
                data = key.fileobj.recv(64 * 1024)  # type: ignore[union-attr]
                if not data:
                    return
                key.data.sendall(data)


def serve_egress(fd: int, allow: Sequence[str]) -> None:
    handler = type("Handler", (EgressHandler,), {"allowed": frozenset(allow)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
    server.socket.close()
    server.socket = socket.socket(fileno=fd)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gpuready.lab.network", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    egress = sub.add_parser("egress", help="serve the lab's egress proxy on an already listening socket")
    egress.add_argument("--fd", type=int, required=True)
    egress.add_argument("--allow", action="append", default=[], metavar="HOST:PORT")
    egress.add_argument("--lab", default="", help="the lab's state dir (a label for ps; not used)")
    args = parser.parse_args(argv)
    serve_egress(args.fd, args.allow)


if __name__ == "__main__":
    main()
