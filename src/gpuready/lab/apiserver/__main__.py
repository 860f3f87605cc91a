"""`python -m gpuready.lab.apiserver --state-dir D [--address A] [--port P] [--virtual-nodes N] [--lab-state L]`:
serve until SIGTERM. With `--lab-state`, each lab host's Node gets GPU behaviour read from that host's files;
virtual nodes get the same behaviour from their hardware profile."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from .gpu import attach, attach_virtual, lab_host_views
from .server import ApiServer
from .virtual import PROFILES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuready.lab.apiserver", description=__doc__)
    p.add_argument("--state-dir", required=True, help="where kubeconfig, apiserver.json and pki/ are written")
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (see apiserver.json)")
    p.add_argument("--virtual-nodes", type=int, default=0)
    p.add_argument("--virtual-profile", default="dgx-h100", choices=sorted(PROFILES))
    p.add_argument(
        "--node-grace-period", type=float, default=40.0, help="seconds without heartbeat before NotReady"
    )
    p.add_argument("--node-monitor-period", type=float, default=5.0)
    p.add_argument("--anonymous-auth", default="true", choices=["true", "false"])
    p.add_argument("--tls-san", action="append", default=[], help="extra IP or DNS name for the serving cert")
    p.add_argument("--lab-state", help="a lab's state directory (its state.json names the hosts)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    server = ApiServer(args.state_dir, args.address, args.port, node_grace_period=args.node_grace_period,
                       node_monitor_period=args.node_monitor_period, anonymous_auth=args.anonymous_auth == "true",
                       extra_sans=tuple(args.tls_san))  # fmt: skip
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    server.start()
    if args.lab_state:
        for view in lab_host_views(args.lab_state):
            attach(server, view.name, view)
    if args.virtual_nodes:
        names = server.add_virtual_nodes(args.virtual_nodes, args.virtual_profile)
        attach_virtual(server, names, args.virtual_profile)
    print(f"serving {server.url} kubeconfig={server.kubeconfig_path}", flush=True)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
