"""CDI mode on the deployed lab: the toolkit's refresh units keep the spec that GPU pods' devices resolve against;
each way it goes wrong fails the host check that names the device, and a pod fails as on a real node.

The session lab's H100 and A100 hosts run CDI mode (trixie and sid: containerd 1.7 and 2.x), the L4 host
runtime-class mode (bookworm: containerd 1.6 has no CDI); ``test_lab_conformance`` proves both modes pass the whole
suite. Each test here restores the host before it ends.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from polling import wait_for
from pyinfra_runs import run_pyinfra
from suite_runs import failed, node_of, run_suite

from gpuready.lab.state import load_state
from gpuready.nvidia import cdi, mig_layout
from gpuready.nvidia.smi import parse_list

pytestmark = pytest.mark.lab

SPEC_CHECK = "host/test_cdi_spec_names_every_device"


def cdi_node(deployed_lab, profile: str) -> str:
    node = node_of(deployed_lab, profile)
    os_release = (load_state(deployed_lab.lab.paths) or {})["hosts"][node].get("os")
    if os_release == "bookworm":
        pytest.skip(f"{node} runs bookworm (containerd 1.6): runtime-class mode, no CDI")
    return node


def test_the_deploy_left_a_current_spec_and_cdi_on(deployed_lab):
    for profile in ("h100-sxm-8", "a100-80gb-4"):
        node = cdi_node(deployed_lab, profile)
        # NVIDIA's own nvidia-ctk (built from its Go module), generating over the lab's mock NVML
        magic = deployed_lab.lab.ssh(node, "head -c 4 /usr/bin/nvidia-ctk | od -An -tx1").stdout.split()
        assert magic == ["7f", "45", "4c", "46"], (node, "nvidia-ctk is not an ELF binary", magic)
        listed = set(deployed_lab.lab.ssh(node, "nvidia-ctk cdi list").stdout.split())
        gpus = parse_list(deployed_lab.lab.ssh(node, "nvidia-smi -L").stdout)
        wanted = cdi.expected_devices(gpus)
        assert {cdi.qualified(name) for name in wanted} <= listed, (node, listed)
        # exactly the UUIDs nvidia-smi -L lists, no more: whole GPUs and MIG devices (a MIG-enabled GPU itself is
        # not a device a container gets, and NVIDIA's nvidia-ctk leaves it out)
        uuids = {g.uuid for g in gpus if not g.mig_devices} | {m.uuid for g in gpus for m in g.mig_devices}
        # the toolkit's spec (kind nvidia.com/gpu); on real kubelets NVIDIA's device plugin lists its own beside it
        by_uuid = {n for n in listed if n.startswith(f"{cdi.KIND}=") and ("=GPU-" in n or "=MIG-" in n)}
        assert by_uuid == {cdi.qualified(u) for u in uuids}, (
            node,
            by_uuid ^ {cdi.qualified(u) for u in uuids},
        )
        units = deployed_lab.lab.ssh(
            node, f"systemctl is-enabled {cdi.REFRESH_PATH_UNIT} {cdi.REFRESH_SERVICE}"
        )
        assert units.stdout.split() == ["enabled", "enabled"]
        assert (
            deployed_lab.lab.ssh(node, f"systemctl is-active {cdi.REFRESH_PATH_UNIT}").stdout.strip()
            == "active"
        )


def test_a_deleted_spec_fails_the_host_check_and_vector_add(deployed_lab, tmp_path):
    node = cdi_node(deployed_lab, "h100-sxm-8")
    deployed_lab.lab.ssh(node, f"rm {cdi.SPEC_PATH}")
    try:
        host = failed(run_suite(deployed_lab, tmp_path / "host", "-m", "host", "--nodes", node))
        # the workloads layer alone (not gated by the failed host layer): the pod meets containerd's refusal
        workloads = failed(
            run_suite(deployed_lab, tmp_path / "workloads", "-m", "workloads", "--nodes", node)
        )
    finally:
        deployed_lab.lab.ssh(node, f"systemctl start {cdi.REFRESH_SERVICE}")
    assert list(host) == [node] and list(host[node]) == [SPEC_CHECK], host
    assert host[node][SPEC_CHECK].startswith(f"{node}: no CDI spec of kind nvidia.com/gpu"), host
    # NVIDIA's device plugin (cdi-cri) hands out devices from a spec of its own, which still exists
    assert workloads == {}, workloads
    # the refresh service wrote it again: the host layer passes
    assert failed(run_suite(deployed_lab, tmp_path / "after", "-m", "host", "--nodes", node)) == {}


def test_a_mig_change_without_refresh_leaves_a_stale_spec_until_the_deploy_refreshes_it(
    deployed_lab, tmp_path
):
    node = cdi_node(deployed_lab, "a100-80gb-4")
    # what a hand-made MIG change does: GPU 0 becomes one 7g.80gb instance, nobody refreshes the CDI spec
    # ... and, in the same breath, what the driver's files show: a real driver makes (and removes) an instance's
    # access capability inside the call, so nvidia-ctk and the device plugin find its device node right after; the
    # lab's renderer lags the state file, so the emulated change waits for it (silicon/machine/capfiles.go)
    # the 7g.80gb instance is GPU instance 0, with compute instance 0
    gi, ci = 3, 4  # /proc/driver/nvidia-caps/mig-minors: gpu0/gi0/access 3, gpu0/gi0/ci0/access 4
    caps = deployed_lab.lab.ssh(
        node,
        "nvidia-smi mig -i 0 -dci >/dev/null && nvidia-smi mig -i 0 -dgi >/dev/null && "
        "nvidia-smi mig -i 0 -cgi 7g.80gb -C >/dev/null && cd /proc/driver/nvidia/capabilities/gpu0/mig && "
        f"ls -d gi* gi*/ci* && stat -c %F /dev/nvidia-caps/nvidia-cap{gi} /dev/nvidia-caps/nvidia-cap{ci}",
        check=False,
    )
    new = deployed_lab.lab.ssh(node, "nvidia-smi -L -i 0").stdout
    mig_uuid = next(w.rstrip(")") for w in new.split() if w.startswith("MIG-"))
    spec_before = plugin_spec(deployed_lab, node)[0]
    try:
        stale = failed(run_suite(deployed_lab, tmp_path / "stale", "-m", "host", "--nodes", node))
    finally:
        # the MIG task lays the spec's layout out again (allowed to replace the hand-made instance) and refreshes
        restored = run_pyinfra(deployed_lab.lab, "--limit", node, "--data", "mig_destroy_in_use=True")
    assert caps.stdout.split("\n")[:2] == ["gi0", "gi0/ci0"], caps
    assert caps.stdout.count("character special file") == 2, caps
    assert list(stale) == [node] and list(stale[node]) == [SPEC_CHECK], stale
    message = stale[node][SPEC_CHECK]
    assert f"nvidia.com/gpu={mig_uuid} (MIG device 0:0 (7g.80gb) of GPU 0)" in message, message
    assert restored.returncode == 0, restored.output[-3000:]
    assert any("Refresh the CDI spec for the new MIG devices" in op for op in restored.changed_operations())
    # NVIDIA's device plugin and GFD started over on the new devices (else the plugin advertises the old ones)
    assert any("device plugin and GFD on the new MIG devices" in op for op in restored.changed_operations())
    core = client.CoreV1Api(
        config.new_client_from_config(config_file=deployed_lab.lab.state["apiserver"]["kubeconfig"])
    )
    for program in mig_layout.RESCAN_PROGRAMS:
        pods = core.list_namespaced_pod("gpu-system", field_selector=f"spec.nodeName={node}").items
        (pod,) = [p for p in pods if p.metadata.owner_references[0].name == program]
        wait_for(
            lambda name=pod.metadata.name, program=program: (
                "Received SIGHUP, restarting."
                in core.read_namespaced_pod_log(name, "gpu-system", container=program)
            ),
            timeout=30,
            what=f"{program} on {node} to log its SIGHUP restart",
        )
    # the restarted plugin's own spec gives each MIG device its parent GPU and both access capabilities (the nodes
    # of GPU 0's new instances existed when it looked: a missing one is left out with a warning, and a pod given
    # that device sees no MIG device)
    _, spec = wait_for(
        lambda: (lambda got: got if got[0] != spec_before else None)(plugin_spec(deployed_lab, node)),
        timeout=60,
        what=f"the device plugin on {node} to write its CDI spec again",
    )
    nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    layout = parse_list(deployed_lab.lab.ssh(node, "nvidia-smi -L").stdout)
    for gpu in layout:
        for mig in gpu.mig_devices:
            assert len(nodes.get(mig.uuid, [])) == 3, (mig, nodes.get(mig.uuid))
            assert all(p.startswith("/dev/nvidia-caps/") for p in nodes[mig.uuid][1:]), nodes[mig.uuid]
    assert failed(run_suite(deployed_lab, tmp_path / "after", "-m", "host", "--nodes", node)) == {}


# NVIDIA's device plugin in CDI mode (cdi-cri) writes the spec of the devices it hands out here when it starts
PLUGIN_SPEC = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"


def plugin_spec(deployed_lab, node: str) -> tuple[str, dict]:
    """The plugin's CDI spec on node and its modification time ("" and {} while there is none)."""
    got = deployed_lab.lab.ssh(node, f"stat -c %y {PLUGIN_SPEC} && cat {PLUGIN_SPEC}", check=False)
    if got.returncode != 0:
        return "", {}
    stamp, _, text = got.stdout.partition("\n")
    return stamp, yaml.safe_load(text)


