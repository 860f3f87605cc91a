"""What the LAB puts on a host so that gpuready's own node deploy (``deploys/gpu_node.py``, unchanged) gives it the
real kubelet (``gpuready lab up``, issue #28).

The deploy installs the lab's ``kubelet``/``kubeadm`` packages (the real binaries, see
:func:`gpuready.lab.k8s_packages.build_kubernetes_packages`), Debian's containerd and runc, and runs the real
``kubeadm join``. Everything this machine forces on top (docs/lab-real-kubelet.md, "Workarounds") is lab-owned,
written into the host's root before it boots, never by the deploy:

* the nspawn options of :func:`gpuready.lab.realnode.nspawn_args` (``/dev/kmsg``, the kubelet's sysctl files, own
  ``/var/lib/containerd`` and ``/var/lib/kubelet`` directories, capabilities, system calls);
* the runc wrapper as ``/usr/local/sbin/runc``, ahead of Debian's ``/usr/sbin/runc`` on containerd's PATH (so the
  deploy's containerd config keeps runc's default binary); it also raises an OCI spec's ``oomScoreAdj`` to the
  caller's own, which is what containerd's ``restrict_oom_score_adj`` would do (no CAP_SYS_RESOURCE here);
* a ``containerd.service`` drop-in whose ``ExecStartPost`` imports the lab's images (pause under the sandbox names
  containerd 1.6, 1.7 and 2.x default to, and a busybox image) whenever the deploy starts containerd;
* kubeadm's ``kubeletconfiguration`` patch in :data:`PATCHES_DIR`, which the lab inventory gives the deploy as the
  knob ``kube_join_patches_dir`` (with ``kube_join_ignore_preflight_errors = ["SystemVerification"]``);
* a CNI bridge conflist of the host's own (bridge ``labbr<N>``, subnet 10.246.<N>.0/24: the hosts share one network
  namespace) for Debian's ``containernetworking-plugins`` (the lab's ``kubernetes-cni`` package depends on it), ``/etc/crictl.yaml`` and the cached real crictl as ``/usr/local/bin/crictl`` (the deploy installs no
  cri-tools).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from gpuready.lab import kernel_files, realnode
from gpuready.lab.gobuild import Progress
from gpuready.lab.state import cache_dir, link_or_copy, locked

PATCHES_DIR = "/etc/gpuready-lab/kubeadm-patches"
# kubeadm preflight checks the real-kubelet lab's joins skip, lab-only: SystemVerification (the hosts' cgroup2 has
# no cpu/memory/pids controllers) and Port-10250 (the hosts share one network namespace, and kubeadm tries the
# wildcard address: a host joining again while another's kubelet serves on its own address:10250 failed with
# "[ERROR Port-10250]: Port 10250 is in use"; each kubelet binds only its host's address, realnode.kubelet_config_patch)
IGNORE_PREFLIGHT = ["SystemVerification", "Port-10250"]
IMAGES_DIR = "/var/lib/gpuready-lab/images"
IMPORT_SCRIPT = "/usr/local/sbin/gpuready-lab-import-images"
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36-lab"
# containerd's default sandbox image per release (1.6: 3.6, 1.7: 3.8, 2.x: 3.10) and kubeadm 1.36's
PAUSE_NAMES = [f"registry.k8s.io/pause:{tag}" for tag in ("3.6", "3.8", "3.9", "3.10", "3.10.1", "3.10.2")]

IMPORT = f'''#!/usr/bin/python3
"""gpuready lab only (real-kubelet mode): import the lab's OCI images into containerd's k8s.io namespace, so that
IfNotPresent never pulls. Run by containerd.service's ExecStartPost (drop-in gpuready-lab-images.conf) at every
start. An archive whose every image containerd already has, under the same name and digest, is skipped: importing
them all took about 5.5 s of each containerd start (a deploy starts it twice, a reboot once more)."""
import glob, json, subprocess, sys, tarfile

images = sys.argv[1] if len(sys.argv) > 1 else "{IMAGES_DIR}"
listed = subprocess.run(["ctr", "-n", "k8s.io", "images", "ls"], capture_output=True, text=True).stdout
have = {{(cols[0], cols[2]) for cols in (line.split() for line in listed.splitlines()[1:]) if len(cols) > 2}}
for path in sorted(glob.glob(images + "/*.oci.tar")):
    try:
        with tarfile.open(path, "r:") as tar:
            index = json.load(tar.extractfile("index.json"))
        if {{(m["annotations"]["io.containerd.image.name"], m["digest"]) for m in index["manifests"]}} <= have:
            continue
    except (OSError, KeyError, TypeError, ValueError, tarfile.TarError):
        pass  # not an archive as the lab writes them: ctr's import says what is wrong with it
    done = subprocess.run(["ctr", "-n", "k8s.io", "images", "import", "--all-platforms", "--digests", path],
                          stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        print(f"import failed: {{path}}", file=sys.stderr)
'''
CONTAINERD_DROPIN = f"""# gpuready lab only (real-kubelet mode): the lab's images containerd lacks, imported whenever it starts
[Service]
ExecStartPost=-{IMPORT_SCRIPT}
"""
CRICTL_YAML = (
    "runtime-endpoint: unix:///run/containerd/containerd.sock\n"
    "image-endpoint: unix:///run/containerd/containerd.sock\n"
)
OOM_CLAMP = '''
def clamp_oom(spec):
    """containerd's restrict_oom_score_adj, here: no CAP_SYS_RESOURCE, so a score below our own cannot be set."""
    process = spec.get("process") or {}
    if "oomScoreAdj" in process:
        try:
            with open("/proc/self/oom_score_adj") as f:
                own = int(f.read())
        except (OSError, ValueError):
            return
        if process["oomScoreAdj"] < own:
            process["oomScoreAdj"] = own

