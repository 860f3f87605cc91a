"""Defaults for every host: each knob gpuready reads, with its default and what it means.

Generated from gpuready/spec/knobs.py by `gpuready knobs > inventory/group_data/all.py`: change a
default or a description there. pyinfra loads this file for every inventory in this directory
(``example.py``, ``lab.py``, yours). Precedence, first match wins: ``--data`` on the command line > host
data in the inventory > the host's pool group in the inventory > this file. Knobs marked fleet-wide take
one value for the whole fleet: set them here or in a group of every host, never per host.

``gpuready plan INVENTORY`` prints what these resolve to per node; ``gpuready.spec`` validates all of them
before any connection is opened and names the file, host, key, bad value and what is allowed.
"""

# --- The GPUs of the node (the machine; usually set per pool in the inventory) ------------------------------
# gpu_model: the name as `nvidia-smi --query-gpu=name` prints it ("NVIDIA H100 80GB HBM3") or a catalogue
# alias ("h100-sxm"); `gpuready models` lists the catalogue. No default.
# gpu_count: GPUs per node, > 0. No default.
# gpu_memory_mib: only for a model the catalogue does not know: the nvidia.com/gpu.memory label value. No
# default.
# True on HGX/DGX boards: Fabric Manager is installed and must be active, NVLinks up
nvswitch = False

# --- Pinned versions: installed and held by the deploy, checked by the conformance suite --------------------
# `gpuready plan` and every deploy name the NVIDIA security bulletins that affect the pinned driver and
# toolkit (gpuready/nvidia/security.py, a source per row). Defaults (chosen 2026-11): branch R580, the data
# center long-term support branch (R595 is the newer production branch, GPU Operator 26.7's default: set
# nvidia_driver_branch = "595" and a 595.x version to take it), at its first release that clears NVIDIA's
# driver bulletins up to 2026-09 (a_id 5747, 5821, 5861); toolkit 1.20.0 (2026-08: CDI refresh units, past
# CVE-2026-24260's fix in 1.19.1); Kubernetes 1.36.3, the newest patch of the minor NVIDIA's Cloud Native
# Stack 26.6 validates (1.34 left upstream support in 2026-10; 1.37.2 is two days old).
# the driver branch; nvidia_driver_version must belong to it
nvidia_driver_branch = "580"
# what `nvidia-smi` reports as driver_version
nvidia_driver_version = "580.178.04"
# Debian revision in the repository: nvidia-driver=580.178.04-1
nvidia_driver_package_revision = "1"
# "cuda-repo" (NVIDIA's CUDA repository) | "distribution" (distro packages)
nvidia_driver_source = "cuda-repo"
# what `nvidia-ctk --version` reports
nvidia_container_toolkit_version = "1.20.0"
# nvidia-container-toolkit=1.20.0-1
nvidia_container_toolkit_package_revision = "1"
# Debian's package; "containerd.io" for Docker's repository
containerd_package = "containerd"
# kubelet/kubeadm/kubectl; the minor (1.36) selects the Kubernetes repository
kubernetes_version = "1.36.3"
# pkgs.k8s.io revision: kubelet=1.36.3-1.1
kubernetes_package_revision = "1.1"

# --- Package repositories: a URL and a keyring each, so a mirror or an air-gapped repository is one line ----
# {distro} is "debian12", "ubuntu2204", "ubuntu2404" (from the host's facts), {arch} "x86_64"/"sbsa",
# {deb_arch} "amd64"/"arm64", {minor} the Kubernetes minor ("1.36"). Keyrings are installed under
# /etc/apt/keyrings and referenced with signed-by=; nothing is ever trusted without a signature.
# NVIDIA's CUDA repository (driver, DCGM, nvbandwidth)
cuda_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
# its signing key
cuda_repo_keyring_url = (
    "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/3bf863cc.pub"
)
# the container toolkit's repository
nvidia_container_repo_url = "https://nvidia.github.io/libnvidia-container/stable/deb/{deb_arch}/"
# its signing key
nvidia_container_repo_keyring_url = "https://nvidia.github.io/libnvidia-container/gpgkey"
# pkgs.k8s.io for the minor
kubernetes_repo_url = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/"
# its signing key
kubernetes_repo_keyring_url = "https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key"

# --- GPU sharing --------------------------------------------------------------------------------------------
# "none" | "time-slicing" | "mps" | "mig"
gpu_sharing = "none"
# time-slicing/MPS: pods per GPU, >= 2 (the device plugin rejects 1)
sharing_replicas = 4
# renameByDefault: advertise nvidia.com/gpu.shared instead of nvidia.com/gpu
sharing_rename = False
# failRequestsGreaterThanOne for time-slicing (always on for MPS)
sharing_fail_requests_greater_than_one = False
# with gpu_sharing = "mig": "single" (one profile everywhere) | "mixed"
mig_strategy = "mixed"
# with gpu_sharing = "mig": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"] for every GPU, or {0: [...], 1:
# [...]} per GPU index (mixed only; GPUs not listed stay whole GPUs)
mig_layout = None
# time-slicing of MIG devices: "none" | "time-slicing" (MPS on MIG is not supported)
mig_sharing = "none"
# with mig_sharing = "time-slicing"
mig_sharing_replicas = 2
# how pods get this pool's GPUs: "device-plugin" (nvidia.com/gpu extended resources from NVIDIA's device
# plugin) | "dra" (Dynamic Resource Allocation, resource.k8s.io/v1, Kubernetes >= 1.34: NVIDIA's DRA driver
# publishes each GPU and MIG device as a ResourceSlice device, pods ask through ResourceClaims of the
# DeviceClasses gpu.nvidia.com / mig.nvidia.com; needs nvidia_cdi; sharing is a config on the claim, so
# gpu_sharing is "none" or "mig"). Pools may differ
gpu_allocation = "device-plugin"
# allow the deploy to destroy MIG instances that have processes on them
mig_destroy_in_use = False

