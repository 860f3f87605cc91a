"""What the real control plane costs to get: a cold and a warm build of kube-apiserver, kube-controller-manager,
kube-scheduler and kubeadm from the k8s.io/kubernetes Go module, and building etcd from go.etcd.io/etcd.

- cold: an empty cache directory and an empty Go build cache (GOCACHE), so every package compiles; the Go module
  cache (GOMODCACHE, ~700 MB of sources) is kept unless --cold-modules, which also downloads every module;
- warm: the same version again into an empty cache directory with the Go build cache from the cold run: what a
  second lab version or a wiped lab cache costs (the link step only);
- cached: `build_kube` when the binaries are already there (what every `lab up` pays).
Prints wall seconds (time.monotonic, microsecond resolution; one run each, the cold one takes minutes) and the
machine's core count; nothing is asserted.

Run: .venv/bin/python bench/control_plane_build.py [--version 1.36.3] [--cold-modules]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gpuready.lab.cluster import binaries


def timed(label: str, fn: object) -> float:
    started = time.monotonic()
    fn()  # type: ignore[operator]
    seconds = time.monotonic() - started
    print(f"{label:<34} {seconds:9.3f} s", flush=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", default="1.36.3")
    parser.add_argument(
        "--cold-modules", action="store_true", help="also start from an empty Go module cache"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuready-bench-build-"))
    os.environ["GOCACHE"] = str(work / "gocache")
    if args.cold_modules:
        os.environ["GOMODCACHE"] = str(work / "gomodcache")
    quiet = lambda message: None  # noqa: E731 - the bench prints its own lines
    print(f"control plane v{args.version}, {os.cpu_count()} cores, Go {shutil.which('go')}")
    try:
        cold = timed("cold build", lambda: binaries.build_kube(args.version, quiet, work / "cold"))
        warm = timed(
            "warm build (Go build cache kept)",
            lambda: binaries.build_kube(args.version, quiet, work / "warm"),
        )
        cached = timed(
            "cached (binaries present)", lambda: binaries.build_kube(args.version, quiet, work / "warm")
        )
        timed("etcd from the Go module proxy (build)", lambda: binaries.ensure_etcd(quiet, work / "etcd"))
        print(f"cold / warm: {cold / warm:.1f}x; warm / cached: {warm / max(cached, 1e-6):.0f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