'''


# The emulated silicon's "kernel side": the files the mock libnvidia-ml.so.1 reads where a real NVML talks to the
# driver through /dev/nvidiactl (hardware.HOST_MACHINE_DIR, the driver state, the driver's version files).
# Fabric Manager's pid directory too: the mock libraries take its pid file's lock for a running Fabric Manager
# (an NVSwitch GPU's CUDA is "not ready" without one), as a real driver knows the fabric's state in a container.
DRIVER_STATE_DIR = "/var/lib/nvidia-emu"  # the driver state: read-write in a privileged container
MACHINE_DIRS = {
    "/opt/gpuready-lab/machine": "ro",
    DRIVER_STATE_DIR: "ro",
    "/usr/lib/nvidia-emu": "ro",
    "/run/nvidia-fabricmanager": "ro",
}
# The driver's kernel files. A container mounts a fresh /proc, which on a real node shows the NVIDIA module's
# /proc/driver/nvidia (NVIDIA's device plugin reads a MIG device's capability files there, nvidia-ctk the
# nvidia-caps major in /proc/devices); here the kernel has no NVIDIA module, and runc refuses a spec mount inside
# /proc. So a createContainer hook (run by runc with the container's root as its directory, its mounts made and
# its root not yet pivoted) binds the host's views of them, read-only, over the container's.
KERNEL_FILES_HOOK = "/usr/local/sbin/gpuready-lab-kernel-files"
KERNEL_FILES = """#!/bin/sh
# gpuready lab only (real-kubelet mode): the emulated driver's /proc files in a GPU container (see realhost.py)
set -e
for p in proc/driver proc/devices; do
  mount --bind "/$p" "$PWD/$p"
  mount -o remount,bind,ro "$PWD/$p"
done
"""
# The MIG capabilities' device nodes by the variable that asks NVIDIA's runtime hook for them.
MIG_CAPABILITIES = {
    "NVIDIA_MIG_CONFIG_DEVICES": f"/dev/nvidia-caps/nvidia-cap{kernel_files.MIG_CONFIG_MINOR}",
    "NVIDIA_MIG_MONITOR_DEVICES": f"/dev/nvidia-caps/nvidia-cap{kernel_files.MIG_MONITOR_MINOR}",
}
MACHINE_MOUNTS = f'''
MACHINE_DIRS = {MACHINE_DIRS!r}
MIG_CAPABILITIES = {MIG_CAPABILITIES!r}
DRIVER_STATE_DIR = {DRIVER_STATE_DIR!r}
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
KERNEL_FILES_HOOK = {KERNEL_FILES_HOOK!r}