# --- Joining the cluster ------------------------------------------------------------------------------------
# The bootstrap token is a secret: it is read on the machine running pyinfra from kube_join_token_file or the
# environment variable kube_join_token_env, uploaded to the host as a root-only file, and never put on a
# command line or in a log.
# join the node with kubeadm; False for hosts that are only prepared (e.g. image baking)
kube_join = True
# "host:port" of the control plane, e.g. "k8s-api.example.com:6443"
kube_api_endpoint = None
# "sha256:<64 hex>", from `openssl x509 -pubkey ... | sha256sum` on the control plane
kube_ca_cert_hash = None
# e.g. "~/.config/gpuready/join-token"
kube_join_token_file = None
# the environment variable holding the token
kube_join_token_env = "GPUREADY_JOIN_TOKEN"
# the CRI socket kubeadm joins with
kube_cri_socket = "unix:///run/containerd/containerd.sock"
# kubeadm preflight checks whose errors the join ignores (JoinConfiguration
# nodeRegistration.ignorePreflightErrors), e.g. ["SystemVerification"]; keep it empty on real nodes (the lab
# sets it only for hosts running the real kubelet, whose cgroups lack controllers and which share one network
# namespace)
kube_join_ignore_preflight_errors = []
# a directory on the node of kubeadm patches the join applies (JoinConfiguration patches.directory, e.g.
# "/etc/kubernetes/patches" with kubeletconfiguration+merge.json); None: none
kube_join_patches_dir = None
# extra labels applied at join, e.g. {"node-role.kubernetes.io/gpu": "", "pool": "training"}
node_labels = {}
# "key[=value]:Effect", Effect in NoSchedule|PreferNoSchedule|NoExecute
node_taints = ["nvidia.com/gpu=present:NoSchedule"]

# --- containerd ---------------------------------------------------------------------------------------------
# make "nvidia" the default runtime (RuntimeClass "nvidia" is preferred)
containerd_nvidia_default_runtime = False
# CDI mode (the default for new nodes, as in the GPU Operator since 25.10): GPU pods get their devices from
# the toolkit's CDI spec (/var/run/cdi/nvidia.yaml, kept current by the nvidia-cdi-refresh units) through
# containerd's CDI support (enable_cdi; containerd >= 1.7) and need no runtimeClassName; needs toolkit >=
# 1.18.1. False: runtime-class mode, GPU pods run with runtimeClassName nvidia (the only mode for containerd
# 1.6, Debian 12)
nvidia_cdi = True

# --- Driver and toolkit upgrades (deploys/upgrade_driver.py) ------------------------------------------------
# deploys/gpu_node.py never reboots: after a driver change it warns and leaves the node to this deploy, which
# cordons, drains, upgrades, reboots (only when the driver changes), validates and uncordons, batch by batch.
# These knobs are fleet-wide: set them here, not per host.
# nodes upgraded at the same time (<= upgrade_max_unavailable) [fleet-wide]
upgrade_batch_size = 1
# nodes allowed out of service (cordoned or NotReady) at once, batch included [fleet-wide]
upgrade_max_unavailable = 1
# evict only pods that request GPUs; False evicts everything but DaemonSet pods [fleet-wide]
drain_gpu_pods_only = True
# also evict pods no controller recreates (kubectl drain --force): they are lost [fleet-wide]
drain_force = False

# --- Cluster add-ons (deploys/cluster_addons.py) ------------------------------------------------------------
# kubeconfig the add-ons are applied with and the suite reads; None = $KUBECONFIG or ~/.kube/config
# [fleet-wide]
kubeconfig = None
# the namespace of the device plugin, GFD and dcgm-exporter [fleet-wide]
addons_namespace = "gpu-system"
# {"namespace": max GPUs} -> ResourceQuota on requests.nvidia.com/gpu; a missing namespace is created (never
# pruned) [fleet-wide]
gpu_resource_quotas = {}
# {"name": value} -> PriorityClasses for GPU workloads; a value change replaces gpuready's class (value is
# immutable) [fleet-wide]
priority_classes = {}
# delete gpuready's objects the spec no longer renders (a removed pool's config, quota); off: they are only
# named [fleet-wide]
addons_prune = False
# deploy node-feature-discovery (v0.17.3: nfd-master, nfd-worker on the GPU nodes, its CRDs and RBAC): only
# NFD turns the features file GFD writes into Node labels (nvidia.com/gpu.product, ...). False for a cluster
# that already runs NFD (the GPU Operator installs one): two masters would both label the nodes. Turning it
# off leaves gpuready's NFD objects in place unless addons_prune = True (its CRDs always stay: another NFD may
# use them) [fleet-wide]
addons_nfd = True
# a field of an add-on object that another field manager changed (kubectl edit, a controller) stops the deploy
# with the object, field and manager named; True takes such fields over (server-side apply with force)
# [fleet-wide]
addons_take_ownership = False

