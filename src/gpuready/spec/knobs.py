"""Every knob gpuready reads, declared once: name, default, what it means, what is allowed, who reads it.

An inventory is plain pyinfra data, so nothing stops a typo or a wrong type from reaching a deploy: the string
"no" is truthy, and ``mig_destroy_in_use = "no"`` would destroy MIG instances that have processes on them. This
registry is what :mod:`gpuready.spec` validates every host's data against before anything connects (each problem
naming file, host, key, value and what is allowed), what fills a knob the inventory leaves out (so the ``@deploy``
tasks work in a user's own deploy, without this repository's ``group_data``), and what
``inventory/group_data/all.py`` is generated from (``gpuready knobs > inventory/group_data/all.py``; a
unit test proves the file is the generated one).

Checks here look at one value. Rules across knobs (``sharing_replicas`` only matters for time-slicing, a MIG layout
must fit the model, a batch may not exceed ``upgrade_max_unavailable``) live in :mod:`gpuready.spec`; a knob whose
value the spec judges that way says so with ``check=None`` here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuready.spec import kubesyntax

# No default: every GPU node must set it (rendered as a comment in group_data/all.py).
REQUIRED: Any = object()

Check = Callable[[Any], str | None]  # the problem with a value ("must be ..."), or None when it is allowed


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be True or False"


def _integer(minimum: int, maximum: int | None = None) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            return f"must be an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        if maximum is not None and value > maximum:
            return f"must be an integer >= {minimum} and <= {maximum}"
        return None

    return check


def _text(pattern: str, allowed: str) -> Check:
    compiled = re.compile(pattern)

    def check(value: Any) -> str | None:
        return None if isinstance(value, str) and compiled.fullmatch(value) else f"must be {allowed}"

    return check


def _optional(inner: Check) -> Check:
    def check(value: Any) -> str | None:
        return None if value is None else inner(value)

    return check


def _choice(options: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        return None if value in options else f"must be one of {', '.join(options)}"

    return check


def _mig_sharing(value: Any) -> str | None:
    if value == "mps":
        return "MPS is not supported on MIG devices by the device plugin; use 'none' or 'time-slicing'"
    return _choice(MIG_SHARING_MODES)(value)


class SharingMode(StrEnum):
    """How a node's GPUs are shared (``gpu_sharing``); a StrEnum, so it is also the string the inventory says."""

    NONE = "none"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"


SHARING_MODES = tuple(mode.value for mode in SharingMode)
MIG_STRATEGIES = ("single", "mixed")
MIG_SHARING_MODES = ("none", "time-slicing")
DRIVER_SOURCES = ("cuda-repo", "distribution")
GPU_ALLOCATIONS = ("device-plugin", "dra")  # how a pool's GPUs reach pods (gpuready.spec.dra for "dra")


def _branch(value: Any) -> str | None:
    # --data nvidia_driver_branch=570 arrives as an int (pyinfra parses it): both forms are the branch. [0-9], not
    # \d: \d also matches other scripts' digits (fullwidth 580, U+FF15 U+FF18 U+FF10)
    ok = (
        isinstance(value, int | str) and not isinstance(value, bool) and re.fullmatch(r"[0-9]{3}", str(value))
    )
    return None if ok else "must be a driver branch like '580'"


def _image(value: Any) -> str | None:
    return kubesyntax.image_reference_problem(value)


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_URL = _text(r"(https?|file)://\S+", "an http(s):// or file:// URL")
_REVISION = _text(r"[A-Za-z0-9.+~-]+", "a Debian revision like 1 or 1.1")
# Upper bounds of counts, so a typo (gpu_count = 10**7) is refused at once instead of expanding into millions of
# per-GPU expectations. GPUs one host exposes: 8 on an HGX board, 16 on HGX-2/DGX-2 (V100) and 10-20 PCIe cards in
# a 4U server (20 T4 in a Supermicro SYS-6049GP-TRT); 32 leaves room for PCIe expansion chassis.
MAX_GPUS_PER_NODE = 32
# Time-slicing replicas: the device plugin advertises replicas x GPUs devices and the conformance suite runs that many
# pods at once on one node; MPS serves at most 48 clients per GPU (Volta and later), which bounds it for MPS.
MAX_SHARING_REPLICAS = 256
MAX_MPS_CLIENTS = 48
MAX_FLEET = 100_000  # nodes in one batch or out of service at once
MAX_TIMEOUT_S = 7 * 24 * 3600  # a week: longer is a typo
MAX_GPU_MEMORY_MIB = 4 * 1024 * 1024  # 4 TiB: 20 times the largest GPU memory shipped (B300, 288 GB)
# PriorityClass values of user classes: -2147483648 .. 1000000000 (larger ones are reserved for system classes)
PRIORITY_MIN, PRIORITY_MAX = -2147483648, 1000000000


