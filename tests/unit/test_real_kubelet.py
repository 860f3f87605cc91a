"""The real kubelet's build (its own cache entry, the build command) and the lab-only pieces a host needs to run it
(gpuready.lab.realnode), tested without Go, a build or a lab."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuready.lab import gobuild, kubelet_build, realhost, realnode
from gpuready.lab.cluster import binaries, controlplane, kube_proxy

GO_MOD = """module k8s.io/kubernetes

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet
)
"""


def test_the_kubelet_has_its_own_cache_entry(tmp_path: Path) -> None:
    # adding it to KUBE_COMMANDS would make every cached control plane incomplete, and rebuilt
    assert "kubelet" not in binaries.KUBE_COMMANDS
    assert kubelet_build.kubelet_cache("1.36.3", tmp_path) == tmp_path / "kubelet-v1.36.3"
    assert kubelet_build.kubelet_cache("1.36.3", tmp_path) != binaries.kube_cache("1.36.3", tmp_path)
    assert kubelet_build.cached_kubelet("1.36.3", tmp_path) is None
    binary = tmp_path / "kubelet-v1.36.3/bin/kubelet"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF")
    assert kubelet_build.cached_kubelet("1.36.3", tmp_path) == binary
    assert kubelet_build.cached_kubelet("1.36.2", tmp_path) is None


def test_wrapper_module_builds_only_the_kubelet_against_published_staging_modules() -> None:
    files = kubelet_build.wrapper_module("1.36.3", GO_MOD)
    assert "require k8s.io/kubernetes v1.36.3" in files["go.mod"]
    assert "\tk8s.io/api => k8s.io/api v0.36.3" in files["go.mod"]
    assert "\tk8s.io/kubelet => k8s.io/kubelet v0.36.3" in files["go.mod"]
    assert files["tools.go"].count("import") == 1
    assert '_ "k8s.io/kubernetes/cmd/kubelet"' in files["tools.go"]


def test_build_env_is_static() -> None:
    env = kubelet_build.build_env({"PATH": "/usr/bin", "CGO_ENABLED": "1"})
    assert env["CGO_ENABLED"] == "0"
    assert env["GOFLAGS"] == "-mod=mod -buildvcs=false"
    assert env["PATH"] == "/usr/bin"


def test_ensure_kubelet_builds_once_with_the_release_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = {"gitVersion": "v1.36.3", "gitMajor": "1", "gitMinor": "36", "gitCommit": "ab" * 20}
    calls: list[tuple[list[str], dict[str, str], str]] = []

    def fake_build(args: list[str], cwd: Path, what: str, env: dict[str, str], ldflags: str = "") -> None:
        calls.append((args, env, ldflags))
        out = Path(args[args.index("-o") + 1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"\x7fELF")

    monkeypatch.setattr(gobuild, "require_go", lambda cgo="": None)
    monkeypatch.setattr(kubelet_build, "_module_source", lambda version, work, env: (GO_MOD, stamp))
    monkeypatch.setattr(kubelet_build, "run", lambda cmd, cwd, what, env=None: "")
    monkeypatch.setattr(kubelet_build, "go_build", fake_build)
    said: list[str] = []
    path, seconds = kubelet_build.ensure_kubelet("1.36.3", said.append, tmp_path)
    assert path == tmp_path / "kubelet-v1.36.3/bin/kubelet" and path.is_file()
    assert seconds is not None
    ((args, env, ldflags),) = calls
    assert args[-1] == "k8s.io/kubernetes/cmd/kubelet"
    assert env["CGO_ENABLED"] == "0"
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in ldflags
    assert "-X k8s.io/client-go/pkg/version.gitCommit=" + "ab" * 20 in ldflags
    assert not (tmp_path / "kubernetes-v1.36.3").exists()  # the control plane's entry is untouched
    again, seconds = kubelet_build.ensure_kubelet("1.36.3", said.append, tmp_path)
    assert again == path and seconds is None and len(calls) == 1


# --- realnode ----------------------------------------------------------------------------------------------------


def test_nspawn_args_bind_kmsg_tunables_and_own_dirs(tmp_path: Path) -> None:
    realnode.write_sysctl_files(tmp_path / "upper")
    sysctl = tmp_path / "upper" / realnode.SYSCTL_DIR.lstrip("/")
    assert (sysctl / "vm.overcommit_memory").read_text() == "1\n"
    assert (sysctl / "kernel.panic").read_text() == "10\n"
    assert (sysctl / "kernel.panic_on_oops").read_text() == "1\n"
    own = {target: tmp_path / target.strip("/").replace("/", "-") for target in realnode.OWN_DIRS}
    args = realnode.nspawn_args(own)
    assert "--bind=/dev/kmsg" in args
    assert "--system-call-filter=@keyring bpf" in args
    assert f"--bind={tmp_path}/var-lib-containerd:/var/lib/containerd" in args
    # sources inside the host's root: nspawn makes mounts under /proc from inside the container
    assert f"--bind-ro={realnode.SYSCTL_DIR}/kernel.panic_on_oops:/proc/sys/kernel/panic_on_oops" in args
    assert not any(
        a.startswith("--bind=/proc") for a in args
    )  # read-only files, never the machine's tunables


def wrapper_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "runc_lab"}
    exec(compile(realnode.RUNC_WRAPPER, "runc-lab", "exec"), namespace)
    return namespace


RESOURCES = {
    "devices": [{"allow": False, "access": "rwm"}],
    "cpu": {"shares": 102, "quota": 20000, "period": 100000, "cpus": "0-1"},
    "memory": {"limit": 67108864},
    "pids": {"limit": 100},
    "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
    "unified": {"memory.oom.group": "1", "hugetlb.2MB.max": "0"},
}


def test_runc_wrapper_drops_only_absent_controllers() -> None:
    strip = wrapper_namespace()["strip"]
    assert strip(RESOURCES, {"hugetlb"}) == {
        "devices": RESOURCES["devices"],
        "hugepageLimits": RESOURCES["hugepageLimits"],
        "unified": {"hugetlb.2MB.max": "0"},
    }
    assert strip(RESOURCES, {"cpu", "cpuset", "memory", "pids", "hugetlb"}) == RESOURCES
    assert strip(RESOURCES, {"cpuset"})["cpu"] == {"cpus": "0-1"}


def test_runc_wrapper_rewrites_the_bundle_then_execs_runc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"linux": {"resources": RESOURCES}}))
    ns = wrapper_namespace()
    execs: list[list[str]] = []
    ns["controllers"] = lambda: set()
    ns["real_runc"] = lambda: "/usr/sbin/runc"
    monkeypatch.setattr(ns["os"], "execv", lambda path, argv: execs.append(argv))
    argv = ["--root", "/run/runc", "--systemd-cgroup", "create", "--bundle", str(tmp_path), "abc"]
    ns["main"](argv)
    assert execs == [["/usr/sbin/runc", *argv]]
    spec = json.loads((tmp_path / "config.json").read_text())
    assert spec["linux"]["resources"] == {"devices": RESOURCES["devices"]}


def test_the_kubelet_patch_turns_off_what_needs_cgroup_controllers() -> None:
    assert realnode.KUBELET_CONFIG_PATCH["cgroupsPerQOS"] is False
    assert realnode.KUBELET_CONFIG_PATCH["enforceNodeAllocatable"] == []


def test_oci_archive_is_a_consistent_image_layout() -> None:
    layer = realnode.layer_tar({"bin/busybox": (b"binary", 0o755)}, {"bin/sh": "busybox"})
    assert layer == realnode.layer_tar({"bin/busybox": (b"binary", 0o755)}, {"bin/sh": "busybox"})
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin"].isdir() and members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"

    archive = realnode.oci_archive("registry.k8s.io/pause:3.10.2", [layer], {"Entrypoint": ["/pause"]})
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        blobs = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "registry.k8s.io/pause:3.10.2"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "3.10.2"
    manifest = json.loads(blobs["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"] == {"Entrypoint": ["/pause"]}


# --- stage 2: the lab's opt-in real-kubelet mode (gpuready.lab.realhost) -----------------------------------------


def _wrapper_namespace() -> dict[str, Any]:
    from gpuready.lab import realhost

    namespace: dict[str, Any] = {"__name__": "runc_wrapper"}
    exec(compile(realhost.runc_wrapper(), "runc-lab", "exec"), namespace)
    return namespace


def test_the_wrapper_raises_an_oom_score_below_its_own(tmp_path: Path) -> None:
    clamp = _wrapper_namespace()["clamp_oom"]
    own = int(Path("/proc/self/oom_score_adj").read_text())
    spec: dict[str, Any] = {"process": {"oomScoreAdj": own - 1 if own > -1000 else -1000}}
    clamp(spec)
    assert spec["process"]["oomScoreAdj"] == own
    high = {"process": {"oomScoreAdj": 1000}}
    clamp(high)
    assert high["process"]["oomScoreAdj"] == 1000  # raising is allowed: kept


def test_the_wrapper_gives_gpu_containers_the_emulated_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A container the nvidia runtime gave /dev/nvidiactl gets the machine's directories read-only (the mock
    NVML's "driver"); any other container gets nothing."""
    namespace = _wrapper_namespace()
    monkeypatch.setattr(namespace["os"].path, "isdir", lambda _p: True)
    boot = tmp_path / "boot_id"
    boot.write_text("host-boot-1\n")
    namespace["BOOT_ID_FILE"] = str(boot)
    gpu: dict[str, Any] = {
        "linux": {"devices": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia0"}]},
        "process": {"env": ["PATH=/bin", "GPUREADY_LAB_BOOT_ID=stale"]},
    }
    namespace["machine_mounts"](gpu)
    assert [(m["destination"], m["options"]) for m in gpu["mounts"]] == [
        ("/opt/gpuready-lab/machine", ["rbind", "ro"]),
        ("/var/lib/nvidia-emu", ["rbind", "ro"]),
        ("/usr/lib/nvidia-emu", ["rbind", "ro"]),
        ("/run/nvidia-fabricmanager", ["rbind", "ro"]),
    ]
    # the driver's /proc files, by a hook (runc refuses spec mounts inside /proc)
    assert gpu["hooks"] == {
        "createContainer": [{"path": realhost.KERNEL_FILES_HOOK, "args": [realhost.KERNEL_FILES_HOOK]}]
    }
    namespace["machine_mounts"](gpu)
    assert len(gpu["hooks"]["createContainer"]) == 1
    # the host's boot id, not the one the container's own /proc shows: else the mock NVML drops the MIG state
    # and the device nodes it was given, for the emulated nvidia-smi's container view
    assert gpu["process"]["env"] == [
        "PATH=/bin",
        "GPUREADY_LAB_BOOT_ID=host-boot-1",
        "GPUREADY_LAB_CONTAINER_DEVICES=/dev/nvidiactl,/dev/nvidia0",
    ]
    plain: dict[str, Any] = {"linux": {"devices": []}, "mounts": []}
    namespace["machine_mounts"](plain)
    assert plain["mounts"] == []
    assert "process" not in plain
    # a privileged GPU container (NVIDIA's MPS control daemon sets the compute mode) may change the driver state
    privileged: dict[str, Any] = {
        "linux": {"devices": [{"path": "/dev/nvidiactl"}]},
        "process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}},
    }
    namespace["machine_mounts"](privileged)
    assert {m["destination"]: m["options"][1] for m in privileged["mounts"]} == {
        "/opt/gpuready-lab/machine": "ro",
        "/var/lib/nvidia-emu": "rw",
        "/usr/lib/nvidia-emu": "ro",
        "/run/nvidia-fabricmanager": "ro",
    }
    # NVIDIA's DRA driver (privileged) runs nvidia-smi -c chrooted into the host root it mounts read-only: the
    # driver state is writable there too, mounted after that root; an unprivileged one's view stays read-only
    host_root = {"destination": "/driver-root", "type": "bind", "source": "/", "options": ["rbind", "ro"]}
    dra: dict[str, Any] = {**privileged, "mounts": [dict(host_root)]}
    namespace["machine_mounts"](dra)
    assert [(m["destination"], m["source"], m["options"][1]) for m in dra["mounts"]][-1] == (
        "/driver-root/var/lib/nvidia-emu",
        "/var/lib/nvidia-emu",
        "rw",
    )
    namespace["machine_mounts"](dra)
    assert len(dra["mounts"]) == 6  # once
    plugin: dict[str, Any] = {"linux": gpu["linux"], "mounts": [dict(host_root)]}
    namespace["machine_mounts"](plugin)
    assert not [m for m in plugin["mounts"] if m["destination"].startswith("/driver-root/")]
    # the device plugin and GFD where MIG is possible: NVIDIA_MIG_MONITOR_DEVICES=all with CAP_SYS_ADMIN gets the
    # MIG monitor capability, as NVIDIA's runtime hook hands it out (every MIG device visible); without the
    # capability, or asked for by nobody, not
    monitor = ["NVIDIA_MIG_MONITOR_DEVICES=all"]

    def devices_seen(env: list[str], bounding: list[str]) -> str:
        spec = {"linux": gpu["linux"], "process": {"env": env, "capabilities": {"bounding": bounding}}}
        namespace["machine_mounts"](spec)
        return next(e for e in spec["process"]["env"] if e.startswith("GPUREADY_LAB_CONTAINER_DEVICES="))

    assert devices_seen(monitor, ["CAP_SYS_ADMIN"]).endswith(",/dev/nvidia0,/dev/nvidia-caps/nvidia-cap2")
    assert devices_seen(monitor, []).endswith(",/dev/nvidia0")
    assert devices_seen([], ["CAP_SYS_ADMIN"]).endswith(",/dev/nvidia0")


def test_real_mode_host_files_are_lab_owned_and_per_host() -> None:
    from gpuready.lab import realhost

    files = realhost.host_files(7, "10.9.1.7")
    assert files["/usr/local/sbin/runc"][1] == 0o755
    assert json.loads(files[f"{realhost.PATCHES_DIR}/kubeletconfiguration+merge.json"][0]) == {
        **realnode.KUBELET_CONFIG_PATCH,
        "address": "10.9.1.7",
        "healthzBindAddress": "10.9.1.7",
    }
    conflist = json.loads(files["/etc/cni/net.d/10-gpuready-lab-bridge.conflist"][0])
    assert conflist["plugins"][0]["bridge"] == "labbr7"
    assert conflist["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.246.7.0/24"}]]
    assert (
        realhost.IMPORT_SCRIPT
        in files["/etc/systemd/system/containerd.service.d/gpuready-lab-images.conf"][0]
    )
    assert realnode.PAUSE_IMAGE in realhost.PAUSE_NAMES


