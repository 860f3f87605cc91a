"""Host prerequisites every Kubernetes GPU node needs before the driver: nouveau off, modules, sysctls, no swap."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Which
from pyinfra.operations import files, server

from gpuready.operations import host as host_ops

NOUVEAU_BLACKLIST = "blacklist nouveau\noptions nouveau modeset=0\n"
# module -> a probe of the feature it provides (it may be built into the kernel and never appear in lsmod)
MODULES = {
    "overlay": "grep -qw overlay /proc/filesystems",
    "br_netfilter": "test -d /proc/sys/net/bridge",
}
SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": 1,
    "net.bridge.bridge-nf-call-ip6tables": 1,
    "net.ipv4.ip_forward": 1,
}


@deploy("Host prerequisites")
def host_prerequisites() -> None:
    blacklist = files.put(
        name="Blacklist nouveau",
        src=StringIO(NOUVEAU_BLACKLIST),
        dest="/etc/modprobe.d/blacklist-nouveau.conf",
        mode="644",
    )
    if host.get_fact(Which, command="update-initramfs"):
        server.shell(
            name="Rebuild the initramfs without nouveau",
            commands=["update-initramfs -u"],
            _if=blacklist.did_change,
        )
    files.put(
        name="Load the Kubernetes kernel modules at boot",
        src=StringIO("".join(f"{m}\n" for m in MODULES)),
        dest="/etc/modules-load.d/k8s.conf",
        mode="644",
    )
    for module, probe in MODULES.items():
        host_ops.kernel_module(name=f"Load kernel module {module}", module=module, probe=probe)
    for key, value in SYSCTLS.items():
        server.sysctl(
            name=f"Set {key}",
            key=key,
            value=value,
            persist=True,
            persist_file="/etc/sysctl.d/99-kubernetes.conf",
        )
    host_ops.swap_off(name="Turn swap off, now and at boot")