def _quotas(value: Any) -> str | None:
    allowed = "must be a dict of namespace (a DNS label) -> GPUs (an integer >= 0), e.g. {'ml-team': 8}"
    if not isinstance(value, dict):
        return allowed
    for namespace, gpus in value.items():
        if not isinstance(namespace, str) or not re.fullmatch(_DNS_LABEL, namespace):
            return f"{allowed}; {namespace!r} is not a namespace name"
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            return f"{allowed}; {namespace}: {gpus!r} is not a number of GPUs"
    return None


def _priorities(value: Any) -> str | None:
    allowed = (
        f"must be a dict of PriorityClass name (a DNS subdomain, not system-*) -> value (an integer "
        f"{PRIORITY_MIN}..{PRIORITY_MAX}), e.g. {{'gpu-high': 1000}}"
    )
    if not isinstance(value, dict):
        return allowed
    for name, number in value.items():
        if not isinstance(name, str) or not re.fullmatch(_DNS_SUBDOMAIN, name) or name.startswith("system-"):
            return f"{allowed}; {name!r} is not allowed as a name"
        if (
            isinstance(number, bool)
            or not isinstance(number, int)
            or not PRIORITY_MIN <= number <= PRIORITY_MAX
        ):
            return f"{allowed}; {name}: {number!r} is out of range"
    return None


def _names(value: Any) -> str | None:
    allowed = "must be a list of check names, e.g. ['SystemVerification']"
    if not isinstance(value, list | tuple) or len(value) > 100:
        return allowed
    for name in value:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]{0,99}", name):
            return f"{allowed}; {name!r} is not one"
    return None


def _data_keys(value: Any) -> str | None:
    allowed = "must be a list of data keys (Python identifiers), e.g. ['rack', 'asset_tag']"
    if not isinstance(value, list | tuple) or len(value) > 1000:
        return allowed
    for key in value:
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", key):
            return f"{allowed}; {key!r} is not one"
        if key in KNOBS:
            return f"{allowed}; {key!r} is a knob already"
    return None


@dataclass(frozen=True)
class Knob:
    """One knob. ``reads``: which side reads it (deploy, conformance or both). ``fleet_wide``: one value for
    the whole fleet (cluster objects, the rolling upgrade), refused when set per host or when hosts disagree."""

    name: str
    default: Any
    doc: str
    section: str
    reads: str
    check: Check | None = None
    fleet_wide: bool = False