def machine_mounts(spec):
    """A container the nvidia runtime gave /dev/nvidiactl also gets the emulated machine's files, read-only:
    they stand in for the kernel driver behind that device node (a real driver needs nothing mounted)."""
    devices = [d.get("path", "") for d in (spec.get("linux") or {{}}).get("devices") or []]
    if "/dev/nvidiactl" not in devices:
        return
    mounts = spec.setdefault("mounts", [])
    have = {{m.get("destination") for m in mounts}}
    # A privileged container may change the driver's settings (compute mode, MIG) as root does through
    # /dev/nvidiactl on a real node (NVIDIA's MPS control daemon sets EXCLUSIVE_PROCESS): the state is writable.
    bounding = ((spec.get("process") or {{}}).get("capabilities") or {{}}).get("bounding") or []
    privileged = "CAP_SYS_ADMIN" in bounding
    for path, mode in MACHINE_DIRS.items():
        if privileged and path == DRIVER_STATE_DIR:
            mode = "rw"
        if path not in have and os.path.isdir(path):
            mounts.append({{"destination": path, "type": "bind", "source": path, "options": ["rbind", mode]}})
    # NVIDIA's DRA driver runs nvidia-smi -c chrooted into the host's root, which its pod mounts read-only
    # (/driver-root): on a real node the change still reaches the GPU through /dev/nvidiactl, so a privileged
    # container's view of the host root gets the driver state read-write too (after that mount: spec order).
    if privileged and os.path.isdir(DRIVER_STATE_DIR):
        for root in [m.get("destination", "") for m in mounts if m.get("source") == "/"]:
            inside = root.rstrip("/") + DRIVER_STATE_DIR
            if root.rstrip("/") and inside not in have:
                mounts.append(
                    {{"destination": inside, "type": "bind", "source": DRIVER_STATE_DIR, "options": ["rbind", "rw"]}}
                )
    hooks = spec.setdefault("hooks", {{}}).setdefault("createContainer", [])
    if not any(h.get("path") == KERNEL_FILES_HOOK for h in hooks):
        hooks.append({{"path": KERNEL_FILES_HOOK, "args": [KERNEL_FILES_HOOK]}})
    # The driver state (MIG instances) lives for one boot of the host. nspawn gives the host a boot id of its
    # own, but a container's fresh /proc shows the kernel's, so the mock NVML would take the state for a
    # previous boot's and see no MIG instance: it reads the host's boot id from this variable instead.
    try:
        with open(BOOT_ID_FILE) as f:
            boot = f.read().strip()
    except OSError:
        return
    # NVML, CUDA and nvidia-smi in the container see what its device nodes reveal: the GPUs and MIG devices the pod
    # was given (nvemu.CONTAINER_DEVICES; the rule is lab/silicon/machine/contain.go).
    process = spec.setdefault("process", {{}})
    ours = ("GPUREADY_LAB_BOOT_ID=", "GPUREADY_LAB_CONTAINER_DEVICES=")
    env = [e for e in process.get("env") or [] if not e.startswith(ours)]
    given = [d for d in devices if d.startswith("/dev/nvidia")]
    # NVIDIA's runtime hook hands a container with CAP_SYS_ADMIN the MIG monitor (configuration) capability for
    # NVIDIA_MIG_MONITOR_DEVICES=all (NVIDIA_MIG_CONFIG_DEVICES=all): what the device plugin and GFD ask for to
    # see every MIG device, also those created after they started
    if privileged:
        for name, cap in MIG_CAPABILITIES.items():
            if name + "=all" in env and cap not in given:
                given.append(cap)
    nodes = ",".join(given)
    process["env"] = env + ["GPUREADY_LAB_BOOT_ID=" + boot, "GPUREADY_LAB_CONTAINER_DEVICES=" + nodes]

