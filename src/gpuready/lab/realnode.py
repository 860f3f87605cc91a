"""What a lab host needs to run the REAL kubelet, containerd and runc under systemd-nspawn (issue #28, first stage).

This module holds the pieces a probe proved and ``gpuready lab up`` (:mod:`gpuready.lab.realhost`) uses. Each is a lab-only setting for
what this machine (a VM with hybrid cgroups and no CAP_SYS_RESOURCE) cannot give a container, and each must never
be copied to a real node:

* :func:`nspawn_args`: the extra nspawn options of one host: ``/dev/kmsg`` bound in (the kubelet refuses
  to start without it), files with the values the kubelet insists on bound over ``vm.overcommit_memory``,
  ``kernel.panic`` and ``kernel.panic_on_oops`` inside the host only (the kubelet's container manager fails when it
  cannot set them, and setting them on this machine would panic it on an oops), a directory of the host's own for
  ``/var/lib/containerd`` and ``/var/lib/kubelet`` (overlayfs refuses the hosts' overlay root as an upperdir), the
  system calls runc needs beyond nspawn's filter (``@keyring`` for its session keyring, ``bpf`` for cgroup2 device
  rules) and every capability.
* :data:`RUNC_WRAPPER`: a runc in front of Debian's that drops an OCI spec's resources for cgroup controllers the
  host's cgroup2 tree lacks (here: all but hugetlb): runc fails with ``openat2 .../cpu.weight: no such file`` once
  any is set, and the kubelet always sets CPU shares. It also gives the systemd cgroup driver the
  ``slice:prefix:name`` path it needs where containerd wrote ``/k8s.io/<id>`` (a pod without a cgroup parent, as
  every pod is with ``cgroupsPerQOS: false``): runc refuses that with ``expected cgroupsPath to be of format
  "slice:prefix:name" for systemd cgroups``.
* :data:`KUBELET_CONFIG_PATCH`: kubeadm's ``kubeletconfiguration`` patch: no QoS or node-allocatable cgroups (they
  need the cpu, memory and pids controllers), swap tolerated.
* :func:`oci_archive`: an OCI image archive written with the standard library (no registry, no tool), which
  ``ctr -n k8s.io images import`` takes under the upstream name, so ``IfNotPresent`` never pulls.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path

# the values the kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go)
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
# where the host keeps what must not live on its overlay root
OWN_DIRS = ("/var/lib/containerd", "/var/lib/kubelet")
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"  # kubeadm 1.36's (cmd/kubeadm/app/constants)
SYSCTL_DIR = "/etc/gpuready-lab/kubelet-sysctl"  # in the host's root: nspawn binds over /proc from inside


def nspawn_args(own_dirs: Mapping[str, Path]) -> list[str]:
    """The extra nspawn options of one host (``hosts.up(nspawn_args=...)``). `own_dirs` maps each of OWN_DIRS to
    its directory on this machine; the host's root must hold the tunables' files (write_sysctl_files).

    Options, not a trusted ``.nspawn`` file: nspawn ignores a settings file's ``Bind=`` lines whenever its command
    line has a ``--bind``, and the lab's always has (the machine directory, the PCI sysfs view). nspawn makes the
    mounts under /proc inside the container, after /proc is mounted there, so their sources are paths in the
    host's root (SYSCTL_DIR), not on this machine: "Failed to stat <machine path>: No such file or directory"."""
    args = ["--bind=/dev/kmsg", "--capability=all", "--system-call-filter=@keyring bpf"]
    args += [f"--bind={source}:{target}" for target, source in own_dirs.items()]
    args += [f"--bind-ro={SYSCTL_DIR}/{key.replace('/', '.')}:/proc/sys/{key}" for key in KUBELET_SYSCTLS]
    return args


def write_sysctl_files(root: Path) -> None:
    """The tunables' files in a host root (its overlay's upper dir before boot)."""
    directory = root / SYSCTL_DIR.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in KUBELET_SYSCTLS.items():
        (directory / key.replace("/", ".")).write_text(value + "\n")