SECTIONS = {
    "gpus": "The GPUs of the node (the machine; usually set per pool in the inventory)",
    "versions": "Pinned versions: installed and held by the deploy, checked by the conformance suite",
    "repos": "Package repositories: a URL and a keyring each, so a mirror or an air-gapped repository is one line",
    "sharing": "GPU sharing",
    "join": "Joining the cluster",
    "containerd": "containerd",
    "upgrade": "Driver and toolkit upgrades (deploys/upgrade_driver.py)",
    "addons": "Cluster add-ons (deploys/cluster_addons.py)",
    "images": "Container images: every image the add-ons and the conformance suite run",
    "diag": "Node acceptance: the conformance suite's diag layer (gpuready check -m diag)",
    "timeouts": "Timeouts (seconds)",
    "data": "Data that is not a knob",
}
SECTION_NOTES = {
    "data": "A key in host or group data that is neither a knob, nor a retired knob (named with what replaced it), nor "
    "pyinfra's own (its connectors' data such as ssh_user, ssh_port, docker_identifier, and its global arguments "
    "such as _sudo) is refused, naming file, host and key: a misspelt knob would otherwise be ignored and the real "
    "knob keep its default. Data your own deploys read is declared in extra_data_keys.",
    "versions": "`gpuready plan` and every deploy name the NVIDIA security bulletins that affect the pinned driver "
    "and toolkit (gpuready/nvidia/security.py, a source per row). Defaults (chosen 2026-11): branch R580, the "
    "data center long-term support branch (R595 is the newer production branch, GPU Operator 26.7's default: set "
    'nvidia_driver_branch = "595" and a 595.x version to take it), at its first release that clears NVIDIA\'s '
    "driver bulletins up to 2026-09 (a_id 5747, 5821, 5861); toolkit 1.20.0 (2026-08: CDI refresh units, past "
    "CVE-2026-24260's fix in 1.19.1); Kubernetes 1.36.3, the newest patch of the minor NVIDIA's Cloud Native "
    "Stack 26.6 validates (1.34 left upstream support in 2026-10; 1.37.2 is two days old).",
    "repos": '{distro} is "debian12", "ubuntu2204", "ubuntu2404" (from the host\'s facts), {arch} '
    '"x86_64"/"sbsa", {deb_arch} "amd64"/"arm64", {minor} the Kubernetes minor ("1.36"). Keyrings are '
    "installed under /etc/apt/keyrings and referenced with signed-by=; nothing is ever trusted without a signature.",
    "upgrade": "deploys/gpu_node.py never reboots: after a driver change it warns and leaves the node to this "
    "deploy, which cordons, drains, upgrades, reboots (only when the driver changes), validates and uncordons, "
    "batch by batch. These knobs are fleet-wide: set them here, not per host.",
    "images": "Defaults (chosen 2026-11): device plugin and GFD v0.20.0 (2026-08, what GPU Operator 26.7 ships), "
    "dcgm-exporter 4.5.3-4.8.2 (DCGM 4.5.3, exporter 4.8.2; 2026-05; the metrics layer reads its Hostname label "
    "and the later hostname); the DRA driver for GPUs v0.4.1 (2026-06, kubernetes-sigs/dra-driver-nvidia-gpu, formerly "
    "NVIDIA/k8s-dra-driver-gpu whose images were nvcr.io/nvidia/k8s-dra-driver-gpu; the registry.k8s.io path "
    "follows the project's move and is unverified: check it before pinning); node-feature-discovery v0.17.3 "
    "(kubernetes-sigs/node-feature-discovery, served by the Go module proxy). Each must be an image reference [registry[:port]/]repository[:tag][@sha256:<64 hex>] (lower-case "
    'repository); point them at a mirror for an air-gapped fleet (README, "Air-gapped or mirrored registries").',
    "join": "The bootstrap token is a secret: it is read on the machine running pyinfra from kube_join_token_file "
    "or the environment variable kube_join_token_env, uploaded to the host as a root-only file, and never put on "
    "a command line or in a log.",
}

