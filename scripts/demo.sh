#!/usr/bin/env bash
# The main job on the local lab: boot 5 GPU hosts on the 3 Debian releases (8x H100 NVSwitch on bookworm, 4x A100
# with MIG on trixie, 1x L4 time-sliced on sid, 2x L40S on trixie whose pool allocates through DRA, 1x T4 on trixie
# shared by MPS), deploy them into
# GPU nodes, install the cluster add-ons, prove them with the conformance suite, print the fleet table, and take the
# lab down again (also on failure or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
if [ "$(id -u)" -ne 0 ]; then
  echo "gpuready demo: the lab boots hosts with systemd-nspawn and needs root; showing the plan instead." >&2
  exec "$BIN/gpuready" plan inventory/example.py
fi
export GPUREADY_LAB_DIR="${GPUREADY_LAB_DIR:-/var/lib/gpuready-lab}"
REPORTS="${REPORTS:-reports/demo}"
# The hosts run the real kubelet, kubeadm, containerd and runc, and NVIDIA's real device plugin, GFD and NFD as
# images (docs/lab-real-kubelet.md).
# The L40S pool allocates GPUs through Dynamic Resource Allocation (NVIDIA's DRA driver, not the device plugin):
# inventory/lab.py reads GPUREADY_LAB_DRA. Set it empty to give every pool the device plugin.
export GPUREADY_LAB_DRA="${GPUREADY_LAB_DRA-l40s-2}"
# The T4 pool shares its GPU by MPS (NVIDIA's MPS control daemon beside the device plugin): inventory/lab.py reads
# GPUREADY_LAB_MPS. Set it empty to leave it unshared.
export GPUREADY_LAB_MPS="${GPUREADY_LAB_MPS-t4-1}"
trap '"$BIN/gpuready" lab down' EXIT

step() { printf '\n==> %s\n' "$*" >&2; }

step "gpuready lab up: 5 hosts on the 3 Debian releases"
"$BIN/gpuready" lab up --nodes 5 --profile h100-sxm-8 --profile a100-80gb-4 --profile l4-1 \
  --profile l40s-2 --profile t4-1 --os bookworm --os trixie --os sid --os trixie --os trixie
step "gpuready plan inventory/lab.py: what the deploy installs and the suite expects"
"$BIN/gpuready" plan inventory/lab.py
step "pyinfra inventory/lab.py deploys/gpu_node.py --data diag_tools=true (DCGM and nvbandwidth for the diag layer)"
"$BIN/pyinfra" -y inventory/lab.py deploys/gpu_node.py --data diag_tools=true
step "pyinfra inventory/lab.py deploys/cluster_addons.py"
"$BIN/pyinfra" -y inventory/lab.py deploys/cluster_addons.py
KUBECONFIG_PATH="$("$BIN/gpuready" lab status --json | "$BIN/python" -c 'import json, sys; print(json.load(sys.stdin)["apiserver"]["kubeconfig"])')"
step "kubectl rollout status: the add-ons' pods Ready on every node (real containers take a minute to start)"
for ds in $("$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" -n gpu-system get daemonset,deployment -o name); do
  "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" -n gpu-system rollout status "$ds" --timeout=300s
done
step "waiting for each node's GPUs: in its allocatable (the device plugin registers after its pod is Ready), or in a ResourceSlice on a DRA node"
"$BIN/python" - "$KUBECONFIG_PATH" <<'EOF'
import sys, time
from gpuready import kube
from gpuready.conformance.dra_workloads import list_dra_objects
from gpuready.spec.dra import ALLOCATION_LABEL
cluster = kube.connect(sys.argv[1])
deadline = time.monotonic() + 180
def has_gpus(node, sliced):
    if (node.metadata.labels or {}).get(ALLOCATION_LABEL) == "dra":
        return node.metadata.name in sliced
    return any(k.startswith("nvidia.com/") and v != "0" for k, v in (node.status.allocatable or {}).items())
while True:
    sliced = {s["spec"].get("nodeName") for s in list_dra_objects(cluster)[0] if s["spec"].get("devices")}
    bare = [n.metadata.name for n in cluster.core.list_node().items if not has_gpus(n, sliced)]
    if not bare or time.monotonic() > deadline:
        break  # the suite names a node still without GPUs
    time.sleep(2)
EOF
step "gpuready check: the conformance suite (reports in $REPORTS)"
"$BIN/gpuready" check --inventory inventory/lab.py \
  --kubeconfig "$KUBECONFIG_PATH" --report-dir "$REPORTS" \
  --junitxml "$REPORTS/pytest.xml" -q
