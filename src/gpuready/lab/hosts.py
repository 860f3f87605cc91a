"""Real Debian hosts (bookworm, trixie, sid) under systemd-nspawn: a cached base root per release, one overlay per
host, boot, stop, recover.

Design choices, and why:
- One debootstrapped base per recipe (hash of suite + packages + customisation version), shared by every lab on the
  machine; hosts are overlayfs mounts on it, so `lab up` copies nothing and a host's changes stay in its upper dir.
  Each release (RELEASES) has its own base; `lab up --os` cycles the releases over the hosts like `--profile`.
- The hosts see a pure cgroup2 hierarchy (nspawn's SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1, taken from this machine's
  cgroup2 mount, /sys/fs/cgroup/unified on a hybrid machine): systemd 256 and 257 (trixie) refuse or deprecate
  cgroup v1 and systemd 258+ (sid) removed it ("Detected unsupported legacy cgroup hierarchy, refusing execution"
  under nspawn's default hybrid view); a real Debian 12 or 13 host boots with cgroup2 only, too.
- Every lab has a network namespace of its own (gpuready.lab.network, which documents the address plan): the hosts
  are booted inside it (nspawn --network-namespace-path), each sshd listens on port 22 of the host's own address
  10.213.1.N, the repository server listens on 10.213.0.2 and the control plane (real kube-apiserver) on 10.213.0.1, all inside it. This
  machine reaches them through the lab's veth and route; nothing of the lab listens in this machine's namespace, so
  a machine sshd on 0.0.0.0:22 no longer competes for the hosts' port. The hosts share that namespace (and its
  loopback) with each other, as they shared the machine's before. Their one way out is the egress proxy to the
  Debian mirror their base root was built from.
- nspawn is started with --register=no (no machined needed: PID 1 of this machine need not be systemd) and each
  host gets its own cgroup in the lab's cgroup subtree. That keeps hosts' systemd instances from sharing a cgroup
  (on cgroup v1 nspawn would otherwise put every container at /payload) and lets `lab down` find and kill every
  process of a host even when the nspawn process itself was killed.
- nspawn runs under a small supervisor (gpuready.lab.supervisor) that starts it again when the container reboots
  (exit status 133), as systemd-nspawn@.service does; the state's host "pid" is the supervisor's, and SIGTERM to it
  powers the host off. Each boot gets a fresh random boot id from nspawn and, where the kernel has time namespaces,
  clocks that start at zero (a reboot is visible in /proc/uptime, which is how pyinfra's server.reboot confirms it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuready.lab import (
    aptrepo,
    faults,
    hardware,
    k8s_packages,
    kernel_files,
    kubelet_build,
    network,
    packages,
    realhost,
    ssh,
    supervisor,
)
from gpuready.lab.cluster import binaries, cluster, kube_proxy
from gpuready.lab.emulator import nvemu
from gpuready.lab.state import LabPaths, cache_dir, load_state, locked, require_state, save_state

# The Debian releases a lab host can run (`lab up --os`), each from its own cached base root. NVIDIA's CUDA
# repository path for each is what the deploy derives from the host's os-release (gpuready.deploy.context).
RELEASES = ("bookworm", "trixie", "sid")
DEFAULT_RELEASE = "trixie"
# What a minimal Debian server image has: init, sshd, apt with https + keyrings, and the usual admin tools.
BASE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "ca-certificates",
    "gnupg",
    "apt-transport-https",
    "iproute2",
    "procps",
    "kmod",
    "sudo",
    "curl",
    "less",
    "iputils-ping",
)
# Units a cloud image would run but that only slow down boot or wake up at random times in a test.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "console-getty.service",
)
BASE_CUSTOMISATION_VERSION = 1  # bump when _customise_base changes
DEFAULT_PROFILES = ("h100-sxm-8", "a100-80gb-4", "l4-1")
# Port 22 is always free on a host's address: the address exists only in the lab's own network namespace.
SSH_PORT = 22
BOOT_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0

_T0 = time.monotonic()


def progress(message: str) -> None:
    print(f"[lab {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


class LabError(RuntimeError):
    pass


# --- base root --------------------------------------------------------------------------------------------------


def debian_mirror(suite: str = "bookworm") -> str:
    """The machine's own Debian mirror for `suite` (so CI and air-gapped machines use theirs); GPUREADY_LAB_MIRROR
    overrides.

    A machine's sources usually name only its own release (this one's: bookworm). One Debian mirror serves every
    release, so a suite the sources do not name comes from the URI they give for another Debian release (one of
    RELEASES, not -security or -updates), and failing that from deb.debian.org.
    """
    if os.environ.get("GPUREADY_LAB_MIRROR"):
        return os.environ["GPUREADY_LAB_MIRROR"]
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    entries: list[tuple[str, list[str]]] = []
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        entries += _source_entries(text, deb822=path.suffix == ".sources")
    return mirror_for(suite, entries)


def mirror_for(suite: str, entries: list[tuple[str, list[str]]]) -> str:
    """The URI among (uri, suites) source entries that serves `suite` (see debian_mirror)."""
    debian = [(uri, suites) for uri, suites in entries if "security" not in uri]
    for wanted in ({suite}, set(RELEASES)):
        for uri, suites in debian:
            if wanted & set(suites):
                return uri.rstrip("/")
    return "http://deb.debian.org/debian"


def _source_entries(text: str, deb822: bool) -> Iterator[tuple[str, list[str]]]:
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split():
                for uri in fields.get("URIs", "").split():
                    yield uri, fields.get("Suites", "").split()
        return
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb":
            yield words[1], [words[2]]


def check_releases(releases: list[str]) -> None:
    unknown = sorted(set(releases) - set(RELEASES))
    if unknown:
        raise LabError(f"unknown Debian release(s) {unknown}; known: {list(RELEASES)}")


def base_recipe(suite: str = DEFAULT_RELEASE) -> dict[str, Any]:
    return {
        "suite": suite,
        "variant": "minbase",
        "packages": sorted(BASE_PACKAGES),
        "masked": sorted(MASKED_UNITS),
        "customisation": BASE_CUSTOMISATION_VERSION,
    }


def base_path(suite: str = DEFAULT_RELEASE, cache: Path | None = None) -> Path:
    """base-<suite>-<hash of the recipe>: the suite in the name lets a new recipe replace only its own release."""
    digest = hashlib.sha256(json.dumps(base_recipe(suite), sort_keys=True).encode()).hexdigest()[:16]
    return (cache or cache_dir()) / f"base-{suite}-{digest}"


def ensure_base(
    suite: str = DEFAULT_RELEASE, cache: Path | None = None, rebuild: bool = False
) -> tuple[Path, float | None]:
    """The cached base root of `suite` for the current recipe; returns (path, build seconds or None if cached)."""
    check_releases([suite])
    target = base_path(suite, cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    # one lock per release: the releases debootstrap side by side (make control-plane starts all three at once)
    with locked(target.parent / f".build-{suite}.lock"):
        if target.is_dir() and not rebuild:
            return target, None
        started = time.monotonic()
        mirror = debian_mirror(suite)
        progress(f"building {suite} base root {target.name} with debootstrap from {mirror} (once per recipe)")
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
        try:
            root = tmp / "root"
            cmd = [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                suite,
                str(root),
                mirror,
            ]
            result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
                raise LabError(f"debootstrap failed ({result.returncode}):\n{tail}")
            _customise_base(root)
            if target.exists():
                old = target.with_name(f".old-{target.name}-{os.getpid()}")
                target.rename(old)
                shutil.rmtree(old)
            root.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        seconds = time.monotonic() - started
        progress(f"{suite} base root built in {seconds:.1f}s")
        _prune_old_bases(target, suite, Path("/proc/mounts").read_text())
        return target, seconds


def _prune_old_bases(current: Path, suite: str, mounts: str) -> None:
    """Remove this release's bases of earlier recipes (each is ~300 MB), and those named before bases carried their
    release (base-<hash>), unless a running lab's overlay (in mounts) uses one. Other releases' bases stay."""
    for old in current.parent.glob("base-*"):
        earlier = old.name.startswith(f"base-{suite}-") or re.fullmatch(r"base-[0-9a-f]{16}", old.name)
        if old != current and earlier and f"lowerdir={old}," not in mounts:
            progress(f"removing {old.name}, the base of an earlier recipe")
            shutil.rmtree(old, ignore_errors=True)  # a release's build beside this one may remove it first


def _customise_base(root: Path) -> None:
    """Make the base a template: no identity of its own (host keys, machine-id, hostname), quiet timers masked."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").unlink(missing_ok=True)
    units = root / "etc/systemd/system"
    for unit in MASKED_UNITS:
        link = units / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True)