RUNC_WRAPPER = r'''#!/usr/bin/python3
"""gpuready lab only, never on a real node: drop the OCI resources of cgroup controllers this host lacks.

The lab machine's cgroup2 hierarchy has no cpu, memory, pids or io controller, and runc fails with
"openat2 .../cpu.weight: no such file or directory" once the spec sets any. Device rules stay (cgroup2 BPF).
With the systemd cgroup driver, a cgroupfs-style cgroupsPath (what containerd writes for a pod without a cgroup
parent, as the kubelet's are with cgroupsPerQOS off) becomes kubepods.slice:cri-containerd:<id>.
"""
import json, os, sys, tempfile

KEYS = {"memory": "memory", "pids": "pids", "hugepageLimits": "hugetlb", "blockIO": "io", "rdma": "rdma"}
CPUSET = ("cpus", "mems")


def controllers():
    try:
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            return set(f.read().split())
    except OSError:
        return set()


def strip(resources, have):
    resources = dict(resources or {})
    cpu = dict(resources.pop("cpu", None) or {})
    cpu = {k: v for k, v in cpu.items() if (k in CPUSET and "cpuset" in have) or (k not in CPUSET and "cpu" in have)}
    if cpu:
        resources["cpu"] = cpu
    for key, controller in KEYS.items():
        if controller not in have:
            resources.pop(key, None)
    unified = {k: v for k, v in (resources.pop("unified", None) or {}).items() if k.split(".")[0] in have}
    if unified:
        resources["unified"] = unified
    return resources


def systemd_path(path):
    """With cgroupsPerQOS off the kubelet gives a pod no cgroup parent, and containerd (1.7) then writes the
    cgroupfs path /k8s.io/<id> even with SystemdCgroup: runc's systemd driver wants slice:prefix:name."""
    return "kubepods.slice:cri-containerd:" + path.rstrip("/").rsplit("/", 1)[-1]


def real_runc():
    return next(p for p in ("/usr/sbin/runc", "/usr/bin/runc") if os.path.exists(p) and not os.path.islink(p))


def main(argv):
    have = controllers()
    args = list(argv)
    sub = next((i for i, a in enumerate(args) if a in ("create", "run", "update")), None)
    if sub is not None and args[sub] in ("create", "run"):
        bundle = os.getcwd()
        for i, a in enumerate(args):
            if a in ("--bundle", "-b") and i + 1 < len(args):
                bundle = args[i + 1]
            elif a.startswith("--bundle="):
                bundle = a.split("=", 1)[1]
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            spec = json.load(f)
        linux = spec.get("linux") or {}
        if "resources" in linux:
            linux["resources"] = strip(linux["resources"], have)
        path_ = linux.get("cgroupsPath", "")
        if "--systemd-cgroup" in args[:sub] and path_ and ":" not in path_:
            linux["cgroupsPath"] = systemd_path(path_)
        with open(path, "w") as f:
            json.dump(spec, f)
    elif sub is not None:
        for i, a in enumerate(args):
            if a in ("--resources", "-r") and i + 1 < len(args):
                src = sys.stdin if args[i + 1] == "-" else open(args[i + 1])
                resources = strip(json.load(src), have)
                tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
                json.dump(resources, tmp)
                tmp.close()
                args[i + 1] = tmp.name
    real = real_runc()
    os.execv(real, [real, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
'''


def cni_conflist(bridge: str, subnet: str) -> str:
    """A CNI bridge network of Debian's containernetworking-plugins for one host. The hosts share one network
    namespace, so each needs its own bridge name and subnet (its Node's podCIDR); no masquerading or portmap (no
    iptables rules that several hosts would write into the one namespace)."""
    plugin = {
        "type": "bridge",
        "bridge": bridge,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]},
    }
    return json.dumps({"cniVersion": "1.0.0", "name": "lab-pods", "plugins": [plugin]}, indent=2) + "\n"


KUBELET_CONFIG_PATCH = {
    "cgroupsPerQOS": False,
    "enforceNodeAllocatable": [],
    "failSwapOn": False,
}


def kubelet_config_patch(address: str) -> dict[str, object]:
    """:data:`KUBELET_CONFIG_PATCH` for the host at `address`. The lab's hosts share one network namespace, so
    each kubelet serves its API (10250) and healthz (10248) on its own address, not on every address: with the
    defaults the second host's kubelet failed with ``listen tcp 0.0.0.0:10250: bind: address already in use``.
    ``kubeadm join`` waits on the healthz address of this configuration, so it follows."""
    return {**KUBELET_CONFIG_PATCH, "address": address, "healthzBindAddress": address}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(files: Mapping[str, tuple[bytes, int]], symlinks: Mapping[str, str] | None = None) -> bytes:
    """An uncompressed layer: `files` maps a path (no leading /) to (content, mode); parents are made 0755.
    Every entry is root-owned with mtime 0, so the same files give the same digest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(p).parents[i]) for p in [*files, *(symlinks or {})]
                       for i in range(len(Path(p).parents) - 1)})  # fmt: skip
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (content, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
        for path, target in sorted((symlinks or {}).items()):
            info = tarfile.TarInfo(path)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def oci_archive(name: str, layers: list[bytes], config: Mapping[str, object]) -> bytes:
    """An OCI image layout tar holding one linux/amd64 image, named `name` (``registry/repo:tag``) the way
    ``ctr images import`` reads it (``io.containerd.image.name``; ``org.opencontainers.image.ref.name`` the tag)."""
    return oci_images_archive([(name, layers, config)])


def oci_images_archive(images: list[tuple[str, list[bytes], Mapping[str, object]]]) -> bytes:
    """One OCI image layout tar holding several images (name, layers, config), each named as in
    :func:`oci_archive`; a layer they share is stored once."""
    blobs: dict[str, bytes] = {}
    manifests = []
    for name, layers, config in images:
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "config": dict(config),
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer) for layer in layers]},
        }
        config_blob = json.dumps(image_config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config_blob),
                "size": len(config_blob),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": _sha(layer),
                    "size": len(layer),
                }
                for layer in layers
            ],
        }
        manifest_blob = json.dumps(manifest, sort_keys=True).encode()
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _sha(manifest_blob),
                "size": len(manifest_blob),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        )
        blobs.update({_sha(b).split(":")[1]: b for b in [*layers, config_blob, manifest_blob]})
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for digest, blob in sorted(blobs.items()):
            add(f"blobs/sha256/{digest}", blob)
    return out.getvalue()