def test_image_import_at_containerd_start_skips_the_images_containerd_has(tmp_path: Path) -> None:
    """The drop-in's script imports an archive only when containerd lacks one of its images (name and digest):
    each containerd start imported every archive again before (5.5 s per start on a lab host)."""
    images, bin_dir = tmp_path / "images", tmp_path / "bin"
    images.mkdir()
    bin_dir.mkdir()
    layer = realnode.layer_tar({"hello": (b"hi", 0o644)})
    kept = realnode.oci_archive("docker.io/library/kept:1", [layer], {"Cmd": ["/hello"]})
    (images / "kept.oci.tar").write_bytes(kept)
    (images / "new.oci.tar").write_bytes(realnode.oci_archive("docker.io/library/new:1", [layer], {}))
    (images / "moved.oci.tar").write_bytes(
        realnode.oci_archive("docker.io/library/moved:1", [layer], {"X": 1})
    )
    with tarfile.open(fileobj=io.BytesIO(kept)) as tar:
        digest = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]  # type: ignore[arg-type]
    listing = (
        "REF TYPE DIGEST SIZE PLATFORMS LABELS\n"
        f"docker.io/library/kept:1 application/vnd.oci.image.manifest.v1+json {digest} 1.0 KiB linux/amd64 -\n"
        "docker.io/library/moved:1 application/vnd.oci.image.manifest.v1+json sha256:0ld 1.0 KiB linux/amd64 -\n"
    )
    (tmp_path / "ls.txt").write_text(listing)
    ctr = bin_dir / "ctr"
    ctr.write_text(
        f'#!/bin/sh\nif [ "$4" = ls ]; then cat {tmp_path}/ls.txt; else printf "%s\\n" "$*" >> {tmp_path}/imports; fi\n'
    )
    ctr.chmod(0o755)
    script = tmp_path / "import"
    script.write_text(realhost.IMPORT)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["python3", str(script), str(images)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = [line.split()[-1] for line in (tmp_path / "imports").read_text().splitlines()]
    assert imported == [str(images / "moved.oci.tar"), str(images / "new.oci.tar")]


def test_real_mode_packages_carry_the_binaries(tmp_path: Path) -> None:
    from gpuready.lab import k8s_packages

    kubelet, kubeadm, crictl = tmp_path / "kubelet", tmp_path / "kubeadm", tmp_path / "crictl"
    kubelet.write_bytes(b"\x7fELFkubelet")
    kubeadm.write_bytes(b"\x7fELFkubeadm")
    crictl.write_bytes(b"\x7fELFcrictl")
    real = k8s_packages.RealBinaries(kubelet=kubelet, kubeadm=kubeadm, crictl=crictl)
    debs = {d.name: d for d in k8s_packages.kubernetes_debs("1.36.3", b"kubectl", real)}
    assert debs["kubelet"].files["/usr/bin/kubelet"][0] == b"\x7fELFkubelet"
    assert debs["kubeadm"].files["/usr/bin/kubeadm"][0] == b"\x7fELFkubeadm"
    assert "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" in debs["kubeadm"].files
    tools = {d.name: d for d in k8s_packages.tool_debs(real)}
    assert tools["kubernetes-cni"].depends == ["containernetworking-plugins"]


def test_kube_proxy_is_built_the_same_way_into_its_own_entry(tmp_path: Path) -> None:
    assert kubelet_build.kubelet_cache("1.36.3", tmp_path, "kube-proxy") == tmp_path / "kube-proxy-v1.36.3"
    files = kubelet_build.wrapper_module("1.36.3", GO_MOD, kubelet_build.KUBE_PROXY_PACKAGE)
    assert (
        '_ "k8s.io/kubernetes/cmd/kube-proxy"' in files["tools.go"] and "cmd/kubelet" not in files["tools.go"]
    )
    assert kubelet_build.build_args(tmp_path / "kp", kubelet_build.KUBE_PROXY_PACKAGE)[-1] == (
        "k8s.io/kubernetes/cmd/kube-proxy"
    )


def test_the_labs_kube_proxy_writes_no_sysctl_and_leaves_pod_traffic_unmasqueraded() -> None:
    """nftables mode (this machine has no iptables), the pod network as clusterCIDR, and every conntrack knob
    zero: kube-proxy writes a /proc/sys tunable only for a non-zero one, and this machine's must never change. No
    --config file: kube-proxy would hold an inotify instance on it, of the machine's 128."""
    args = dict(
        a.removeprefix("--").split("=", 1) for a in kube_proxy.arguments(Path("/lab/admin.conf"), "n-1")
    )
    assert "config" not in args and args["proxy-mode"] == "nftables"
    assert args["cluster-cidr"] == controlplane.POD_SUBNET
    assert args["hostname-override"] == "n-1" and args["kubeconfig"] == "/lab/admin.conf"
    conntrack = {k: v for k, v in args.items() if k.startswith("conntrack-")}
    assert len(conntrack) == 6 and set(conntrack.values()) <= {"0", "0s"}, conntrack
    assert args["metrics-bind-address"].startswith("127.0.0.1:")


def test_inotify_in_use_counts_the_users_inotify_descriptors_only(tmp_path):
    import os

    def process(pid: str, *targets: str) -> None:
        (tmp_path / pid / "fd").mkdir(parents=True)
        for n, target in enumerate(targets):
            (tmp_path / pid / "fd" / str(n)).symlink_to(target)

    process("10", "anon_inode:inotify", "anon_inode:inotify", "/dev/null", "socket:[123]")
    process("11", "anon_inode:[eventfd]", "anon_inode:inotify")
    (tmp_path / "self").mkdir()  # not a process directory
    assert realhost.inotify_in_use(os.geteuid(), tmp_path) == 3
    assert realhost.inotify_in_use(os.geteuid() + 1, tmp_path) == 0  # another user's processes


def test_a_real_lab_that_would_exhaust_roots_inotify_instances_is_refused_with_the_numbers():
    # measured in session 21: the deployed 3-host session lab (70) beside discover's 3-host lab failed to join
    assert realhost.inotify_problem(3, True, in_use=31, limit=128) is None  # 31 + 3 * 19 + 13 = 101
    problem = realhost.inotify_problem(3, True, in_use=70, limit=128)
    assert problem is not None
    assert (
        "need about 70 inotify instances" in problem
        and "holds 70 of fs.inotify.max_user_instances = 128" in problem
    )
    assert "inotify_init: too many open files" in problem and "gpuready lab down" in problem
    assert realhost.inotify_problem(1, False, in_use=100, limit=128) is None  # no control plane: 19