# --- hosts --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSpec:
    name: str
    index: int
    address: str
    profile: str
    os: str = DEFAULT_RELEASE


def plan_hosts(
    nodes: int,
    profiles: list[str] | None,
    first_index: int = 1,
    subnet: str = network.DEFAULT_SUBNET,
    releases: list[str] | None = None,
) -> list[HostSpec]:
    """gpu-node-F..F+N-1 on 10.213.1.F..F+N-1 (F = first_index, 1 by default); profiles and Debian releases
    (default: DEFAULT_RELEASE for every host) each cycle over the nodes.

    Two labs on one machine have namespaces (and subnets) of their own, but share nspawn's per-machine-name paths,
    so a second lab that must run beside the default one starts its numbering elsewhere (first_index).
    """
    last = first_index + nodes - 1
    if not 1 <= nodes <= 250:
        raise LabError(f"--nodes must be between 1 and 250, got {nodes}")
    if first_index < 1 or last > 250:
        raise LabError(f"host numbers must be between 1 and 250, got {first_index}..{last}")
    cycle = list(profiles or DEFAULT_PROFILES)
    os_cycle = list(releases or [DEFAULT_RELEASE])
    check_releases(os_cycle)
    return [
        HostSpec(
            f"gpu-node-{i}",
            i,
            network.host_address(subnet, i),
            cycle[(i - first_index) % len(cycle)],
            os_cycle[(i - first_index) % len(os_cycle)],
        )
        for i in range(first_index, last + 1)
    ]


def machine_apt_checks_valid_until() -> bool:
    """False when this machine's apt is told not to check a Release file's Valid-Until (apt-config).

    A machine that reaches Debian through a frozen snapshot of the mirror says so: the snapshot's sid Release
    (Valid-Until a week after its Date) has expired while trixie's and bookworm's (no Valid-Until) have not. The
    hosts reach the same mirror through the egress proxy, so they get the machine's setting.
    """
    try:
        out = subprocess.run(
            ["apt-config", "shell", "V", "Acquire::Check-Valid-Until"], capture_output=True, text=True
        ).stdout
    except OSError:
        return True
    value = out.strip().partition("=")[2].strip("'\"").lower()  # V='false'
    return value not in ("false", "0", "no", "off")