_K = Knob
KNOBS: dict[str, Knob] = {k.name: k for k in (
    # --- gpus
    _K("gpu_model", REQUIRED, "the name as `nvidia-smi --query-gpu=name` prints it (\"NVIDIA H100 80GB HBM3\") or "
       "a catalogue alias (\"h100-sxm\"); `gpuready models` lists the catalogue", "gpus", "both"),
    _K("gpu_count", REQUIRED, "GPUs per node, > 0", "gpus", "both"),
    _K("gpu_memory_mib", REQUIRED, "only for a model the catalogue does not know: the nvidia.com/gpu.memory label "
       "value", "gpus", "both", _optional(_integer(1, MAX_GPU_MEMORY_MIB))),
    _K("nvswitch", False, "True on HGX/DGX boards: Fabric Manager is installed and must be active, NVLinks up",
       "gpus", "both", _boolean),
    # --- versions
    _K("nvidia_driver_branch", "580", "the driver branch; nvidia_driver_version must belong to it", "versions",
       "both", _branch),
    _K("nvidia_driver_version", "580.178.04", "what `nvidia-smi` reports as driver_version", "versions", "both"),
    _K("nvidia_driver_package_revision", "1", "Debian revision in the repository: nvidia-driver=580.178.04-1",
       "versions", "deploy", _REVISION),
    _K("nvidia_driver_source", "cuda-repo", "\"cuda-repo\" (NVIDIA's CUDA repository) | \"distribution\" (distro "
       "packages)", "versions", "deploy", _choice(DRIVER_SOURCES)),
    _K("nvidia_container_toolkit_version", "1.20.0", "what `nvidia-ctk --version` reports", "versions", "both"),
    _K("nvidia_container_toolkit_package_revision", "1", "nvidia-container-toolkit=1.20.0-1", "versions",
       "deploy", _REVISION),
    _K("containerd_package", "containerd", "Debian's package; \"containerd.io\" for Docker's repository",
       "versions", "deploy", _text(r"[a-z0-9][a-z0-9.+-]+", "a Debian package name like containerd")),
    _K("kubernetes_version", "1.36.3", "kubelet/kubeadm/kubectl; the minor (1.36) selects the Kubernetes "
       "repository", "versions", "both"),
    _K("kubernetes_package_revision", "1.1", "pkgs.k8s.io revision: kubelet=1.36.3-1.1", "versions", "deploy",
       _REVISION),
    # --- repos
    _K("cuda_repo_url", "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/",
       "NVIDIA's CUDA repository (driver, DCGM, nvbandwidth)", "repos", "deploy", _URL),
    _K("cuda_repo_keyring_url", "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
       "3bf863cc.pub", "its signing key", "repos", "deploy", _URL),
    _K("nvidia_container_repo_url", "https://nvidia.github.io/libnvidia-container/stable/deb/{deb_arch}/",
       "the container toolkit's repository", "repos", "deploy", _URL),
    _K("nvidia_container_repo_keyring_url", "https://nvidia.github.io/libnvidia-container/gpgkey", "its signing "
       "key", "repos", "deploy", _URL),
    _K("kubernetes_repo_url", "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/", "pkgs.k8s.io for the minor",
       "repos", "deploy", _URL),
    _K("kubernetes_repo_keyring_url", "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key", "its signing "
       "key", "repos", "deploy", _URL),
    # --- sharing
    _K("gpu_sharing", "none", "\"none\" | \"time-slicing\" | \"mps\" | \"mig\"", "sharing", "both",
       _choice(SHARING_MODES)),
    _K("sharing_replicas", 4, "time-slicing/MPS: pods per GPU, >= 2 (the device plugin rejects 1)", "sharing",
       "both"),
    _K("sharing_rename", False, "renameByDefault: advertise nvidia.com/gpu.shared instead of nvidia.com/gpu",
       "sharing", "both", _boolean),
    _K("sharing_fail_requests_greater_than_one", False, "failRequestsGreaterThanOne for time-slicing (always on "
       "for MPS)", "sharing", "both", _boolean),
    _K("mig_strategy", "mixed", "with gpu_sharing = \"mig\": \"single\" (one profile everywhere) | \"mixed\"",
       "sharing", "both", _choice(MIG_STRATEGIES)),
    _K("mig_layout", None, "with gpu_sharing = \"mig\": [\"3g.40gb\", \"2g.20gb\", \"1g.10gb\", \"1g.10gb\"] for "
       "every GPU, or {0: [...], 1: [...]} per GPU index (mixed only; GPUs not listed stay whole GPUs)", "sharing",
       "both"),
    _K("mig_sharing", "none", "time-slicing of MIG devices: \"none\" | \"time-slicing\" (MPS on MIG is not "
       "supported)", "sharing", "both", _mig_sharing),
    _K("mig_sharing_replicas", 2, "with mig_sharing = \"time-slicing\"", "sharing", "both"),
    _K("gpu_allocation", "device-plugin", "how pods get this pool's GPUs: \"device-plugin\" (nvidia.com/gpu "
       "extended resources from NVIDIA's device plugin) | \"dra\" (Dynamic Resource Allocation, resource.k8s.io/v1, "
       "Kubernetes >= 1.34: NVIDIA's DRA driver publishes each GPU and MIG device as a ResourceSlice device, pods "
       "ask through ResourceClaims of the DeviceClasses gpu.nvidia.com / mig.nvidia.com; needs nvidia_cdi; "
       "sharing is a config on the claim, so gpu_sharing is \"none\" or \"mig\"). Pools may differ", "sharing",
       "both", _choice(GPU_ALLOCATIONS)),
    _K("mig_destroy_in_use", False, "allow the deploy to destroy MIG instances that have processes on them",
       "sharing", "deploy", _boolean),
    # --- join
    _K("kube_join", True, "join the node with kubeadm; False for hosts that are only prepared (e.g. image "
       "baking)", "join", "deploy", _boolean),
    _K("kube_api_endpoint", None, "\"host:port\" of the control plane, e.g. \"k8s-api.example.com:6443\"", "join",
       "deploy"),
    _K("kube_ca_cert_hash", None, "\"sha256:<64 hex>\", from `openssl x509 -pubkey ... | sha256sum` on the "
       "control plane", "join", "deploy"),
    _K("kube_join_token_file", None, "e.g. \"~/.config/gpuready/join-token\"", "join", "deploy",
       _optional(_text(r"\S.*", "a file path"))),
    _K("kube_join_token_env", "GPUREADY_JOIN_TOKEN", "the environment variable holding the token", "join",
       "deploy", _optional(_text(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name"))),
    _K("kube_cri_socket", "unix:///run/containerd/containerd.sock", "the CRI socket kubeadm joins with", "join",
       "deploy", _text(r"unix:///\S+", "a unix:/// socket URL")),
    _K("kube_join_ignore_preflight_errors", [], "kubeadm preflight checks whose errors the join ignores "
       "(JoinConfiguration nodeRegistration.ignorePreflightErrors), e.g. [\"SystemVerification\"]; keep it empty "
       "on real nodes (the lab sets it only for hosts running the real kubelet, whose cgroups lack controllers and "
       "which share one network namespace)",
       "join", "deploy", _names),
    _K("kube_join_patches_dir", None, "a directory on the node of kubeadm patches the join applies "
       "(JoinConfiguration patches.directory, e.g. \"/etc/kubernetes/patches\" with "
       "kubeletconfiguration+merge.json); None: none", "join", "deploy",
       _optional(_text(r"/\S*", "an absolute path"))),
    _K("node_labels", {}, "extra labels applied at join, e.g. {\"node-role.kubernetes.io/gpu\": \"\", \"pool\": "
       "\"training\"}", "join", "both"),
    _K("node_taints", ["nvidia.com/gpu=present:NoSchedule"], "\"key[=value]:Effect\", Effect in "
       "NoSchedule|PreferNoSchedule|NoExecute", "join", "both"),
    # --- containerd
    _K("containerd_nvidia_default_runtime", False, "make \"nvidia\" the default runtime (RuntimeClass \"nvidia\" "
       "is preferred)", "containerd", "both", _boolean),
    _K("nvidia_cdi", True, "CDI mode (the default for new nodes, as in the GPU Operator since 25.10): GPU pods "
       "get their devices from the toolkit's CDI spec (/var/run/cdi/nvidia.yaml, kept current by the "
       "nvidia-cdi-refresh units) through containerd's CDI support (enable_cdi; containerd >= 1.7) and need no "
       "runtimeClassName; needs toolkit >= 1.18.1. False: runtime-class mode, GPU pods run with "
       "runtimeClassName nvidia (the only mode for containerd 1.6, Debian 12)", "containerd", "both", _boolean),
    # --- upgrade
    _K("upgrade_batch_size", 1, "nodes upgraded at the same time (<= upgrade_max_unavailable)", "upgrade",
       "deploy", _integer(1, MAX_FLEET), fleet_wide=True),
    _K("upgrade_max_unavailable", 1, "nodes allowed out of service (cordoned or NotReady) at once, batch "
       "included", "upgrade", "deploy", _integer(1, MAX_FLEET), fleet_wide=True),
    _K("drain_gpu_pods_only", True, "evict only pods that request GPUs; False evicts everything but DaemonSet "
       "pods", "upgrade", "deploy", _boolean, fleet_wide=True),
    _K("drain_force", False, "also evict pods no controller recreates (kubectl drain --force): they are lost",
       "upgrade", "deploy", _boolean, fleet_wide=True),
    # --- addons
    _K("kubeconfig", None, "kubeconfig the add-ons are applied with and the suite reads; None = $KUBECONFIG or "
       "~/.kube/config", "addons", "both", _optional(_text(r"\S.*", "a file path")), fleet_wide=True),
    _K("addons_namespace", "gpu-system", "the namespace of the device plugin, GFD and dcgm-exporter", "addons",
       "both", _text(_DNS_LABEL, "a namespace name (a DNS label: lower case, digits, '-')"), fleet_wide=True),
    _K("gpu_resource_quotas", {}, "{\"namespace\": max GPUs} -> ResourceQuota on requests.nvidia.com/gpu; a "
       "missing namespace is created (never pruned)", "addons", "both", _quotas, fleet_wide=True),
    _K("priority_classes", {}, "{\"name\": value} -> PriorityClasses for GPU workloads; a value change replaces "
       "gpuready's class (value is immutable)", "addons", "both", _priorities, fleet_wide=True),
    _K("addons_prune", False, "delete gpuready's objects the spec no longer renders (a removed pool's config, "
       "quota); off: they are only named", "addons", "deploy", _boolean, fleet_wide=True),
    _K("addons_nfd", True, "deploy node-feature-discovery (v0.17.3: nfd-master, nfd-worker on the GPU nodes, its "
       "CRDs and RBAC): only NFD turns the features file GFD writes into Node labels (nvidia.com/gpu.product, "
       "...). False for a cluster that already runs NFD (the GPU Operator installs one): two masters would both "
       "label the nodes. Turning it off leaves gpuready's NFD objects in place unless addons_prune = True (its "
       "CRDs always stay: another NFD may use them)", "addons", "deploy", _boolean, fleet_wide=True),
    _K("addons_take_ownership", False, "a field of an add-on object that another field manager changed (kubectl "
       "edit, a controller) stops the deploy with the object, field and manager named; True takes such fields "
       "over (server-side apply with force)", "addons", "deploy", _boolean, fleet_wide=True),
    # --- images
    _K("device_plugin_image", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "the NVIDIA device plugin DaemonSet",
       "images", "deploy", _image, fleet_wide=True),
    _K("gfd_image", None, "GPU feature discovery (ships in the device plugin's image); None = "
       "device_plugin_image", "images", "deploy", _optional(_image), fleet_wide=True),
    _K("dra_driver_image", "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1", "NVIDIA's DRA "
       "driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu): its kubelet plugin DaemonSet on gpu_allocation = "
       "\"dra\" nodes (ComputeDomains off: no controller); deployed only when a pool uses DRA", "images", "deploy", _image,
       fleet_wide=True),
    _K("nfd_image", "registry.k8s.io/nfd/node-feature-discovery:v0.17.3", "node-feature-discovery's master and "
       "worker (with addons_nfd)", "images", "deploy", _image, fleet_wide=True),
    _K("dcgm_exporter_image", "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04", "the DCGM exporter "
       "DaemonSet", "images", "deploy", _image, fleet_wide=True),
    _K("vectoradd_image", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04", "conformance: the "
       "CUDA vectorAdd sample, run once per node (workloads layer)", "images", "conformance", _image),
    _K("cuda_base_image", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "conformance: CUDA base image running "
       "nvidia-smi / holding GPUs (time-slicing, MIG, metrics and policy checks)", "images", "conformance",
       _image),
    _K("probe_image", "docker.io/library/debian:trixie-slim", "conformance with --connection pod: the probe "
       "pod that runs the host's own tools from its root, read-only (any image with a POSIX sh, chroot, timeout, "
       "mktemp and base64: Debian slim, busybox)", "images", "conformance", _image),
    # --- diag
    _K("diag_tools", False, "the node deploy installs the diag layer's tools: DCGM 4 from NVIDIA's CUDA "
       "repository (datacenter-gpu-manager-4-core and datacenter-gpu-manager-4-cuda<N>, N the pinned driver's "
       "CUDA major: 13 for R580 and later, 12 for R525-R575) with its nvidia-dcgm service (nv-hostengine) enabled "
       "and running, and nvbandwidth where the node's apt repositories have it (NVIDIA publishes no package; "
       "Debian and Ubuntu do). False: the node gets neither and the diag layer's DCGM and nvbandwidth checks "
       "skip there", "diag", "deploy", _boolean),
    _K("diag_dcgm_level", 1, "dcgmi diag run level where DCGM is installed: 1 (seconds, software and deployment "
       "checks), 2 (about two minutes: adds PCIe and memory tests), 3 (tens of minutes). 2 and 3 load the GPUs: "
       "run them on drained nodes", "diag", "conformance"),
    _K("diag_bandwidth_floors", {}, "bandwidth floors in GB/s replacing the catalogue's (gpuready/nvidia/"
       "bandwidth.py: a fraction of the link's theoretical rate), for a pool whose platform measures lower or "
       "higher: {\"h2d_gbps\": host->device, \"d2h_gbps\": device->host, \"peer_gbps\": GPU->GPU}; {} = the "
       "catalogue's", "diag", "conformance"),
    # --- timeouts
    _K("node_ready_timeout", 300, "wait for a node to become Ready after join or reboot", "timeouts", "deploy",
       _integer(1, MAX_TIMEOUT_S)),
    _K("pod_timeout", 300, "conformance workload pods: from creation to completion", "timeouts", "conformance",
       _integer(1, MAX_TIMEOUT_S)),
    _K("drain_timeout", 600, "eviction of pods from a node before an upgrade", "timeouts", "deploy",
       _integer(1, MAX_TIMEOUT_S), fleet_wide=True),
    # --- data
    _K("extra_data_keys", [], "keys of host or group data of your own (read by your deploys, not by gpuready), "
       "allowed beside the knobs, e.g. [\"rack\", \"asset_tag\"]", "data", "both", _data_keys),
)}  # fmt: skip


@dataclass(frozen=True)
class RetiredKnob:
    """A knob an earlier gpuready read and this one does not: kept so that a setting of it is refused with what
    replaced it, not ignored (which would leave the real knob at its default after an upgrade of gpuready)."""

    name: str
    version: str  # the gpuready release that dropped it
    renamed_to: str | None  # the knob that replaced it, when one did
    note: str  # what to do instead

    def problem(self) -> str:
        what = f"was renamed to {self.renamed_to}" if self.renamed_to else "was removed"
        return f"{what} in gpuready {self.version}: {self.note}"


RETIRED: dict[str, RetiredKnob] = {r.name: r for r in (
    RetiredKnob("containerd_enable_cdi", "0.1.0", "nvidia_cdi", "set nvidia_cdi (True: CDI mode, which also turns "
                "containerd's enable_cdi on; False: runtime-class mode)"),
    RetiredKnob("allow_reboot", "0.1.0", None, "deploys/gpu_node.py never reboots; deploys/upgrade_driver.py "
                "cordons, drains and reboots a node when its driver changes (upgrade_* knobs)"),
)}  # fmt: skip


def defaults(reads: str | None = None) -> dict[str, Any]:
    """{knob: default} of the knobs with a default (those read by ``reads`` and by both, when given): what a
    ``@deploy``'s ``data_defaults`` carries, so a task runs without this repository's group data."""
    return {
        k.name: k.default
        for k in KNOBS.values()
        if k.default is not REQUIRED and (reads is None or k.reads in (reads, "both"))
    }


def _comment(text: str, width: int = 110) -> list[str]:
    import textwrap

    return textwrap.wrap(
        text, width=width, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
    )


def _literal(value: Any) -> str:
    """A Python literal as the formatter writes it (double quotes), so the generated file stays formatted."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _assignment(name: str, value: Any) -> list[str]:
    line = f"{name} = {_literal(value)}"
    return [line] if len(line) <= 110 else [f"{name} = (", f"    {_literal(value)}", ")"]


def render_group_data() -> str:
    """The text of ``inventory/group_data/all.py``: every knob with its default, one comment line set each."""
    lines = [
        '"""Defaults for every host: each knob gpuready reads, with its default and what it means.',
        "",
        "Generated from gpuready/spec/knobs.py by `gpuready knobs > inventory/group_data/all.py`: change a",
        "default or a description there. pyinfra loads this file for every inventory in this directory",
        "(``example.py``, ``lab.py``, yours). Precedence, first match wins: ``--data`` on the command line > host",
        "data in the inventory > the host's pool group in the inventory > this file. Knobs marked fleet-wide take",
        "one value for the whole fleet: set them here or in a group of every host, never per host.",
        "",
        "``gpuready plan INVENTORY`` prints what these resolve to per node; ``gpuready.spec`` validates all of them",
        "before any connection is opened and names the file, host, key, bad value and what is allowed.",
        '"""',
    ]
    section = None
    for knob in KNOBS.values():
        if knob.section != section:
            section = knob.section
            lines += ["", f"# --- {SECTIONS[section]} " + "-" * max(3, 103 - len(SECTIONS[section]))]
            if section in SECTION_NOTES:
                lines += _comment(SECTION_NOTES[section])
        doc = knob.doc + (" [fleet-wide]" if knob.fleet_wide else "")
        if knob.default is REQUIRED:
            lines += _comment(f"{knob.name}: {doc}. No default.")
            continue
        lines += _comment(doc)
        lines += _assignment(knob.name, knob.default)
    return "\n".join(lines) + "\n"
