#!/usr/bin/env bash
# What a lent GPU machine tells us, in one run of a few minutes (#27 item 7): the real NVIDIA tools' outputs, what
# NVML answers (python -m gpuready.conformance.nvml_probe), and the suite's host, gpu and diag layers in local mode
# (`gpuready check --connection local`: NVML, the CUDA driver API's vectorAdd and copy bandwidths). Read-only on the
# GPU: it never changes MIG mode, clocks, power limits or ECC, and never resets the GPU.
#
#   bash scripts/device-check.sh [OUT_DIR]      # OUT_DIR defaults to $OUT (the device tool's), else reports/device-check
#
# Writes OUT_DIR/device-captures.tar.gz (captures/: one file per command, MANIFEST.tsv with each command, exit
# status and seconds; report/<layer>/: verdict.json, JUnit and log of
# each layer's suite run) and OUT_DIR/summary.txt. The lab side
# of the comparison runs where the lab is: python -m gpuready.lab.fidelity (docs/device-check.md).
#
# Python packages the machine lacks come from .whl/ when it exists (wheels for its Python, installed with --target,
# nothing fetched); the suite runs from this checkout's src/ (PYTHONPATH), so no install of gpuready is needed.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-reports/device-check}}"
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT  # everything kept is in OUT_DIR's tarball
CAP="$WORK/captures"
REPORT="$WORK/report"
mkdir -p "$CAP" "$REPORT"
PY="${PYTHON:-python3}"
START=$SECONDS
log() { echo "device-check [$((SECONDS - START))s] $*" | tee -a "$WORK/summary.txt"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  log "installing $(ls .whl/*.whl | wc -l) wheels into $WORK/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .whl/*.whl \
    || log "wheel install failed (the suite run below will say what is missing)"
  export PYTHONPATH="$WORK/site:$PWD/src"
else
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

printf 'file\texit\tseconds\tcommand\n' >"$CAP/MANIFEST.tsv"
# capture FILE COMMAND...: stdout and stderr of one command (60 s at most) into captures/FILE, its row in the manifest
capture() {
  local file="$1" t0=$SECONDS rc
  shift
  timeout 60 "$@" >"$CAP/$file" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$file" "$rc" "$((SECONDS - t0))" "$*" >>"$CAP/MANIFEST.tsv"
}
# shell FILE SCRIPT: the same for a small shell pipeline
shell() { capture "$1" bash -c "$2"; }

log "captures: nvidia-smi, /proc/driver/nvidia, device nodes, PCI sysfs"
capture uname.txt uname -a
capture nvidia-smi--version.txt nvidia-smi --version
capture nvidia-smi.txt nvidia-smi
capture nvidia-smi-L.txt nvidia-smi -L
capture nvidia-smi-q.txt nvidia-smi -q
capture nvidia-smi-q-x.xml nvidia-smi -q -x
capture nvidia-smi-q-d-ROW_REMAPPER,PAGE_RETIREMENT,ECC.txt nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT,ECC
capture nvidia-smi-topo-m.txt nvidia-smi topo -m
capture nvidia-smi-nvlink-s.txt nvidia-smi nvlink -s
capture nvidia-smi-mig-lgip.txt nvidia-smi mig -lgip
capture nvidia-smi-mig-lgipp.txt nvidia-smi mig -lgipp
capture nvidia-smi-mig-lgi.txt nvidia-smi mig -lgi
capture nvidia-smi-query-gpu.csv nvidia-smi --format=csv \
  --query-gpu=index,name,uuid,pci.bus_id,pci.device_id,pci.sub_device_id,driver_version,vbios_version,memory.total,memory.reserved,memory.used,power.limit,power.default_limit,power.max_limit,power.min_limit,power.draw,clocks.max.graphics,clocks.max.memory,clocks.gr,clocks.mem,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,mig.mode.current,ecc.mode.current,compute_mode,temperature.gpu,temperature.memory,pstate,clocks_event_reasons.active
shell proc-driver-nvidia-version.txt 'cat /proc/driver/nvidia/version'
shell proc-driver-nvidia-gpus.txt 'for f in /proc/driver/nvidia/gpus/*/*; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done; ls -lR /proc/driver/nvidia/gpus'
shell proc-driver-nvidia-capabilities.txt 'ls -lR /proc/driver/nvidia/capabilities; for f in $(find /proc/driver/nvidia/capabilities -type f | head -40); do echo "== $f"; cat "$f"; done'
shell proc-devices.txt 'grep -i nvidia /proc/devices'
shell dev-nvidia.txt 'ls -l /dev/nvidia* /dev/nvidia-caps 2>&1; ls -l /dev/dri 2>&1'
shell pci-sysfs.txt 'for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x10de ] || continue; echo "== $d"; for a in vendor device subsystem_vendor subsystem_device class numa_node current_link_speed current_link_width max_link_speed max_link_width local_cpulist; do printf "%s: %s\n" "$a" "$(cat $d/$a 2>&1)"; done; done'
shell libraries.txt 'ldconfig -p | grep -E "libnvidia-ml|libcuda|libnvidia-ptxjitcompiler|libnvidia-nvvm"'
shell tools.txt 'for t in nvidia-smi nvidia-persistenced nv-fabricmanager nv-hostengine dcgmi nvbandwidth nvidia-ctk nvidia-container-runtime nvidia-cdi-refresh containerd kubelet systemctl; do printf "%s: %s\n" "$t" "$(command -v $t || echo absent)"; done'
shell kernel-log.txt 'dmesg 2>&1 | grep -iE "nvrm|xid|nvidia" | tail -50'

shell proc-modules.txt 'grep -i nvidia /proc/modules'

# NVIDIA's own open-source tools on the real driver, as the lab builds them from their Go modules (carried as
# .devbin/*.xz: nvidia-ctk and nvidia-cdi-hook 1.20.0, gpu-feature-discovery 0.19.3, nvidia-mig-parted 0.13.1)
if ls .devbin/*.xz >/dev/null 2>&1; then
  mkdir -p "$WORK/bin"
  for f in .devbin/*.xz; do
    "$PY" -c 'import lzma, sys; open(sys.argv[2], "wb").write(lzma.open(sys.argv[1]).read())' "$f" "$WORK/bin/$(basename "$f" .xz)"
    chmod +x "$WORK/bin/$(basename "$f" .xz)"
  done
  export PATH="$WORK/bin:$PATH" CAP
  log "NVIDIA's tools from .devbin: $(ls "$WORK/bin" | tr '\n' ' ')"
  capture nvidia-ctk--version.txt nvidia-ctk --version
  shell nvidia-ctk-cdi-generate.log 'nvidia-ctk cdi generate --output "$CAP/nvidia-ctk-cdi.yaml"'
  shell gfd.log 'gpu-feature-discovery --oneshot --no-timestamp --use-node-feature-api=false --mig-strategy mixed --device-discovery-strategy nvml --output-file "$CAP/gfd-labels.txt"'
  capture nvidia-mig-parted-export.yaml nvidia-mig-parted export
fi

log "NVML: python -m gpuready.conformance.nvml_probe"
capture nvml-probe.json "$PY" -m gpuready.conformance.nvml_probe

log "the suite's host, gpu and diag layers, --connection local"
"$PY" - "$WORK/inventory" <<'EOF' >>"$WORK/summary.txt" 2>&1
"""An inventory of this machine as it is (model, count, driver), with the project's group_data beside it."""
import pathlib, shutil, subprocess, sys
from gpuready.spec.knobs import KNOBS
root = pathlib.Path(sys.argv[1]); (root / "group_data").mkdir(parents=True)
shutil.copy("inventory/group_data/all.py", root / "group_data" / "all.py")
rows = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                      capture_output=True, text=True, check=True).stdout.strip().splitlines()
name, driver = (x.strip() for x in rows[0].split(","))
data = {"gpu_model": name, "gpu_count": len(rows), "nvidia_driver_version": driver,
        "nvidia_driver_branch": driver.split(".")[0], "kube_join": False}
fleet = {k: data.pop(k) for k in list(data) if k in KNOBS and KNOBS[k].fleet_wide}
(root / "inventory.py").write_text(f"gpu_nodes = ([('device', {data!r})], {fleet!r})\n")
print(f"inventory: {data} {fleet}")
EOF
# One run per layer: a failed host layer (a bare GPU machine has no containerd or toolkit) would otherwise skip the
# gpu layer, and a failed gpu layer the diag layer, and these are what the machine is lent for.
# The suite's pytest plugin comes by gpuready's entry point when it is installed; from src/ alone, name it.
PLUGIN=()
"$PY" -c 'import importlib.metadata as m; m.distribution("gpuready")' 2>/dev/null || PLUGIN=(-p gpuready.conformance.plugin)
for layer in host gpu diag; do
  t0=$SECONDS
  mkdir -p "$REPORT/$layer"
  timeout 200 "$PY" -m gpuready.cli check --inventory "$WORK/inventory/inventory.py" --connection local \
    --report-dir "$REPORT/$layer" --junitxml "$REPORT/$layer/junit.xml" -m "$layer" -p no:cacheprovider -rA "${PLUGIN[@]}" \
    >"$REPORT/$layer/pytest.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "../report/$layer/pytest.log" "$rc" "$((SECONDS - t0))" \
    "gpuready check --connection local -m $layer" >>"$CAP/MANIFEST.tsv"
  log "$layer layer: exit $rc in $((SECONDS - t0)) s; $(tail -1 "$REPORT/$layer/pytest.log")"
done

log "done: $(wc -l <"$CAP/MANIFEST.tsv") rows in the manifest"
cp "$WORK/summary.txt" "$CAP/MANIFEST.tsv" "$OUT_DIR/"
tar -C "$WORK" -czf "$OUT_DIR/device-captures.tar.gz" captures report inventory summary.txt
ls -l "$OUT_DIR"
