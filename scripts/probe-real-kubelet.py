#!/usr/bin/env python3
"""Probe: can a lab host run the REAL kubelet with its Debian containerd and runc? (issue #28, first stage)

Why a probe and not the lab: the lab's hosts still run the emulated kubelet and node agent, and the switch must
not land before the real stack is known to work on these machines (a VM with hybrid cgroups, no cgroup2
controllers, no CAP_SYS_RESOURCE). This brings up its own one-host lab (own state dir, subnet 10.221.0.0/16, host
number 221, so it runs beside the default lab and the test labs), gives the host the lab-only nspawn options of
:mod:`gpuready.lab.realnode` (``hosts.up(nspawn_args=...)``; the lab itself passes none), stops the lab's node agent (it would otherwise play kubelet for the host), then, step by
step, reporting each step's exact output when it fails:

 1. installs the release's containerd and runc (apt, through the lab's egress proxy), the runc wrapper and the
    CRI config; imports a pause image (Kubernetes' build/pause/linux/pause.c, gcc -static) and a busybox image
    (Debian's busybox-static), both OCI archives written by :func:`gpuready.lab.realnode.oci_archive`;
 2. installs the real kubelet (gpuready.lab.kubelet_build), the real kubeadm (the control plane's) and crictl
    (cri-tools from its Go module), and runs the REAL ``kubeadm join`` with the lab's bootstrap token;
 3. waits for the Node, runs a pod on it (hostNetwork: no CNI yet), lists it with ``crictl ps``, checks its
    PID namespace, ``kubectl logs`` and ``exec``, and that an image the lab lacks gives ErrImagePull;
 4. measures the RSS of kubelet and containerd on the host, then takes everything down (``--keep`` leaves it up;
    ``--down`` only takes an earlier run down).

Run as root from the repository: ``.venv/bin/python scripts/probe-real-kubelet.py [--os trixie] [--keep]``.
``PROBE_RUNC=plain`` (runc unchanged) or ``=path-only`` (the wrapper keeps the resources) show what the runc wrapper
is for; ``PROBE_IGNORE_PREFLIGHT`` lists kubeadm's ignored preflight errors (default SystemVerification).
The report goes to stdout and ``<state>/probe-report.txt``. Findings: docs/lab-real-kubelet.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuready.lab import hosts, k8s_packages, kubelet_build, realnode
from gpuready.lab.cluster import binaries, cluster
from gpuready.lab.kubelet_build import ensure_kubelet
from gpuready.lab.state import LabPaths, cache_dir

STATE = Path(os.environ.get("PROBE_STATE", "/var/lib/gpuready-lab-probe28"))
SUBNET = "10.221.0.0/16"
INDEX = 221
NODE = f"gpu-node-{INDEX}"
VERSION = cluster.DEFAULT_VERSION
CRICTL_VERSION = k8s_packages.CRI_TOOLS_VERSION
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36-lab"

REPORT: list[str] = []
PASSTHROUGH = """#!/usr/bin/python3
import os, sys
real = next(p for p in ("/usr/sbin/runc", "/usr/bin/runc") if os.path.exists(p) and not os.path.islink(p))
os.execv(real, [real, *sys.argv[1:]])
"""


def say(line: str) -> None:
    REPORT.append(line)
    print(line, flush=True)


def step(name: str, ok: bool, detail: str = "") -> bool:
    say(f"[{'OK' if ok else 'FAIL'}] {name}")
    for line in detail.strip().splitlines()[-40:]:
        say(f"      {line}")
    return ok


# --- what the probe brings (built or fetched once into the lab cache) ---------------------------------------------


def ensure_crictl(progress: Any) -> Path:
    return kubelet_build.ensure_crictl(CRICTL_VERSION, progress)


def pause_binary(work: Path) -> Path:
    """Kubernetes' own pause, from the k8s.io/kubernetes module in the Go module cache (the kubelet build put it
    there), compiled statically with this machine's gcc."""
    modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    source = Path(modcache) / f"k8s.io/kubernetes@v{VERSION}/build/pause/linux/pause.c"
    out = work / "pause"
    tag = realnode.PAUSE_IMAGE.rsplit(":", 1)[1]
    subprocess.run(["gcc", "-Os", "-static", f"-DVERSION=v{tag}", "-o", str(out), str(source)], check=True)
    return out