def test_a_toolkit_below_its_security_floor_is_named_by_the_deploy_and_fails_the_host_check(
    deployed_lab, tmp_path
):
    """The L4 host (runtime-class mode) pinned to toolkit 1.17.3: the deploy warns before connecting and installs
    it as asked; the host layer then fails naming NVIDIAScape (CVE-2025-23266) and the fixed version."""
    node = node_of(deployed_lab, "l4-1")
    pin = ("--data", "nvidia_container_toolkit_version=1.17.3", "--data", "nvidia_cdi=False")
    try:
        pinned = run_pyinfra(deployed_lab.lab, "--limit", node, *pin)
        assert pinned.returncode == 0, pinned.output[-3000:]
        warning = next(line for line in pinned.output.splitlines() if "known vulnerabilities" in line)
        assert "CVE-2025-23266" in warning, warning
        assert "1.17.3-1" in deployed_lab.lab.ssh(node, "dpkg-query -W nvidia-container-toolkit").stdout
        bad = failed(run_suite(deployed_lab, tmp_path, "-m", "host"))
    finally:
        restored = run_pyinfra(deployed_lab.lab, "--limit", node)
    assert list(bad) == [node], bad
    floor = bad[node]["host/test_toolkit_security_floor"]
    assert floor.startswith(f"{node}: NVIDIA Container Toolkit 1.17.3 is affected by"), floor
    # the fix named is the release that clears every bulletin 1.17.3 is under (NVIDIAScape's own is 1.17.8)
    assert "CVE-2025-23266" in floor and "(fixed in 1.19.1)" in floor, floor
    assert restored.returncode == 0, restored.output[-3000:]
    assert "1.20.0-1" in deployed_lab.lab.ssh(node, "dpkg-query -W nvidia-container-toolkit").stdout


