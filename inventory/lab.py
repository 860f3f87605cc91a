"""The local lab as a pyinfra inventory: `gpuready lab up`, then `pyinfra inventory/lab.py deploys/gpu_node.py`.

Everything comes from the running lab's state (``$GPUREADY_LAB_DIR/state.json``, default /var/lib/gpuready-lab):
hosts, their addresses (10.213.1.N in the lab's network namespace, reached from here through the lab's route; see
gpuready.lab.network) and SSH port, the lab key and known_hosts (strict host-key checking stays on), each host's
hardware profile, and the lab's signed package repositories. The repositories are given as the same knobs as for
NVIDIA's and Kubernetes' real ones (``group_data/all.py``), so the deploy runs the same repository code against them.
"""

import os
from typing import Any

from gpuready.lab.state import LabPaths, lab_dir, require_state
from gpuready.spec.knobs import KNOBS

_state = require_state(LabPaths(lab_dir()))  # raises "lab is not up: run `gpuready lab up`"
_ssh = _state["ssh"]
_repo = _state["repo"]
# The cluster the hosts join: the lab's real control plane once it records itself in the state ("apiserver":
# endpoint, CA hash, token file). Until then the hosts are only prepared, not joined.
_api = _state.get("apiserver")
_cluster: dict[str, Any] = (
    {
        "kube_api_endpoint": _api["endpoint"],
        "kube_ca_cert_hash": _api["ca_cert_hash"],
        "kube_join_token_file": _api["join_token_file"],
        "kubeconfig": _api["kubeconfig"],
    }
    if _api
    else {"kube_join": False}
)
# The hosts' real kubeadm join needs the lab's kubelet patch (no QoS cgroups: the hosts'
# cgroup2 has no cpu/memory/pids controllers) and to ignore its SystemVerification check for the same reason.
# Lab-only: a real node leaves both knobs unset. Its pods are real containers of the lab's images: the device
# plugin's is the one the lab builds (v0.19.3, the newest the Go module proxy serves; the product default is newer).
if _api:
    from gpuready.lab import nvidia_addons, realhost

    _cluster["kube_join_patches_dir"] = realhost.PATCHES_DIR
    _cluster["kube_join_ignore_preflight_errors"] = realhost.IGNORE_PREFLIGHT
    _cluster["device_plugin_image"] = nvidia_addons.image_name()

# How each hardware profile's GPUs are shared in the lab: one pool per sharing mode, like example.py. Edit this
# to try a sharing change before it touches real hosts.
_SHARING = {
    "h100-sxm-8": {},
    "a100-80gb-4": {
        "gpu_sharing": "mig",
        "mig_strategy": "mixed",
        "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
    },
    "l4-1": {"gpu_sharing": "time-slicing", "sharing_replicas": 4},
    "l40s-2": {"gpu_sharing": "time-slicing", "sharing_replicas": 2},
    "t4-1": {},
}

# Pools in DRA mode (gpu_allocation "dra": NVIDIA's DRA driver instead of the device plugin; CDI hosts, so not on
# bookworm): GPUREADY_LAB_DRA=a100-80gb-4[,l4-1...] puts those profiles' pools in it, with what _ALLOCATION adds (in
# DRA mode the A100 keeps MIG on GPU 0 only, so its pool also has whole GPUs for a shared, time-sliced claim).
_ALLOCATION = {
    "a100-80gb-4": {"mig_layout": {0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}},
    "l4-1": {"gpu_sharing": "none"},
    "l40s-2": {"gpu_sharing": "none"},
}
_DRA = {p.strip() for p in os.environ.get("GPUREADY_LAB_DRA", "").split(",") if p.strip()}

# Pools shared by MPS (NVIDIA's MPS control daemon beside the device plugin; the lab's nvidia-cuda-mps-control is
# its static tool): GPUREADY_LAB_MPS=l4-1[,l40s-2...] shares those profiles' GPUs by MPS, 2 clients per GPU.
_MPS = {p.strip() for p in os.environ.get("GPUREADY_LAB_MPS", "").split(",") if p.strip()}

# Taints every pool carries besides the default one (node_taints), e.g. GPUREADY_LAB_EXTRA_TAINTS=team=ml:NoSchedule:
# a pool that only its team schedules on; every add-on must still land on it.
_EXTRA_TAINTS = [t.strip() for t in os.environ.get("GPUREADY_LAB_EXTRA_TAINTS", "").split(",") if t.strip()]

gpu_nodes = (
    [
        (
            name,
            {
                "ssh_hostname": host["address"],
                "ssh_port": host["port"],
                "ssh_user": _ssh["user"],
                "ssh_key": _ssh["key"],
                "ssh_known_hosts_file": _ssh["known_hosts"],
                "ssh_strict_host_key_checking": "yes",
                "gpu_model": host["gpu_model"],
                "gpu_count": host["gpu_count"],
                "nvswitch": host["nvswitch"],
                "lab_profile": host["profile"],
                **_SHARING.get(host["profile"], {}),
                **({"gpu_sharing": "mps", "sharing_replicas": 2} if host["profile"] in _MPS else {}),
                **({"node_taints": [*KNOBS["node_taints"].default, *_EXTRA_TAINTS]} if _EXTRA_TAINTS else {}),
                **(
                    {"gpu_allocation": "dra", **_ALLOCATION.get(host["profile"], {})}
                    if host["profile"] in _DRA
                    else {}
                ),
                # a bookworm host's containerd is Debian 12's 1.6, which has no CDI: runtime-class mode there
                **({"nvidia_cdi": False} if host.get("os", "bookworm") == "bookworm" else {}),
            },
        )
        for name, host in sorted(_state["hosts"].items(), key=lambda item: item[1]["index"])
    ],
    {
        # cuda_repo_url, cuda_repo_keyring_url, nvidia_container_repo_url, ...: the same knobs and relative
        # layout as the real repositories; only the base URL and the key differ.
        **_repo["inventory_data"],
        **_cluster,
        # The binary keyring on this machine, for a deploy that uploads it instead of fetching it.
        "lab_repo_keyring_path": _repo["keyring_path"],
        # The lab's own data beside the knobs (gpuready refuses any other unknown key)
        "extra_data_keys": ["lab_profile", "lab_repo_keyring_path"],
        # DCGM's level 2 (PCIe and memory tests) where a lab host has dcgmi: emulated, it takes no minutes
        "diag_dcgm_level": 2,
        # Cluster policies to try on the lab; the policy layer proves each as behaviour. The taint is the
        # default node_taints (group_data/all.py). The quota's namespace is created by the add-ons deploy.
        "gpu_resource_quotas": {"ml-team": 4},
        "priority_classes": {"gpu-batch": 1000, "gpu-serving": 100000},
    },
)