def busybox_binary() -> Path:
    base = cache_dir() / "busybox-static"
    base.mkdir(parents=True, exist_ok=True)
    with binaries.locked(base / ".lock"):
        found = sorted(base.glob("busybox-static_*/busybox"))
        if found:
            return found[-1]
        mirror = hosts.debian_mirror("bookworm")
        return (
            binaries._fetch_deb(
                mirror, "bookworm", "busybox-static", base, hosts.progress, only="bin/busybox"
            )
            / "busybox"
        )


def images(work: Path) -> dict[str, Path]:
    pause = pause_binary(work).read_bytes()
    busybox = busybox_binary().read_bytes()
    archives = {
        realnode.PAUSE_IMAGE: realnode.oci_archive(
            realnode.PAUSE_IMAGE,
            [realnode.layer_tar({"pause": (pause, 0o755)})],
            {"Entrypoint": ["/pause"], "User": "65535:65535"},
        ),
        BUSYBOX_IMAGE: realnode.oci_archive(
            BUSYBOX_IMAGE,
            [realnode.layer_tar({"bin/busybox": (busybox, 0o755)}, {"bin/sh": "busybox"})],
            {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
        ),
    }
    out = {}
    for name, data in archives.items():
        path = work / (name.split("/")[-1].replace(":", "_") + ".oci.tar")
        path.write_bytes(data)
        out[name] = path
    return out


# --- the lab -----------------------------------------------------------------------------------------------------


def nspawn_args(paths: LabPaths, spec: hosts.HostSpec) -> list[str]:
    """The host's lab-only nspawn options. Its own directories live in its host dir and the tunables' files in its
    upper dir, so `lab down` removes them."""
    own = {target: paths.host_dir(spec.name) / "realnode" / target.strip("/").replace("/", "-")
           for target in realnode.OWN_DIRS}  # fmt: skip
    for path in own.values():
        path.mkdir(parents=True, exist_ok=True)
    realnode.write_sysctl_files(paths.host_dir(spec.name) / "upper")
    return realnode.nspawn_args(own)


def take_down(paths: LabPaths) -> None:
    hosts.down(paths)
    shutil.rmtree(STATE / "probe-work", ignore_errors=True)


def on_host(paths: LabPaths, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return hosts.run_on_host(paths, NODE, ["sh", "-c", command], timeout=timeout)


def out(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stdout + result.stderr).strip()


def kubectl(state: dict[str, Any], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    try:
        exe = str(k8s_packages.kubectl_binary())
    except RuntimeError:
        exe = shutil.which("kubectl") or "kubectl"
    cmd = [exe, f"--kubeconfig={state['apiserver']['kubeconfig']}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check)


def wait(what: str, probe: Any, timeout: float) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        ok, last = probe()
        if ok:
            return True, last
        time.sleep(2)
    return False, f"{what}: not within {timeout:.0f}s; last: {last}"


# --- the probe ---------------------------------------------------------------------------------------------------


def probe(paths: LabPaths, release: str) -> bool:
    work = STATE / "probe-work"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    kubelet, seconds = ensure_kubelet(VERSION, hosts.progress)
    step(f"real kubelet v{VERSION} {f'built in {seconds:.0f}s' if seconds else 'cached'}: {kubelet}", True)
    kube, _ = binaries.build_kube(VERSION, hosts.progress)
    crictl = ensure_crictl(hosts.progress)
    archives = images(work)
    step(f"images written: {', '.join(f'{n} ({p.stat().st_size} B)' for n, p in archives.items())}", True)

    extra: list[str] = []

    def args_for(spec: hosts.HostSpec) -> list[str]:
        extra[:] = nspawn_args(paths, spec)
        return extra

    state = hosts.up(
        paths,
        nodes=1,
        profiles=["l4-1"],
        first_index=INDEX,
        subnet=SUBNET,
        releases=[release],
        control_plane=True,
        nspawn_args=args_for,
    )
    step(f"lab up: {NODE} ({release}) on {state['hosts'][NODE]['address']} in {time.monotonic() - started:.0f}s",
         True, "extra nspawn options:\n" + "\n".join(extra))  # fmt: skip
    cluster.stop_agent(state["apiserver"].get("agent") or {})
    step("the lab's node agent stopped (it would play kubelet for the host)", True)
    merged = paths.host_dir(NODE) / "merged"

    checks = on_host(
        paths,
        "set -e; ls -l /dev/kmsg; dd if=/dev/kmsg bs=8192 count=1 status=none >/dev/null; echo /dev/kmsg readable; "
        "sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops; "
        "test $(cat /proc/sys/vm/overcommit_memory) = 1; test $(cat /proc/sys/kernel/panic) = 10; "
        "findmnt -n -o TARGET,FSTYPE,SOURCE /var/lib/containerd; findmnt -n -o TARGET,FSTYPE,SOURCE /var/lib/kubelet; "
        "echo controllers: $(cat /sys/fs/cgroup/cgroup.controllers); grep CapBnd /proc/self/status",
    )
    step(
        "host sees /dev/kmsg, the kubelet's sysctl values, its own /var/lib dirs",
        checks.returncode == 0,
        out(checks),
    )
    apt = on_host(paths, "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                  "apt-get install -y -qq containerd runc containernetworking-plugins iptables conntrack ethtool "
                  "socat >/tmp/apt.log 2>&1; rc=$?; tail -5 /tmp/apt.log; "
                  "dpkg-query -W containerd runc containernetworking-plugins; exit $rc", timeout=900)  # fmt: skip
    if not step("apt-get install containerd runc containernetworking-plugins", apt.returncode == 0, out(apt)):
        return False

    (merged / "etc/containerd").mkdir(parents=True, exist_ok=True)
    version = on_host(paths, "containerd --version").stdout.split()
    major = int(version[2].lstrip("v").split(".")[0]) if len(version) > 2 else 1
    (merged / "etc/containerd/config.toml").write_text(realnode.containerd_config(containerd_major=major))
    wrapper = merged / realnode.RUNC_WRAPPER_PATH.lstrip("/")
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    # PROBE_RUNC=plain: the same path, but runc runs unchanged; =path-only: the wrapper keeps the resources (to see
    # what a release needs the wrapper for)
    wrapper.write_text(
        {
            "plain": PASSTHROUGH,
            "path-only": realnode.RUNC_WRAPPER.replace(
                "def strip(resources, have):\n", "def strip(resources, have):\n    return resources\n"
            ),
        }.get(os.environ.get("PROBE_RUNC", ""), realnode.RUNC_WRAPPER)
    )
    wrapper.chmod(0o755)
    (merged / "etc/crictl.yaml").write_text("runtime-endpoint: unix:///run/containerd/containerd.sock\n"
                                           "image-endpoint: unix:///run/containerd/containerd.sock\n")  # fmt: skip
    restart = on_host(paths, "systemctl restart containerd && sleep 2 && systemctl is-active containerd && "
                      "ctr version; journalctl -u containerd --no-pager -n 15 -o cat | grep -i -E 'error|warn|fail'")  # fmt: skip
    if not step(
        "containerd with the lab's CRI config and runc wrapper", "active" in restart.stdout, out(restart)
    ):
        return False

    for dest in ("usr/bin/kubelet", "usr/bin/kubeadm", "usr/bin/crictl"):
        src = {"kubelet": kubelet, "kubeadm": kube.path("kubeadm"), "crictl": crictl}[Path(dest).name]
        shutil.copy2(src, merged / dest)
    (merged / "root/images").mkdir(parents=True, exist_ok=True)
    for path in archives.values():
        shutil.copy2(path, merged / "root/images" / path.name)
    imported = on_host(paths, "for f in /root/images/*.oci.tar; do ctr -n k8s.io images import "
                       "--all-platforms --digests $f || exit 1; done; crictl images")  # fmt: skip
    if not step(
        "images imported with ctr -n k8s.io images import; crictl images",
        imported.returncode == 0,
        out(imported),
    ):
        return False

    units = merged / "etc/systemd/system"
    (units / "kubelet.service.d").mkdir(parents=True, exist_ok=True)
    (units / "kubelet.service").write_text(realnode.KUBELET_SERVICE.replace("RestartSec=10", "RestartSec=3"))
    (units / "kubelet.service.d/10-kubeadm.conf").write_text(realnode.KUBEADM_DROPIN)
    patches = merged / "etc/kubernetes/patches"
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "kubeletconfiguration+merge.json").write_text(json.dumps(realnode.KUBELET_CONFIG_PATCH) + "\n")
    api = state["apiserver"]
    token = Path(api["join_token_file"]).read_text().strip()
    ignore = [e for e in os.environ.get("PROBE_IGNORE_PREFLIGHT", "SystemVerification").split(",") if e]
    (merged / "root/join.yaml").write_text(realnode.join_configuration(
        api["endpoint"], token, api["ca_cert_hash"], NODE, state["hosts"][NODE]["address"], ignore))  # fmt: skip
    versions = on_host(paths, "systemctl daemon-reload && systemctl enable kubelet 2>&1; kubelet --version; "
                       "kubeadm version -o short; crictl --version")  # fmt: skip
    step("real kubelet, kubeadm and crictl on the host", versions.returncode == 0, out(versions))

    join = on_host(paths, "kubeadm join --config /root/join.yaml --v=1 2>&1", timeout=400)
    joined = step("real kubeadm join", join.returncode == 0, out(join))
    kubelog = on_host(paths, "journalctl -u kubelet --no-pager -o cat | grep -E '^E|^F|rror' | tail -30")
    step("kubelet's errors so far (journal)", True, out(kubelog))
    if not joined:
        return False

    def node_ready() -> tuple[bool, str]:
        r = kubectl(state, "get", "node", NODE, "-o", "json")
        if r.returncode:
            return False, out(r)
        node = json.loads(r.stdout)
        conds = {
            c["type"]: (c["status"], c.get("reason", ""), c.get("message", ""))
            for c in node["status"]["conditions"]
        }
        info = node["status"]["nodeInfo"]
        return True, (f"kubeletVersion={info['kubeletVersion']} containerRuntime={info['containerRuntimeVersion']}"
                      f" kernel={info['kernelVersion']}\nconditions={json.dumps(conds, indent=1)}")  # fmt: skip

    ok, detail = wait("Node registered", node_ready, 60)
    step(f"Node {NODE} registered by the real kubelet", ok, detail)

    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe-busybox", "namespace": "default"},
        "spec": {
            "nodeName": NODE, "hostNetwork": True, "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "busybox", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/busybox", "sh", "-c",
                            "echo hello from a real runc container; /bin/busybox ps; /bin/busybox sleep 3600"],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
            }],
        },
    }  # fmt: skip
    created = subprocess.run([*kubectl_argv(state), "apply", "-f", "-"], input=json.dumps(pod),
                             capture_output=True, text=True)  # fmt: skip
    step("pod probe-busybox created", created.returncode == 0, out(created))

    def pod_running() -> tuple[bool, str]:
        r = kubectl(state, "get", "pod", "probe-busybox", "-o", "json")
        if r.returncode:
            return False, out(r)
        status = json.loads(r.stdout).get("status") or {}
        return status.get("phase") == "Running", json.dumps(
            {"phase": status.get("phase"), "containerStatuses": status.get("containerStatuses")}, indent=1
        )

    ok, detail = wait("pod Running", pod_running, 120)
    step("pod probe-busybox Running", ok, detail)
    events = kubectl(state, "get", "events", "-A", "--field-selector", "involvedObject.name=probe-busybox")
    step("pod events", True, out(events))
    crictl_ps = on_host(paths, "crictl ps; crictl pods; ctr -n k8s.io containers ls; ctr -n k8s.io tasks ls")
    step(
        "crictl ps / crictl pods / ctr containers ls on the host",
        "busybox" in crictl_ps.stdout,
        out(crictl_ps),
    )
    logs = kubectl(state, "logs", "probe-busybox")
    step(
        "kubectl logs (apiserver -> real kubelet)",
        "hello from a real runc container" in logs.stdout,
        out(logs),
    )
    execd = kubectl(state, "exec", "probe-busybox", "--", "/bin/busybox", "ps")
    step("kubectl exec: own PID namespace (ps shows only the container's processes)",
         execd.returncode == 0 and "systemd" not in execd.stdout, out(execd))  # fmt: skip
    wrapper_log = on_host(
        paths,
        "cd /run/containerd/io.containerd.runtime.v2.task/k8s.io/$(crictl ps -q --name busybox) && python3 -c "
        '\'import json; l = json.load(open("config.json"))["linux"]; '
        'print("cgroupsPath:", l["cgroupsPath"]); print("resources:", json.dumps(l["resources"]))\'; '
        'cat /proc/$(pgrep -x -f "/bin/busybox sleep 3600")/cgroup',
    )
    step("what runc got from the wrapper (the bundle's config.json; the CRI asked for cpu and memory)",
         wrapper_log.returncode == 0, out(wrapper_log))  # fmt: skip

    missing = dict(pod, metadata={"name": "probe-missing-image", "namespace": "default"})
    missing["spec"] = dict(pod["spec"], containers=[dict(pod["spec"]["containers"][0], image="registry.k8s.io/not-in-the-lab:0.1")])  # fmt: skip
    subprocess.run(
        [*kubectl_argv(state), "apply", "-f", "-"], input=json.dumps(missing), capture_output=True, text=True
    )

    def image_pull_failed() -> tuple[bool, str]:
        r = kubectl(
            state,
            "get",
            "pod",
            "probe-missing-image",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting}",
        )
        return any(w in r.stdout for w in ("ErrImagePull", "ImagePullBackOff")), out(r)

    ok, detail = wait("ErrImagePull", image_pull_failed, 90)
    step("a pod whose image the lab lacks gets ErrImagePull", ok, detail)

    def node_cidr() -> tuple[bool, str]:
        r = kubectl(state, "get", "node", NODE, "-o", "jsonpath={.spec.podCIDR}")
        return bool(r.stdout.strip()), r.stdout.strip() or out(r)

    ok, cidr = wait("the Node's podCIDR", node_cidr, 30)
    bridge = f"labbr{INDEX}"
    (merged / "etc/cni/net.d").mkdir(parents=True, exist_ok=True)
    (merged / "etc/cni/net.d/10-lab-bridge.conflist").write_text(realnode.cni_conflist(bridge, cidr))
    ok, detail = wait("Node Ready", lambda: (lambda r: ("Ready" in r and "NotReady" not in r, r))(
        kubectl(state, "get", "node", NODE, "--no-headers").stdout), 60)  # fmt: skip
    step(f"CNI bridge {bridge} on {cidr} (Debian's plugins): Node Ready", ok, detail)
    podnet: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe-podnet", "namespace": "default"},
        "spec": {"nodeName": NODE, "tolerations": [{"operator": "Exists"}], "containers": [{
            "name": "httpd", "image": BUSYBOX_IMAGE,
            "command": ["/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /www && /bin/busybox hostname > "
                        "/www/index.html && exec /bin/busybox httpd -f -p 8080 -h /www"],
        }]},
    }  # fmt: skip
    subprocess.run(
        [*kubectl_argv(state), "apply", "-f", "-"], input=json.dumps(podnet), capture_output=True, text=True
    )

    def podnet_running() -> tuple[bool, str]:
        r = kubectl(state, "get", "pod", "probe-podnet", "-o", "wide", "--no-headers")
        return " Running " in r.stdout, out(r)

    ok, detail = wait("pod on the pod network Running", podnet_running, 90)
    step("pod on the CNI bridge Running", ok, detail)
    time.sleep(2)
    proxied = kubectl(state, "get", "--raw", "/api/v1/namespaces/default/pods/probe-podnet:8080/proxy/")
    step("API server's pod proxy reaches the pod's IP", "probe-podnet" in proxied.stdout, out(proxied))

    time.sleep(20)  # let both settle before measuring
    rss = on_host(paths, "for p in kubelet containerd containerd-shim-runc-v2; do for pid in $(pidof $p); do "
                  "echo \"$p pid $pid: $(grep -E 'VmRSS|VmHWM' /proc/$pid/status | tr -s ' \\n' ' ')\"; done; done")  # fmt: skip
    step("memory on the host (3 pods, 2 running)", rss.returncode == 0, out(rss))
    kubelog = on_host(paths, "journalctl -u kubelet --no-pager -o cat | grep -E '^[EW]' | "
                      "sed -E 's/^[EW][0-9]+ [0-9:.]+ +[0-9]+ //' | cut -c1-200 | sort | uniq -c | sort -rn | head -30")  # fmt: skip
    step("the kubelet's error and warning lines, counted", True, out(kubelog))
    return True


def kubectl_argv(state: dict[str, Any]) -> list[str]:
    try:
        exe = str(k8s_packages.kubectl_binary())
    except RuntimeError:
        exe = shutil.which("kubectl") or "kubectl"
    return [exe, f"--kubeconfig={state['apiserver']['kubeconfig']}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--os", default="trixie", choices=hosts.RELEASES)
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    parser.add_argument("--down", action="store_true", help="only take an earlier probe's lab down")
    args = parser.parse_args()
    paths = LabPaths(STATE)
    if args.down:
        take_down(paths)
        return 0
    ok = False
    try:
        ok = probe(paths, args.os)
    except Exception as exc:  # the report says where it stopped
        step(f"probe stopped: {type(exc).__name__}", False, str(exc))
    finally:
        STATE.mkdir(parents=True, exist_ok=True)
        (STATE / "probe-report.txt").write_text("\n".join(REPORT) + "\n")
        if not args.keep:
            with contextlib.suppress(Exception):
                take_down(paths)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