def _write_host_files(
    paths: LabPaths, spec: HostSpec, port: int, client_pubkey: str, net: network.LabNetwork
) -> str:
    """Give a host its identity in its upper dir before boot; returns its SSH host public key."""
    upper = paths.host_dir(spec.name) / "upper"
    etc = upper / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    apt_conf = etc / "apt/apt.conf.d"
    apt_conf.mkdir(parents=True, exist_ok=True)
    proxy = f"http://{net.repo}:{network.EGRESS_PORT}/"
    (apt_conf / "01gpuready-lab-proxy").write_text(
        "// Written by `gpuready lab up`: the lab's network has no route out. The Debian mirror is reached through\n"
        "// the lab's egress proxy, the lab's own repositories directly.\n"
        f'Acquire::http::Proxy "{proxy}";\n'
        f'Acquire::https::Proxy "{proxy}";\n'
        f'Acquire::http::Proxy::{net.repo} "DIRECT";\n'
    )
    if not machine_apt_checks_valid_until():
        (apt_conf / "02gpuready-lab-valid-until").write_text(
            "// Written by `gpuready lab up`: this machine's apt does not check Release files' Valid-Until (its\n"
            "// mirror is a snapshot), and the host reaches the same mirror.\n"
            'Acquire::Check-Valid-Until "false";\n'
        )
    (etc / "hostname").write_text(f"{spec.name}\n")
    (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
    (etc / "hosts").write_text(
        f"127.0.0.1\tlocalhost\n{spec.address}\t{spec.name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    sshd_d = etc / "ssh/sshd_config.d"
    sshd_d.mkdir(parents=True, exist_ok=True)
    (sshd_d / "gpuready-lab.conf").write_text(
        "# Written by `gpuready lab up`: this host answers only on its own lab address.\n"
        f"ListenAddress {spec.address}:{port}\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "UseDNS no\n"
    )
    host_pubkey = ssh.generate_host_key(etc / "ssh")
    dot_ssh = upper / "root/.ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    (upper / "root").chmod(0o700)
    dot_ssh.chmod(0o700)
    (dot_ssh / "authorized_keys").write_text(client_pubkey + "\n")
    (dot_ssh / "authorized_keys").chmod(0o600)
    return host_pubkey


def _write_hardware(paths: LabPaths, spec: HostSpec) -> dict[str, Any]:
    """The host's machine directory: its hardware file, and the static tools that read the machine for what the
    lab renders outside the host (kernel_files, the lab's dcgm-exporter: ``nvemu.read_view``), a link to the built
    file (a copy across filesystems), as the directory is bound into the host and its GPU containers."""
    from gpuready.lab.silicon import build

    hw = hardware.make_hardware(spec.profile, spec.index)
    machine = paths.machine_dir(spec.name)
    machine.mkdir(parents=True, exist_ok=True)
    hardware.write_hardware(machine / "hardware.json", hw)
    tools, tmp = build.static_tools(), machine / f".{nvemu.TOOLS}.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(tools, tmp)
    except OSError:
        shutil.copy2(tools, tmp)
    tmp.rename(machine / nvemu.TOOLS)
    return hw


def hardware_summary(hw: dict[str, Any]) -> dict[str, Any]:
    """What the inventory needs from a hardware file: nvidia-smi's model name, GPU count, NVSwitch or not."""
    gpus = hw["gpus"]
    return {
        "gpu_model": gpus[0]["name"] if gpus else None,
        "gpu_count": len(gpus),
        "nvswitch": bool(hw["system"]["nvswitch"]),
    }


def _mount_overlay(base: Path, host_dir: Path) -> Path:
    merged = host_dir / "merged"
    for d in ("upper", "work", "merged"):
        (host_dir / d).mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={base},upperdir={host_dir / 'upper'},workdir={host_dir / 'work'}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True)
    return merged


def lab_cgroups(paths: LabPaths) -> list[Path]:
    """The lab's own cgroup subtree, in every hierarchy nspawn reads its cgroup path from.

    On a hybrid machine (cgroup v1 controllers + name=systemd + cgroup2 at /sys/fs/cgroup/unified) nspawn takes its
    path from the cgroup2 line (and, giving a container the hybrid view, mirrors it into name=systemd), so a host
    sits at the same path in both. With the pure cgroup2 view (nspawn_env) the host's systemd manages only the
    cgroup2 subtree, and its processes stay in the name=systemd cgroup they inherit: `down` finds them in either.
    """
    lab_id = hashlib.sha256(str(paths.root.resolve()).encode()).hexdigest()[:8]
    fs = Path("/sys/fs/cgroup")
    roots = [fs / h for h in ("unified", "systemd") if (fs / h / "cgroup.procs").exists()] or [fs]
    return [root / "gpuready-lab" / lab_id for root in roots]


def _boot(
    paths: LabPaths, spec: HostSpec, merged: Path, netns: str, extra_args: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Start the host's supervisor (which runs nspawn, and runs it again after each reboot) in the host's cgroups.

    nspawn joins the lab's network namespace (every boot does, by its path) instead of this machine's.
    `extra_args` go to nspawn after the lab's own: the real kubelet's binds and capabilities
    (gpuready.lab.realnode.nspawn_args).
    """
    cgroups = [lab / spec.name for lab in lab_cgroups(paths)]
    for cgroup in cgroups:
        cgroup.mkdir(parents=True, exist_ok=True)

    def enter_cgroups() -> None:
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    cmd = [
        "systemd-nspawn",
        "--boot",
        f"--directory={merged}",
        f"--machine={spec.name}",
        "--register=no",
        "--keep-unit",
        "--link-journal=no",
        "--console=read-only",
        f"--network-namespace-path={network.netns_path(netns)}",
        f"--bind-ro={paths.machine_dir(spec.name)}:{hardware.HOST_MACHINE_DIR}",
        # the GPUs' PCI sysfs view (kernel_files; /dev/nvidia* and /proc/driver are put in by the supervisor)
        f"--bind-ro={paths.machine_dir(spec.name) / kernel_files.KERNEL_DIR / 'sys-pci-devices'}:"
        f"{kernel_files.SYSFS_PCI}",
        *extra_args,
    ]
    fresh_clocks = ["--fresh-clocks"] if supervisor.time_namespaces_supported() else []
    watch = ["--kernel-files", str(paths.machine_dir(spec.name)), str(merged)]
    argv = [
        sys.executable,
        "-m",
        "gpuready.lab.supervisor",
        f"--name={spec.name}",
        *fresh_clocks,
        *watch,
        "--",
    ]
    argv += cmd
    with open(paths.console_log(spec.name), "ab") as log:
        return subprocess.Popen(
            argv,
            env=nspawn_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=enter_cgroups,  # safe: no threads run while the lab starts hosts
            start_new_session=True,
        )


def nspawn_env() -> dict[str, str]:
    """nspawn's environment: a pure cgroup2 view for the host wherever this machine has a cgroup2 hierarchy.

    nspawn (252 here) gives a container on a hybrid machine a hybrid view (v1 controllers + name=systemd + cgroup2),
    which sid's systemd (258+) refuses to boot in and trixie's (257) boots in deprecated. With
    SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 the container gets the machine's cgroup2 hierarchy at /sys/fs/cgroup, as
    on a real host of any of the three releases. Without a cgroup2 hierarchy nspawn chooses (bookworm boots).
    """
    fs = Path("/sys/fs/cgroup")
    unified = any((fs / sub / "cgroup.procs").exists() and (fs / sub / "cgroup.subtree_control").exists()
                  for sub in ("", "unified"))  # fmt: skip
    return {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"} if unified else dict(os.environ)


def console_tail(paths: LabPaths, name: str, lines: int = 25) -> str:
    try:
        text = paths.console_log(name).read_text(errors="replace")
    except OSError:
        return "(no console log)"
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


# tool -> the Debian package that has it
HOST_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "gpg": "gnupg",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
}


def prerequisite_problems(
    cache: Path | None = None,
    kubernetes: bool = True,
    kubernetes_version: str = cluster.DEFAULT_VERSION,
    releases: list[str] | None = None,
) -> list[str]:
    """Everything missing for `up`, each with how to get it (all at once, before anything starts). `kubernetes`:
    the lab builds Kubernetes binaries (for its control plane, or for its hosts' real kubelets)."""
    found: list[str] = []
    try:
        network.check_prerequisites()
    except network.NetworkError as exc:
        found.append(str(exc))
    tools = dict(HOST_TOOLS)
    if not all(base_path(suite, cache).is_dir() for suite in set(releases or [DEFAULT_RELEASE])):
        tools["debootstrap"] = "debootstrap"
    found += [
        f"{tool} not found: apt-get install {package}"
        for tool, package in tools.items()
        if shutil.which(tool) is None
    ]
    if kubernetes and not re.fullmatch(r"1\.\d+\.\d+", kubernetes_version):
        found.append(
            f"Kubernetes version {kubernetes_version!r} must be a release like {cluster.DEFAULT_VERSION}"
        )
    elif kubernetes:
        found += binaries.problems(kubernetes_version)
    return found


def up(
    paths: LabPaths,
    nodes: int = 3,
    profiles: list[str] | None = None,
    cache: Path | None = None,
    control_plane: bool = True,
    kubernetes_version: str = cluster.DEFAULT_VERSION,
    first_index: int = 1,
    subnet: str | None = None,
    releases: list[str] | None = None,
    nspawn_args: Callable[[HostSpec], list[str]] | None = None,
) -> dict[str, Any]:
    """Bring up a fresh lab (cleaning up whatever an earlier lab in this state dir left) and record its state.

    first_index numbers the hosts from elsewhere than 1, for a lab beside another one; subnet is the lab's /16
    (default: the first of network.SUBNETS that nothing on this machine uses, 10.213.0.0/16 for a lab alone);
    releases are the Debian releases cycled over the hosts (default: DEFAULT_RELEASE for every host);
    nspawn_args, called once per host after its directory exists and before it boots, gives extra nspawn options
    (nothing by default; whatever it creates under the host's directory goes with it at `down`);
    the hosts get the real kubelet and kubeadm of kubernetes_version in the lab's packages and the lab-only settings
    of gpuready.lab.realhost. Without a control plane a kubelet, once installed, waits for a join as on a fresh
    node (no images, no kube-proxy).
    """
    # refuse a bad plan before anything else
    specs = plan_hosts(nodes, profiles, first_index, releases=releases)
    unknown = sorted({s.profile for s in specs} - set(hardware.PROFILES))
    if unknown:
        raise LabError(f"unknown profile(s) {unknown}; known: {sorted(hardware.PROFILES)}")
    suites = sorted({s.os for s in specs}, key=RELEASES.index)
    missing = prerequisite_problems(cache, True, kubernetes_version, suites)
    if control_plane and shutil.which("nft") is None:
        missing.append(
            "nft not found: the real kubelets' kube-proxy runs in nftables mode (apt-get install nftables)"
        )
    if missing:
        raise LabError("the lab cannot start here:\n" + "\n".join(f"- {line}" for line in missing))
    down(paths, quiet=True)  # this lab's earlier hosts first: their inotify instances are freed
    if problem := realhost.inotify_problem(
        len(specs),
        control_plane,
        realhost.inotify_in_use(os.geteuid()),
        int(realhost.INOTIFY_LIMIT_FILE.read_text()),
    ):
        raise LabError(f"the lab cannot start here: {problem}")
    bases = {suite: ensure_base(suite, cache)[0] for suite in suites}
    real_binaries, lab_images, proxy_binary = node_side(kubernetes_version, progress, cache, control_plane)
    paths.root.mkdir(parents=True, exist_ok=True)
    client_pubkey = ssh.ensure_client_key(paths).with_suffix(".pub").read_text().strip()
    port = SSH_PORT

    state: dict[str, Any] = {
        "state_dir": str(paths.root),
        "bases": {suite: str(base) for suite, base in bases.items()},
        "ssh": {
            "key": str(paths.ssh_key),
            "known_hosts": str(paths.known_hosts),
            "user": "root",
            "port": port,
        },
        "repo": {},
        "hosts": {},
    }
    known: list[tuple[str, int, str]] = []
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:  # the state is saved before each creation and start, so that the `down` below (or a later one) finds it
        net = network.plan(paths.root, subnet)
        specs = plan_hosts(nodes, profiles, first_index, net.subnet, releases)
        state["network"] = net.to_state()
        save_state(paths, state)
        state["network"] = network.ensure(net, [s.address for s in specs])
        save_state(paths, state)
        progress(f"network namespace {net.netns}: {net.subnet}, reached from here via {net.root_veth}")
        state["egress"] = _start_egress(paths, net, list(bases.values()))
        save_state(paths, state)
        state["repo"] = _start_repo(paths, net, real_binaries, kubernetes_version)
        save_state(paths, state)
        for spec in specs:
            hw = _write_hardware(paths, spec)
            known.append((spec.address, port, _write_host_files(paths, spec, port, client_pubkey, net)))
            merged = _mount_overlay(bases[spec.os], paths.host_dir(spec.name))
            # the host's kernel files: the sysfs view must exist before nspawn binds it
            kernel_files.refresh(paths.machine_dir(spec.name), merged)
            extra = nspawn_args(spec) if nspawn_args else []
            extra += realhost.prepare_host(
                paths.host_dir(spec.name), merged, spec.index, spec.address, lab_images, real_binaries.crictl
            )
            procs[spec.name] = proc = _boot(paths, spec, merged, net.netns, extra)
            state["hosts"][spec.name] = {
                "index": spec.index,
                "address": spec.address,
                "port": port,
                "profile": spec.profile,
                "os": spec.os,
                "base": str(bases[spec.os]),
                "pid": proc.pid,
                "pid_start": _proc_start(proc.pid),
                **hardware_summary(hw),
            }
            save_state(paths, state)
        ssh.write_known_hosts(paths.known_hosts, known)
        progress(f"booting {len(specs)} host(s) with systemd-nspawn")
        _wait_for_hosts(paths, specs, port, procs)
        if control_plane:
            progress(f"starting the Kubernetes control plane on {net.control_plane}")
            state["apiserver"] = cluster.up(
                paths.root,
                net,
                debian_mirror(),
                progress,
                version=kubernetes_version,
                virtual=False,  # the hosts' kubelets are real: no KWOK plays kubelet for them
            )
            state["apiserver"]["pid_start"] = _proc_start(state["apiserver"]["pid"])
            save_state(paths, state)
            # the hosts' pods reach Services (the API server's first) through the real kube-proxy
            progress("starting kube-proxy (nftables) in the lab's network namespace")
            assert proxy_binary is not None  # node_side builds it with a cluster
            state["apiserver"]["kube_proxy"] = kube_proxy.start(
                paths.root / "kube-proxy",
                net.netns,
                proxy_binary,
                Path(state["apiserver"]["kubeconfig"]),
                specs[0].name,
            )
            state["apiserver"]["kube_proxy"]["pid_start"] = _proc_start(
                state["apiserver"]["kube_proxy"]["pid"]
            )
            save_state(paths, state)
    except network.NetworkError as exc:
        down(paths, quiet=True)
        raise LabError(str(exc)) from exc
    except BaseException:
        down(paths, quiet=True)
        raise
    progress(
        f"lab up: {len(specs)} host(s) answer SSH on {specs[0].address}..{specs[-1].address} port {port}"
    )
    return state


# Kernel settings every Kubernetes node needs. The hosts cannot write /proc/sys themselves (nspawn mounts it
# read-only), so the lab sets them for them, as a machine image would, inside the lab's own network namespace only
# (network.NETNS_SYSCTLS: ip_forward and the bridge-nf-call ones, which this kernel keeps per namespace). It never
# writes one of this machine's: a machine shared with other work must keep its tunables as they are.


def node_side(
    kubernetes_version: str, progress: binaries.Progress, cache: Path | None = None, cluster: bool = True
) -> tuple[k8s_packages.RealBinaries, dict[str, Path], Path | None]:
    """What the lab's hosts get from this machine, built into the lab cache when it lacks them: the real kubelet,
    kubeadm and crictl (their Kubernetes packages), and with a `cluster` the OCI images their containerd imports
    (NVIDIA's device plugin, NFD, the DRA driver, the CUDA images: :func:`realhost.images`) and kube-proxy for
    their Services ({} and None without). `make control-plane` calls it too, before any test runs."""
    progress(f"kubelet, kubeadm and images of v{kubernetes_version}")
    real_binaries = k8s_packages.RealBinaries(
        kubelet=kubelet_build.ensure_kubelet(kubernetes_version, progress, cache)[0],
        kubeadm=binaries.build_kube(kubernetes_version, progress, cache)[0].path("kubeadm"),
        crictl=kubelet_build.ensure_crictl(k8s_packages.CRI_TOOLS_VERSION, progress, cache),
    )
    if not cluster:
        return real_binaries, {}, None
    images = realhost.images(kubernetes_version, progress)
    proxy = kubelet_build.ensure_kubelet(
        kubernetes_version, progress, cache, kubelet_build.KUBE_PROXY_PACKAGE
    )[0]
    return real_binaries, images, proxy


def _wait_for_hosts(
    paths: LabPaths, specs: list[HostSpec], port: int, procs: dict[str, subprocess.Popen[bytes]]
) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    waiting = {s.name: s for s in specs}
    while waiting:
        for name, spec in list(waiting.items()):
            if procs[name].poll() is not None:
                raise LabError(
                    f"{name}: systemd-nspawn exited with {procs[name].returncode} during boot; console:\n"
                    + console_tail(paths, name)
                )
            if ssh.read_banner(spec.address, port, timeout=0.5) is not None:
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            name = sorted(waiting)[0]
            raise LabError(
                f"{name}: sshd did not answer on {waiting[name].address}:{port} within {BOOT_TIMEOUT_S:.0f}s; "
                f"console:\n{console_tail(paths, name)}"
            )
        if waiting:
            time.sleep(0.1)


def _start_repo(
    paths: LabPaths,
    net: network.LabNetwork,
    real: k8s_packages.RealBinaries,
    kubernetes_version: str = cluster.DEFAULT_VERSION,
) -> dict[str, Any]:
    """Build the emulated NVIDIA packages and the Kubernetes packages (the real kubelet and kubeadm of
    kubernetes_version) into signed repositories and serve them in the lab's network namespace on its repository
    address; returns the state's "repo" entry."""
    signer = aptrepo.ensure_signing_key(paths.gnupg_home)
    progress("building the emulated NVIDIA packages and the signed repositories")
    # the packages are built into the machine's lab cache (each builder's stamp rebuilds them only when their
    # sources or binaries change) and linked into this lab's repositories, under the cache's lock: a lab beside
    # this one, built from other sources, waits instead of rewriting them halfway through
    built = cache_dir() / "lab-packages"
    with locked(cache_dir() / ".lab-packages.lock"):
        debs = packages.build_packages(built / "nvidia")
        debs["kubernetes"] = k8s_packages.build_kubernetes_packages(
            built / "kubernetes-real", (kubernetes_version,), real
        )
        aptrepo.build_repos(paths.repo_root, debs, signer)
    keyring, armored = aptrepo.export_keyring(signer, paths.keyring)
    pid, port = aptrepo.start_server(
        paths.repo_root, paths.repo_server_log, host=net.repo, port=network.REPO_PORT, netns=net.netns
    )
    base_url = f"http://{net.repo}" if port == 80 else f"http://{net.repo}:{port}"
    keyring_url = f"{base_url}/{armored.relative_to(paths.repo_root)}"
    return {
        "pid": pid,
        "pid_start": _proc_start(pid),
        "address": net.repo,
        "port": port,
        "base_url": base_url,
        "root": str(paths.repo_root),
        "keyring_path": str(keyring),
        "keyring_url": keyring_url,
        "fingerprint": signer.fingerprint,
        "repos": {key: f"{base_url}/{layout.path}/" for key, layout in aptrepo.REPOS.items()},
        "inventory_data": aptrepo.inventory_data(base_url, keyring_url),
    }


def base_apt_targets(base: Path) -> list[str]:
    """host:port of every http(s) source in the base root's apt configuration: where the hosts' apt must reach."""
    targets: set[str] = set()
    sources = [base / "etc/apt/sources.list", *sorted((base / "etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri, _ in _source_entries(text, deb822=path.suffix == ".sources"):
            if target := network.allow_entry(uri):
                targets.add(target)
    return sorted(targets)


def _start_egress(paths: LabPaths, net: network.LabNetwork, bases: list[Path]) -> dict[str, Any]:
    """The hosts' way to the Debian mirror: a proxy here, listening inside the lab's namespace; the state entry."""
    allow = sorted({target for base in bases for target in base_apt_targets(base)})
    sock = network.listening_socket(net.repo, network.EGRESS_PORT, net.netns)
    try:
        pid = network.start_egress(sock, allow, paths.root / "egress.log", lab=str(paths.root))
    finally:
        sock.close()
    return {
        "pid": pid,
        "pid_start": _proc_start(pid),
        "address": net.repo,
        "port": network.EGRESS_PORT,
        "allow": allow,
        "log": str(paths.root / "egress.log"),
    }


# --- stop and clean up -----------------------------------------------------------------------------------------


def _proc_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a live process, None once it is gone or a zombie.

    A PID plus its start time identifies one process for good, so a recycled PID is never mistaken for ours.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _alive(pid: int | None, start: int | None) -> bool:
    return pid is not None and start is not None and _proc_start(pid) == start


# the node daemons whose memory `lab status` reports per host (issue #28: what a real-kubelet host costs this machine)
NODE_DAEMONS = ("kubelet", "containerd")


def daemon_memory(cgroup: Path, names: tuple[str, ...] = NODE_DAEMONS) -> dict[str, int]:
    """Resident memory in KiB of each named daemon in a host's cgroup subtree (summed over its processes; a name
    with no process is left out). Read from /proc: this machine's cgroup2 has no memory controller to ask."""
    rss: dict[str, int] = {}
    for pid in cgroup_pids(cgroup):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm not in names:
                continue
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        except (OSError, ValueError):
            continue  # gone meanwhile
        kib = fields.get("VmRSS", "0 kB").split()[0]
        rss[comm] = rss.get(comm, 0) + int(kib)
    return rss


def cgroup_pids(cgroup: Path) -> list[int]:
    """Every process in a cgroup subtree. Hosts create and remove cgroups meanwhile, so vanished ones are skipped."""
    pids: list[int] = []
    for dirpath, _, _ in os.walk(cgroup):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()]
    return pids


def _overlay_mounts_under(root: Path) -> list[Path]:
    prefix = str(root.resolve()) + "/"
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        mountpoint = line.split()[1].encode().decode("unicode_escape")
        if mountpoint.startswith(prefix):
            found.append(Path(mountpoint))
    return sorted(found, key=lambda p: len(str(p)), reverse=True)


def down(paths: LabPaths, quiet: bool = False, poweroff: bool = True) -> None:
    """Stop everything this lab started and remove it; safe after a crash and when nothing is running.

    `poweroff` (the default, `gpuready lab down`) shuts each host down in order, as a node is: its systemd stops
    the kubelet and containerd, and waits for containers whose PID 1 ignores SIGTERM (a `sleep` pod) up to
    STOP_TIMEOUT_S. ``poweroff=False`` kills the hosts instead, for a lab whose state is thrown away anyway (the
    test fixtures: the upgrade lab's `sleep` pods held its shutdown for the whole stop timeout; elsewhere removing
    the hosts' files, not the shutdown, is most of a down).
    """
    state = load_state(paths) or {}
    hosts = state.get("hosts", {})
    supervisors = {n: h["pid"] for n, h in hosts.items() if _alive(h.get("pid"), h.get("pid_start"))}
    if supervisors and not quiet:
        progress(f"{'stopping' if poweroff else 'killing'} {len(supervisors)} host(s)")
    if not poweroff:
        for pid in supervisors.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # first, so no supervisor boots its host again
        supervisors = {}
    for pid in supervisors.values():
        with contextlib.suppress(ProcessLookupError):
            # the supervisor passes it to nspawn, which powers the container off in order; no restart follows
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(_proc_start(pid) is not None for pid in supervisors.values()):
        time.sleep(0.1)
    late = [name for name, pid in supervisors.items() if _proc_start(pid) is not None]
    if late and not quiet:
        progress(
            f"{', '.join(late)} did not power off within {STOP_TIMEOUT_S:.0f} s; killing {_holders(paths)}"
        )
    # whatever is left (a host whose supervisor was killed, one that ignored the poweroff) dies with its cgroup
    _kill_cgroup_trees(lab_cgroups(paths))
    _reap([h["pid"] for h in hosts.values()])

    api = state.get("apiserver") or {}
    if api:
        cluster.down(api)  # each process by its recorded pid, checked to still be that program
    _reap([pid for pid in (api.get("pids") or {}).values() if pid])

    for server in (state.get("repo") or {}, state.get("egress") or {}):
        if _alive(server.get("pid"), server.get("pid_start")):
            os.kill(server["pid"], signal.SIGTERM)
            _wait_gone(server["pid"], 5.0)
        _reap([server["pid"]] if server.get("pid") else [])
    aptrepo.stop_gpg_agent(paths.gnupg_home)
    _destroy_network(paths, state.get("network"))

    for mountpoint in _overlay_mounts_under(paths.hosts_dir):
        result = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True)
        if result.returncode != 0:
            raise LabError(f"cannot unmount {mountpoint}: {result.stderr.strip()}")
    for name in hosts:
        # nspawn creates this per machine and cannot always remove it itself (it refuses unless /run is tmpfs).
        with contextlib.suppress(OSError):
            Path("/run/systemd/nspawn/propagate", name).rmdir()
    shutil.rmtree(paths.hosts_dir, ignore_errors=True)
    shutil.rmtree(paths.repo_root, ignore_errors=True)
    shutil.rmtree(paths.packages_dir, ignore_errors=True)
    # a fresh PKI and etcd per lab: the subnet may differ
    shutil.rmtree(paths.root / "controlplane", ignore_errors=True)
    paths.state_file.unlink(missing_ok=True)
    if hosts and not quiet:
        progress("lab down")


def _holders(paths: LabPaths) -> str:
    """What still runs in the lab's hosts, by program name, busiest first: a container whose PID 1 ignores SIGTERM
    holds its host's shutdown for systemd's stop timeout (the lab's dcgm-exporter once did, 90 s)."""
    names: dict[str, int] = {}
    for pid in {p for cgroup in lab_cgroups(paths) for p in cgroup_pids(cgroup)}:
        with contextlib.suppress(OSError):
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            names[name] = names.get(name, 0) + 1
    ranked = sorted(names.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name} x{count}" if count > 1 else name for name, count in ranked) or "nothing"


def _destroy_network(paths: LabPaths, entry: dict[str, Any] | None) -> None:
    """Remove the lab's namespace, veth and route: the ones the state records, and the ones this state dir's names
    would have (a crash can come between creating them and saving the state)."""
    found: dict[tuple[str, str], str | None] = {
        (network.netns_name(paths.root), network.root_veth_name(paths.root)): None
    }
    if entry:
        found[(entry["netns"], entry["root_veth"])] = entry.get("subnet")
    for (netns, root_veth), subnet in found.items():
        try:
            network.destroy(netns, root_veth, subnet)
        except network.NetworkError as exc:
            raise LabError(str(exc)) from exc


def _kill_cgroup_trees(cgroups: list[Path]) -> None:
    deadline = time.monotonic() + 10.0
    while pids := [pid for cgroup in cgroups for pid in cgroup_pids(cgroup)]:
        if time.monotonic() > deadline:
            raise LabError(f"processes {pids[:10]} in {cgroups} survive SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    for cgroup in cgroups:
        for dirpath, _, _ in os.walk(cgroup, topdown=False):  # children before parents
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(dirpath)
        with contextlib.suppress(OSError):
            cgroup.parent.rmdir()  # the shared "gpuready-lab" dir, when no other lab uses it


def _reap(pids: list[int]) -> None:
    """Collect those of the lab's processes that are children of this process (when `up` ran in it)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _wait_gone(pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while _proc_start(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if _proc_start(pid) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap([pid])


# --- status, faults -----------------------------------------------------------------------------------------------


def status(paths: LabPaths) -> dict[str, Any]:
    state = require_state(paths)
    cgroups = lab_cgroups(paths)[0]  # each host's processes are in <lab cgroup>/<host name>
    for name, host in state["hosts"].items():
        host["running"] = _alive(host.get("pid"), host.get("pid_start"))
        host["ssh_answers"] = ssh.read_banner(host["address"], host["port"]) is not None
        if host["running"]:
            host["memory_kib"] = daemon_memory(cgroups / name)
    kube_proxy_entry = (state.get("apiserver") or {}).get("kube_proxy")  # real-kubelet mode
    for server in (state["repo"], state.get("egress"), state.get("apiserver"), kube_proxy_entry):
        if server:
            server["running"] = _alive(server.get("pid"), server.get("pid_start"))
    if state.get("network"):
        state["network"]["present"] = network.exists(state["network"]["netns"])
        if kube_proxy_entry and kube_proxy_entry["running"]:
            kube_proxy_entry["programmed"] = kube_proxy.programmed(state["network"]["netns"])
    return state


def host_entry(state: dict[str, Any], node: str) -> dict[str, Any]:
    if node not in state["hosts"]:
        raise LabError(f"no lab host {node!r}; hosts: {', '.join(sorted(state['hosts']))}")
    return state["hosts"][node]


def run_on_host(
    paths: LabPaths, node: str, command: list[str], input_text: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run an argv on a host over lab SSH (quoted here: ssh itself would join the words with spaces)."""
    host = host_entry(require_state(paths), node)
    argv = ssh.ssh_argv(paths, host["address"], host["port"], [shlex.join(command)])
    return subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=timeout)


def _refresh_kernel_files(paths: LabPaths, node: str) -> None:
    """Show a changed machine in the host's /dev, /proc/driver/nvidia and sysfs before returning (the supervisor's
    watcher would within a fraction of a second, but a caller may look at once)."""
    host = host_entry(require_state(paths), node)
    kernel_files.refresh_running(paths.machine_dir(node), paths.host_dir(node) / "merged", host["pid"])


def inject_fault(paths: LabPaths, node: str, fault: str | None, gpu: int | None = None) -> list[str]:
    """Change the host's hardware (fault=None clears all faults) and log the kernel lines the fault would print.

    The lines go to the host's journal with identifier "kernel" and facility kern, as the kernel's own do, so
    `journalctl -t kernel` (which also works on real hosts) finds them. nspawn gives a container no /dev/kmsg, so
    they cannot carry the kernel transport: `journalctl -k` / `dmesg` inside a lab host do not show them.
    """
    host_entry(require_state(paths), node)
    path = paths.machine_dir(node) / "hardware.json"
    hw = hardware.read_hardware(path)
    try:
        if fault is None:
            hardware.write_hardware(path, faults.clear_faults(hw))
            _refresh_kernel_files(paths, node)
            # On real hardware a fault is cleared by replacing or resetting the GPU and rebooting, after which
            # its XIDs are no longer "since boot": drop the journal's kernel lines the same way.
            run_on_host(
                paths,
                node,
                [
                    "sh",
                    "-c",
                    "journalctl --rotate >/dev/null 2>&1; sleep 1; "
                    "journalctl --vacuum-time=1s >/dev/null 2>&1; true",
                ],
            )
            return []
        hw = faults.apply_fault(hw, fault, gpu)
        lines = faults.journal_messages(hw, fault, gpu)
    except ValueError as exc:  # unknown fault, a GPU index the host lacks, a GPU named for a host-wide fault
        raise LabError(str(exc)) from exc
    hardware.write_hardware(path, hw)
    _refresh_kernel_files(paths, node)
    if lines:
        result = run_on_host(
            paths, node, ["logger", "-p", "kern.err", "-t", "kernel"], "\n".join(lines) + "\n"
        )
        if result.returncode != 0:
            raise LabError(f"{node}: logging the fault's kernel messages failed: {result.stderr.strip()}")
    return lines
