"""The commands that lay a MIG layout out: now (the node deploy) and at every boot (the unit the deploy installs).

MIG mode is kept by the GPU across reboots (a pending mode becomes current at the next reset), but GPU and compute
instances are not: after a reboot or a driver reload a MIG-enabled GPU has none, the device plugin advertises no
``nvidia.com/mig-*`` and the node fails its checks. NVIDIA's answer is nvidia-mig-parted's ``nvidia-mig-manager``
oneshot service (deployments/systemd in github.com/NVIDIA/mig-parted), which applies a mig-parted config at boot.
gpuready installs a smaller one of its own instead, so that a node needs neither mig-parted nor gpuready: a
oneshot unit running a POSIX sh script with the exact ``nvidia-smi mig`` commands of the inventory's layout, the
same command the deploy runs (:func:`create_command`), written by the deploy from the spec.

Facts carried over from upstream's ``nvidia-mig-manager.service`` (no text copied): ``Type=oneshot``, ordered
``After=nvidia-persistenced.service nvidia-fabricmanager.service`` (on NVSwitch systems the fabric must be up
before instances are created), ``WantedBy=multi-user.target``; its hook scripts stop the kubelet and containerd
while a config is applied, and a ``nvidia-gpu-reset.target`` lets DCGM start only after it. At boot nothing of
those has started yet, so here plain ordering does that: ``Before=`` the kubelet (the device plugin and every GPU
pod start after the instances exist), the toolkit's CDI refresh (the spec it writes at boot names the MIG
devices) and DCGM's host engine.

The script only fills a GPU that has no GPU instance at all. A GPU that has instances is left alone, whatever they
are: they may be in use, and replacing a layout that differs from the spec is the deploy's decision
(``mig_destroy_in_use``), not a boot's. MIG mode is not touched either (it survives the reboot). A GPU it cannot
fill (MIG mode off, a profile refused) makes the unit fail, so ``systemctl --failed`` names it, and the other GPUs
are still filled.

NVIDIA's device plugin and GPU feature discovery read the MIG devices when they start. After the deploy changes a
running node's layout the plugin would go on advertising the old devices until it restarts, and GFD's labels lag
by up to its 60 s interval; NVIDIA's MIG manager restarts both around a change. Both start over on SIGHUP, the
signal their config-manager sidecar sends on a config change (``cmd/nvidia-device-plugin/main.go`` and
``cmd/gpu-feature-discovery/main.go`` of k8s-device-plugin v0.19.3: "Received SIGHUP, restarting."), so the
deploy sends them that (:func:`rescan_command`).

Pure: text out, no I/O.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from gpuready.nvidia.mig import fit_layout

UNIT = "gpuready-mig-layout.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
SCRIPT_PATH = "/usr/local/sbin/gpuready-mig-layout"
# what `nvidia-smi mig -lgi` prints under its header when a GPU has GPU instances ("No GPU instances found: Not
# Found" when it has none, "No MIG-enabled devices found." when MIG is off); the MigInstances fact reads the same
TABLE_MARK = "|===="
# started before these, if they exist (Before= on a unit that is not installed orders nothing)
BEFORE = ("kubelet.service", "nvidia-cdi-refresh.service", "nvidia-dcgm.service")
AFTER = ("nvidia-persistenced.service", "nvidia-fabricmanager.service")
# NVIDIA's programs that enumerate MIG devices when they start, by their argv[0] (the add-ons' commands)
DEVICE_PLUGIN_PROGRAM = "nvidia-device-plugin"
GFD_PROGRAM = "gpu-feature-discovery"
RESCAN_PROGRAMS = (DEVICE_PLUGIN_PROGRAM, GFD_PROGRAM)


def rescan_command() -> str:
    """SIGHUP to every device plugin and GFD process on the host (their containers' too): each starts over on the
    MIG devices there are now. Matched on the command line's first word (pkill -x would compare the 15-character
    process name), so the shell running this does not match; where none runs (add-ons not deployed yet) it is a
    no-op."""
    return " ; ".join(
        f"{{ pkill -HUP -f '^([^ ]*/)?{program}( |$)' || true; }}" for program in RESCAN_PROGRAMS
    )


def create_command(index: int, model: str | None, profiles: Sequence[str]) -> str:
    """``nvidia-smi mig -cgi ... -C`` for GPU ``index``: its GPU instances, each with its default compute instance.

    The driver places instances greedily in the order asked: they are asked in an order known to fit on ``model``
    (the name nvidia-smi prints; ``None`` or a layout that does not fit: the order given).
    """
    placed = fit_layout(model, list(profiles)) if model else None
    order = [profile for profile, _ in placed] if placed else list(profiles)
    return f"nvidia-smi mig -i {index} -cgi {','.join(order)} -C"


def boot_script(model: str, per_gpu: Sequence[Sequence[str] | None]) -> str:
    """The script the unit runs: for each MIG GPU of ``per_gpu`` without GPU instances, :func:`create_command`."""
    lines = [
        "#!/bin/sh",
        "# Written by gpuready's node deploy (its MIG layout step) from the inventory; the next deploy rewrites it.",
        "# GPU and compute instances do not survive a reboot (MIG mode does): this creates the inventory's layout",
        "# on each GPU that has no GPU instance, and leaves a GPU that has instances as it is (they may be in use).",
        "set -u",
        "status=0",
        "layout() {",
        '    gpu="$1"',
        "    shift",
        f'    if nvidia-smi mig -i "$gpu" -lgi 2>&1 | grep -qF {shlex.quote(TABLE_MARK)}; then',
        '        echo "GPU $gpu: has GPU instances, left as they are"',
        "        return 0",
        "    fi",
        '    echo "GPU $gpu: $*"',
        '    "$@" || { echo "GPU $gpu: the MIG layout was not created" >&2; status=1; }',
        "}",
    ]
    for index, wanted in enumerate(per_gpu):
        if wanted is not None:
            lines.append(f"layout {index} {create_command(index, model, wanted)}")
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"


def boot_unit() -> str:
    """The oneshot unit that runs :func:`boot_script` at every boot, before the kubelet starts."""
    return (
        "[Unit]\n"
        "Description=Create the MIG instances of gpuready's inventory (they do not survive a reboot)\n"
        f"After={' '.join(AFTER)}\n"
        f"Before={' '.join(BEFORE)}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/bin/sh {SCRIPT_PATH}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )
