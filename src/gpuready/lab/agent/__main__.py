"""`python -m gpuready.lab.agent`: run the lab's node agent until SIGTERM (started by `gpuready lab up`)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from gpuready.lab.state import write_atomic

from . import control
from .agent import Agent
from .virtual import VIRTUAL_NET


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuready.lab.agent", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the lab's control plane")
    parser.add_argument("--state-dir", required=True, type=Path, help="where the agent keeps its certificate")
    parser.add_argument("--kubelet-version", required=True, help="what virtual nodes report, e.g. v1.36.3")
    parser.add_argument("--node-addresses", default=VIRTUAL_NET, help="CIDR for virtual nodes' InternalIPs")
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=10.0,
        help="seconds between virtual nodes' Lease renewals (a kubelet's default: 10)",
    )
    parser.add_argument("--virtual-nodes", type=int, default=0, help="register this many virtual GPU nodes")
    parser.add_argument("--virtual-profile", default="dgx-h100", help="hardware profile of the virtual nodes")
    parser.add_argument("--ready-file", type=Path, help="written (JSON) once the agent serves")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(
        args.kubeconfig,
        args.state_dir,
        args.kubelet_version,
        args.node_addresses,
        args.heartbeat,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    agent.start(args.virtual_nodes, args.virtual_profile)
    sock = control.serve(args.state_dir / "agent.sock", agent.control)
    if args.ready_file:
        ready = {"virtual_nodes": agent.virtual.names, "control": str(args.state_dir / "agent.sock")}
        write_atomic(args.ready_file, json.dumps(ready) + "\n")
    logging.getLogger("gpuready.lab.agent").info("serving %d node(s)", len(agent._managed))
    stop.wait()
    sock.close()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
