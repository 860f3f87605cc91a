"""Host prerequisites every Kubernetes GPU node needs before the driver: nouveau off, modules, sysctls, no swap."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.facts.server import Sysctl, Which
from pyinfra.operations import server

from gpuready.deploy.facts.host import FileDigest, FileText, KernelFeature, Swap
from gpuready.deploy.node_facts import FactSpec, node_fact, reads
from gpuready.deploy.operations import host as host_ops
from gpuready.spec import knobs

NOUVEAU_FILE = "/etc/modprobe.d/blacklist-nouveau.conf"
NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0\n"
MODULES_FILE = "/etc/modules-load.d/k8s.conf"
# module -> a probe of the feature it provides (it may be built into the kernel and never appear in lsmod)
MODULES = {
    "overlay": "grep -qw overlay /proc/filesystems",
    "br_netfilter": "test -d /proc/sys/net/bridge",
}
FILES = (NOUVEAU_FILE, MODULES_FILE)
SYSCTL_FILE = "/etc/sysctl.d/99-kubernetes.conf"
SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": 1,
    "net.bridge.bridge-nf-call-ip6tables": 1,
    "net.ipv4.ip_forward": 1,
}


@reads
def facts_read() -> list[FactSpec]:
    """The facts host_prerequisites reads (through its operations too), for the batched round trip."""
    return [
        (Which, {"command": "update-initramfs"}),
        (Swap, {}),
        (FileText, {"path": SYSCTL_FILE}),
        (Sysctl, {"keys": sorted(SYSCTLS)}),
        *[(KernelFeature, {"probe": probe}) for probe in MODULES.values()],
        *[(FileDigest, {"path": path}) for path in FILES],
    ]


@deploy("Host prerequisites", data_defaults=knobs.defaults("deploy"))
def host_prerequisites() -> None:
    blacklist = host_ops.file_content(name="Blacklist nouveau", path=NOUVEAU_FILE, content=NOUVEAU_BLACKLIST)
    if node_fact(Which, command="update-initramfs"):
        server.shell(
            name="Rebuild the initramfs without nouveau",
            commands=["update-initramfs -u"],
            _if=blacklist.did_change,
        )
    host_ops.file_content(
        name="Load the Kubernetes kernel modules at boot",
        path=MODULES_FILE,
        content="".join(f"{m}\n" for m in MODULES),
    )
    for module, probe in MODULES.items():
        host_ops.kernel_module(name=f"Load kernel module {module}", module=module, probe=probe)
    host_ops.sysctls(name="Set the Kubernetes sysctls", values=SYSCTLS, persist_file=SYSCTL_FILE)
    host_ops.swap_off(name="Turn swap off, now and at boot")