'''


# Root's inotify instances (fs.inotify.max_user_instances, 128 by default) are shared by every root process on this
# machine, the lab hosts' too: nspawn hosts share its user namespace. A real kubelet that finds none left exits
# ("Failed to start cAdvisor" err="inotify_init: too many open files") and its `kubeadm join` times out on the
# healthz. Measured (session 21, `ls -l /proc/*/fd`): a deployed real-kubelet host holds 19 (systemd 8, kubelet 7,
# containerd 2, dbus 1, NVIDIA's device plugin 1), the control plane 13 (kube-apiserver 6, controller-manager 7).
INOTIFY_PER_REAL_HOST = 19
INOTIFY_CONTROL_PLANE = 13
INOTIFY_LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_in_use(uid: int = 0, proc: Path = Path("/proc")) -> int:
    """inotify instances held now by the processes of ``uid`` (each ``anon_inode:inotify`` descriptor)."""
    count = 0
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            if pid_dir.stat().st_uid != uid:
                continue
            count += sum(1 for fd in (pid_dir / "fd").iterdir() if fd.readlink().name == "anon_inode:inotify")
        except OSError:  # the process ended, or hides its descriptors
            continue
    return count


def inotify_problem(hosts: int, control_plane: bool, in_use: int, limit: int) -> str | None:
    """Why a real-kubelet lab of ``hosts`` would run out of inotify instances once deployed; None where it fits."""
    need = hosts * INOTIFY_PER_REAL_HOST + (INOTIFY_CONTROL_PLANE if control_plane else 0)
    if in_use + need <= limit:
        return None
    return (
        f"{hosts} real-kubelet host(s){' and a control plane' if control_plane else ''} need about {need} inotify "
        f"instances once deployed, and root already holds {in_use} of fs.inotify.max_user_instances = {limit} "
        '(other labs?): a kubelet that finds none left exits (cAdvisor: "inotify_init: too many open files") and '
        "its kubeadm join times out. Take other labs down (gpuready lab down), use fewer hosts, or on a machine of "
        "your own raise the limit (sysctl fs.inotify.max_user_instances=512, as kind advises); the lab never "
        "changes it"
    )


def runc_wrapper() -> str:
    """realnode's wrapper, plus the oomScoreAdj clamp (containerd keeps Debian's defaults in this mode) and the
    emulated machine's files for GPU containers (MACHINE_DIRS)."""
    main = "\ndef main(argv):"
    text = realnode.RUNC_WRAPPER.replace(main, OOM_CLAMP + MACHINE_MOUNTS + main, 1)
    text = text.replace(
        '        if "resources" in linux:',
        '        clamp_oom(spec)\n        machine_mounts(spec)\n        if "resources" in linux:',
        1,
    )
    # the wrapper is /usr/local/sbin/runc itself: never exec a link back to it
    return text


def cni_subnet(index: int) -> str:
    return f"10.246.{index}.0/24"


def host_files(index: int, address: str) -> dict[str, tuple[str, int]]:
    """The lab-owned files of one host (path in the host -> (text, mode)); `address` is its IP."""
    return {
        "/usr/local/sbin/runc": (runc_wrapper(), 0o755),
        IMPORT_SCRIPT: (IMPORT, 0o755),
        KERNEL_FILES_HOOK: (KERNEL_FILES, 0o755),
        "/etc/systemd/system/containerd.service.d/gpuready-lab-images.conf": (CONTAINERD_DROPIN, 0o644),
        f"{PATCHES_DIR}/kubeletconfiguration+merge.json": (
            json.dumps(realnode.kubelet_config_patch(address)) + "\n",
            0o644,
        ),
        "/etc/cni/net.d/10-gpuready-lab-bridge.conflist": (
            realnode.cni_conflist(f"labbr{index}", cni_subnet(index)),
            0o644,
        ),
        "/etc/crictl.yaml": (CRICTL_YAML, 0o644),
    }


def prepare_host(
    host_dir: Path,
    root: Path,
    index: int,
    address: str,
    images: dict[str, Path],
    crictl: Path | None = None,
) -> list[str]:
    """Write the lab-owned files into the host's root (its overlay, before boot) and make its own directories
    under host_dir (so ``lab down`` removes them); returns its extra nspawn options. `images` are the staged
    archives (:func:`images`): linked into the host's image directory, not copied, where the file system allows."""
    for path, (text, mode) in host_files(index, address).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    image_dir = images_dir(host_dir)
    image_dir.mkdir(parents=True, exist_ok=True)
    for name, source in images.items():
        link_or_copy(source, image_dir / name)
    realnode.write_sysctl_files(root)
    if crictl:  # the node deploy installs no cri-tools; the lab's crictl, to look at the host's containers
        target = root / "usr/local/bin/crictl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(crictl, target)
        target.chmod(0o755)
    own = {
        target: host_dir / "realnode" / target.strip("/").replace("/", "-") for target in realnode.OWN_DIRS
    }
    for directory in own.values():
        directory.mkdir(parents=True, exist_ok=True)
    return [*realnode.nspawn_args(own), f"--bind={image_dir}:{IMAGES_DIR}"]


def images_dir(host_dir: Path) -> Path:
    """The host's image directory on this machine, bound at IMAGES_DIR in the host: the lab's archives are hard
    links there (the host's overlay would copy 500 MB into its upper directory per host), and archives added
    later (:func:`gpuready.lab.suite_image.import_into`) go beside them, so a containerd restart imports all."""
    return host_dir / "realnode" / "images"


# --- images (built once into the lab cache) ----------------------------------------------------------------------


def _pause_binary(version: str, out: Path) -> Path:
    """Kubernetes' own pause (build/pause/linux/pause.c of the k8s.io/kubernetes module the kubelet build put in
    the Go module cache), compiled statically with this machine's gcc."""
    modcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    source = Path(modcache) / f"k8s.io/kubernetes@v{version}/build/pause/linux/pause.c"
    tag = realnode.PAUSE_IMAGE.rsplit(":", 1)[1]
    subprocess.run(["gcc", "-Os", "-static", f"-DVERSION=v{tag}", "-o", str(out), str(source)], check=True)
    return out


def _busybox_binary(progress: Progress) -> Path:
    from gpuready.lab import hosts
    from gpuready.lab.cluster import binaries

    base = cache_dir() / "busybox-static"
    base.mkdir(parents=True, exist_ok=True)
    with binaries.locked(base / ".lock"):
        found = sorted(base.glob("busybox-static_*/busybox"))
        if found:
            return found[-1]
        mirror = hosts.debian_mirror("bookworm")
        return (
            binaries._fetch_deb(mirror, "bookworm", "busybox-static", base, progress, only="bin/busybox")
            / "busybox"
        )


def images(version: str, progress: Progress) -> dict[str, Path]:
    """The lab's OCI image archives (file name -> path), staged in the lab cache's ``lab-images`` directory (a
    file is rewritten only when its bytes change, so the hosts of every lab link the same files): pause under
    every sandbox name, busybox, NVIDIA's
    device plugin (:func:`gpuready.lab.nvidia_addons.image_archive`), node-feature-discovery
    (:func:`gpuready.lab.nfd_image.image_archive`), NVIDIA's DRA driver
    (:func:`gpuready.lab.dra_image.image_archive`), and the CUDA sample, CUDA base, dcgm-exporter and probe
    images the suite starts (:func:`gpuready.lab.cuda_images.archive`), each under its upstream name."""
    from gpuready.lab import cuda_images, dra_image, nfd_image, nvidia_addons

    built = [
        nvidia_addons.image_archive(progress=progress),
        nfd_image.image_archive(progress=progress),
        dra_image.image_archive(progress=progress),
        cuda_images.archive(progress),
    ]
    return _stage({**_base_images(version, progress), **dict(built)})


def _stage(archives: dict[str, bytes]) -> dict[str, Path]:
    """Write the archives into the cache's lab-images directory (atomically, and only the changed ones: a lab
    already up keeps the inodes its hosts link) and drop files no longer built; returns name -> path."""
    target = cache_dir() / "lab-images"
    target.mkdir(parents=True, exist_ok=True)
    with locked(cache_dir() / ".lab-images.lock"):
        for name, data in archives.items():
            path = target / name
            if path.exists() and path.stat().st_size == len(data) and path.read_bytes() == data:
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        for stale in target.glob("*.oci.tar"):
            if stale.name not in archives:
                stale.unlink()
    return {name: target / name for name in archives}


def _base_images(version: str, progress: Progress) -> dict[str, bytes]:
    target = cache_dir() / f"realnode-images-v{version}"
    with locked(cache_dir() / f".realnode-images-v{version}.lock"):
        if not (target / ".done").exists():
            target.mkdir(parents=True, exist_ok=True)
            pause = _pause_binary(version, target / "pause").read_bytes()
            busybox = _busybox_binary(progress).read_bytes()
            layer = realnode.layer_tar({"pause": (pause, 0o755)})
            for name in PAUSE_NAMES:
                archive = realnode.oci_archive(
                    name, [layer], {"Entrypoint": ["/pause"], "User": "65535:65535"}
                )
                (target / f"pause_{name.rsplit(':', 1)[1]}.oci.tar").write_bytes(archive)
            bb = realnode.oci_archive(
                BUSYBOX_IMAGE,
                [realnode.layer_tar({"bin/busybox": (busybox, 0o755)}, {"bin/sh": "busybox"})],
                {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
            )
            (target / "busybox_1.36-lab.oci.tar").write_bytes(bb)
            (target / ".done").write_text("")
    return {p.name: p.read_bytes() for p in sorted(target.glob("*.oci.tar"))}