# --- Container images: every image the add-ons and the conformance suite run --------------------------------
# Defaults (chosen 2026-11): device plugin and GFD v0.20.0 (2026-08, what GPU Operator 26.7 ships),
# dcgm-exporter 4.5.3-4.8.2 (DCGM 4.5.3, exporter 4.8.2; 2026-05; the metrics layer reads its Hostname label
# and the later hostname); the DRA driver for GPUs v0.4.1 (2026-06, kubernetes-sigs/dra-driver-nvidia-gpu,
# formerly NVIDIA/k8s-dra-driver-gpu whose images were nvcr.io/nvidia/k8s-dra-driver-gpu; the registry.k8s.io
# path follows the project's move and is unverified: check it before pinning); node-feature-discovery v0.17.3
# (kubernetes-sigs/node-feature-discovery, served by the Go module proxy). Each must be an image reference
# [registry[:port]/]repository[:tag][@sha256:<64 hex>] (lower-case repository); point them at a mirror for an
# air-gapped fleet (README, "Air-gapped or mirrored registries").
# the NVIDIA device plugin DaemonSet [fleet-wide]
device_plugin_image = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
# GPU feature discovery (ships in the device plugin's image); None = device_plugin_image [fleet-wide]
gfd_image = None
# NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu): its kubelet plugin DaemonSet on
# gpu_allocation = "dra" nodes (ComputeDomains off: no controller); deployed only when a pool uses DRA
# [fleet-wide]
dra_driver_image = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
# node-feature-discovery's master and worker (with addons_nfd) [fleet-wide]
nfd_image = "registry.k8s.io/nfd/node-feature-discovery:v0.17.3"
# the DCGM exporter DaemonSet [fleet-wide]
dcgm_exporter_image = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"
# conformance: the CUDA vectorAdd sample, run once per node (workloads layer)
vectoradd_image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
# conformance: CUDA base image running nvidia-smi / holding GPUs (time-slicing, MIG, metrics and policy
# checks)
cuda_base_image = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
# conformance with --connection pod: the probe pod that runs the host's own tools from its root, read-only
# (any image with a POSIX sh, chroot, timeout, mktemp and base64: Debian slim, busybox)
probe_image = "docker.io/library/debian:trixie-slim"

# --- Node acceptance: the conformance suite's diag layer (gpuready check -m diag) ---------------------------
# the node deploy installs the diag layer's tools: DCGM 4 from NVIDIA's CUDA repository
# (datacenter-gpu-manager-4-core and datacenter-gpu-manager-4-cuda<N>, N the pinned driver's CUDA major: 13
# for R580 and later, 12 for R525-R575) with its nvidia-dcgm service (nv-hostengine) enabled and running, and
# nvbandwidth where the node's apt repositories have it (NVIDIA publishes no package; Debian and Ubuntu do).
# False: the node gets neither and the diag layer's DCGM and nvbandwidth checks skip there
diag_tools = False
# dcgmi diag run level where DCGM is installed: 1 (seconds, software and deployment checks), 2 (about two
# minutes: adds PCIe and memory tests), 3 (tens of minutes). 2 and 3 load the GPUs: run them on drained nodes
diag_dcgm_level = 1
# bandwidth floors in GB/s replacing the catalogue's (gpuready/nvidia/bandwidth.py: a fraction of the link's
# theoretical rate), for a pool whose platform measures lower or higher: {"h2d_gbps": host->device,
# "d2h_gbps": device->host, "peer_gbps": GPU->GPU}; {} = the catalogue's
diag_bandwidth_floors = {}

# --- Timeouts (seconds) -------------------------------------------------------------------------------------
# wait for a node to become Ready after join or reboot
node_ready_timeout = 300
# conformance workload pods: from creation to completion
pod_timeout = 300
# eviction of pods from a node before an upgrade [fleet-wide]
drain_timeout = 600

# --- Data that is not a knob --------------------------------------------------------------------------------
# A key in host or group data that is neither a knob, nor a retired knob (named with what replaced it), nor
# pyinfra's own (its connectors' data such as ssh_user, ssh_port, docker_identifier, and its global arguments
# such as _sudo) is refused, naming file, host and key: a misspelt knob would otherwise be ignored and the
# real knob keep its default. Data your own deploys read is declared in extra_data_keys.
# keys of host or group data of your own (read by your deploys, not by gpuready), allowed beside the knobs,
# e.g. ["rack", "asset_tag"]
extra_data_keys = []