REAL_SPEC = (
    Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200__580.159.04" / "nvidia-ctk-cdi.yaml"
)
# what the real driver installs that the lab's emulated driver package does not (no graphics, video or OpenCL in
# the lab), so the lab's nvidia-ctk cannot find it: graphics libraries, ICD files and GSP firmware
REAL_ONLY = re.compile(
    r"^(lib(EGL|GLESv1_CM|GLESv2|GLX)_nvidia|libnv(cuvid|optix)|libnvidia-(allocator|cfg|eglcore|encode|fbc|glcore|"
    r"glsi|glvkspirv|gpucomp|opencl|opticalflow|pkcs11-openssl3|rtcore|tls)|libvdpau_nvidia|libcudadebugger)\.so|"
    r"^(10_nvidia|nvidia_icd)\.json$|^gsp_.*\.bin$|^nvidia-debugdump$"
)


def _shape(spec: dict) -> dict:
    """What a CDI spec of NVIDIA's nvidia-ctk says regardless of the machine: naming, device nodes, env, hooks."""
    edits = spec["containerEdits"]
    unversioned = {
        re.sub(r"\.so\.[\d.]+$", ".so", Path(m["containerPath"]).name) for m in edits.get("mounts", [])
    }
    return {
        "kind": spec["kind"],
        "names": sorted("index" if d["name"].isdigit() else d["name"].split("-")[0] for d in spec["devices"]),
        "gpu nodes": sorted(
            (n["major"], n.get("fileMode"), n.get("permissions"))
            for d in spec["devices"]
            if d["name"] != "all"
            for n in d["containerEdits"]["deviceNodes"]
        ),
        "common nodes": sorted(n["path"] for n in edits["deviceNodes"]),
        "env": sorted(e.split("=", 1)[0] for e in edits.get("env", [])),
        "hooks": sorted({(h["hookName"], h["args"][1]) for h in edits.get("hooks", [])}),
        "files": sorted(f for f in unversioned if not REAL_ONLY.search(f)),
    }


def test_the_lab_spec_has_the_shape_of_a_real_h200s(deployed_lab):
    """NVIDIA's nvidia-ctk on a lab host writes what it wrote on a lent H200 (tests/fixtures/device/), model and
    machine aside: device names (index, UUID, all), each GPU's /dev/nvidiaN, the shared device nodes, the env, the
    hooks, and the driver's compute files mounted. The lab's driver package has no graphics stack, so those files
    are left out of the comparison, and three compute files it lacks are named; the lab host loads nvidia-modeset,
    the lent VM did not."""
    node = cdi_node(deployed_lab, "h100-sxm-8")
    lab = yaml.safe_load(deployed_lab.lab.ssh(node, f"cat {cdi.SPEC_PATH}").stdout)
    real = yaml.safe_load(REAL_SPEC.read_text())
    want, got = _shape(real), _shape(lab)
    got["common nodes"] = [p for p in got["common nodes"] if p != "/dev/nvidia-modeset"]
    got["names"] = sorted(set(got["names"]))
    want["names"] = sorted(set(want["names"]))
    got["gpu nodes"], want["gpu nodes"] = sorted(set(got["gpu nodes"])), sorted(set(want["gpu nodes"]))
    # compute files of the real driver that the lab's packages do not ship: the mock CUDA JIT-compiles no PTX, and
    # the lab's MPS control (the static nvidia-emu-tools) needs no server binary
    missing = {"libnvidia-nvvm.so", "libnvidia-ptxjitcompiler.so", "nvidia-cuda-mps-server"}
    assert missing <= set(want["files"]) and not missing & set(got["files"]), (want["files"], got["files"])
    want["files"] = [f for f in want["files"] if f not in missing]
    assert got == want
