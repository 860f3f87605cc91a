"""The node deploy on hosts of three Debian releases: bookworm (containerd 1.6), trixie (1.7) and sid (2.x).

One lab for the module, one host per release (`hosts.up(releases=...)`, as `gpuready lab up --os bookworm --os trixie
--os sid`), each with its release's own systemd, apt and containerd package from the Debian mirror. Numbered from 151
up (the first free three): the session lab uses gpu-node-1..3 and two labs must differ in their host names.

Two rounds of the deploy on the same hosts:
1. on the config Debian's containerd package ships: converge, then a run that changes nothing;
2. on a hand-written /etc/containerd/config.toml with an `imports` entry and runc options of its own (config version
   2 for containerd 1.6/1.7, version 3 for 2.x), written before that run: both are kept, and a further run changes
   nothing.
After each, the REAL `containerd config dump` on every host has the `nvidia` handler with runc's options.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomlkit
from conftest import Lab, lab_skip_reason
from kubernetes import client, config
from pyinfra_runs import PYINFRA, REPO, PyinfraRun, run_pyinfra

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths
from gpuready.nvidia.containerd_config import nvidia_runtime_of

pytestmark = pytest.mark.lab

RELEASES = ("bookworm", "trixie", "sid")
# what each release is, as its host reports it: os-release's codename, CUDA repository path, containerd's package
EXPECTED = {
    "bookworm": {"codename": "bookworm", "cuda": "debian12", "containerd": "1.6.", "config_version": 2},
    "trixie": {"codename": "trixie", "cuda": "debian13", "containerd": "1.7.", "config_version": 2},
    # sid's os-release has no VERSION_ID: the deploy takes NVIDIA's newest Debian repository (deploy.context)
    "sid": {"codename": "forky", "cuda": "debian13", "containerd": "2.", "config_version": 3},
}
FIRST_FREE_SEARCH = range(151, 248)
SITE_IMPORTS = "/etc/containerd/site.d/*.toml"
SITE_DEBUG_LEVEL = "info"  # set by the site's imported file; containerd's own default is ''


def free_first_index(count: int) -> int:
    """The first host number from which `count` numbers are free on this machine (nspawn's per-machine dirs)."""
    for index in FIRST_FREE_SEARCH:
        names = [f"gpu-node-{index + i}" for i in range(count)]
        if not any(Path("/run/systemd/nspawn/propagate", name).exists() for name in names):
            return index
    raise RuntimeError(f"no {count} free host numbers in {FIRST_FREE_SEARCH}")


@dataclass
class Round:
    first: PyinfraRun
    second: PyinfraRun
    seconds: tuple[float, float]  # wall time of each run, printed with -s


@pytest.fixture(scope="module")
def os_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("os-lab"))
    try:
        state = hosts.up(
            paths,
            nodes=len(RELEASES),
            releases=list(RELEASES),
            first_index=free_first_index(3),
        )
        yield Lab(paths, state)
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


def release_of(lab: Lab) -> dict[str, str]:
    """host name -> its release, from the lab's state."""
    return {name: host["os"] for name, host in lab.state["hosts"].items()}


def converge_twice(lab: Lab) -> Round:
    started = time.monotonic()
    first = run_pyinfra(lab)
    assert first.returncode == 0, first.failure
    converged = time.monotonic()
    second = run_pyinfra(lab)
    seconds = (converged - started, time.monotonic() - converged)
    print(
        f"\nnode deploy on {', '.join(RELEASES)} at once: converge {seconds[0]:.1f}s, rerun {seconds[1]:.1f}s"
    )
    return Round(first, second, seconds)


@pytest.fixture(scope="module")
def stock_round(os_lab: Lab) -> Round:
    """The deploy on fresh hosts: containerd's config is the one its Debian package ships."""
    return converge_twice(os_lab)


def assert_converged_then_unchanged(round_: Round) -> None:
    success, errors, _ = round_.first.total
    assert errors == 0 and success > 0, round_.first.output[-3000:]
    assert round_.second.returncode == 0, round_.second.output[-3000:]
    assert round_.second.total[:2] == (0, 0), round_.second.changed_operations()


def config_dump(lab: Lab, node: str) -> str:
    return lab.ssh(node, "containerd config dump").stdout


def assert_nvidia_handler_keeps_runc_options(lab: Lab, node: str, dump: str, **runc_options: bool) -> None:
    nvidia = nvidia_runtime_of(dump)
    assert nvidia is not None, f"{node}: no nvidia runtime in containerd config dump"
    runc = nvidia_runtime_of(dump, "runc")
    assert runc is not None, f"{node}: no runc runtime in containerd config dump"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime", node
    for option, value in {"SystemdCgroup": True, **runc_options}.items():
        assert runc["options"][option] is value, (node, option, runc["options"])
        assert nvidia["options"][option] is value, (node, option, nvidia["options"])
    assert lab.ssh(node, "systemctl is-active containerd").stdout.strip() == "active", node


# --- the hosts are their releases ------------------------------------------------------------------------------------


def test_one_host_per_release_recorded_and_shown(os_lab):
    assert sorted(release_of(os_lab).values()) == sorted(RELEASES)
    for host in os_lab.state["hosts"].values():
        assert host["base"] == os_lab.state["bases"][host["os"]]
        assert Path(host["base"]).name.startswith(f"base-{host['os']}-")
    status = subprocess.run(
        [str(PYINFRA.with_name("gpuready")), "lab", "status"],
        env=os_lab.env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert status.returncode == 0, status.stderr
    rows = {
        line.split()[0]: line.split() for line in status.stdout.splitlines()[1:] if line.startswith("gpu-")
    }
    assert {name: row[2] for name, row in rows.items()} == release_of(os_lab)
    assert status.stdout.splitlines()[0].split()[:3] == ["HOST", "ADDRESS", "OS"]


def test_each_host_boots_its_release_on_cgroup2(os_lab):
    for node, release in release_of(os_lab).items():
        os_release = os_lab.ssh(node, "cat /etc/os-release").stdout
        assert f"VERSION_CODENAME={EXPECTED[release]['codename']}" in os_release, (node, os_release)
        assert os_lab.ssh(node, "stat -fc %T /sys/fs/cgroup").stdout.strip() == "cgroup2fs", node
        state = os_lab.ssh(node, "systemctl is-system-running --wait", check=False).stdout.strip()
        failed = os_lab.ssh(node, "systemctl --failed --no-legend", check=False).stdout
        assert state == "running", (node, state, failed)


# --- round 1: the config Debian's package ships ---------------------------------------------------------------------


def test_deploy_converges_then_changes_nothing_on_every_release(stock_round):
    assert_converged_then_unchanged(stock_round)


def test_each_release_runs_its_own_containerd(os_lab, stock_round):
    for node, release in release_of(os_lab).items():
        version = os_lab.ssh(node, "dpkg-query -W -f '${Version}' containerd").stdout
        assert version.startswith(EXPECTED[release]["containerd"]), (node, release, version)
        origin = os_lab.ssh(node, "apt-cache policy containerd").stdout
        assert "deb.debian.org" in origin or "debian" in origin, (node, origin)


def test_cuda_repository_path_follows_the_release(os_lab, stock_round):
    for node, release in release_of(os_lab).items():
        sources = os_lab.ssh(node, "cat /etc/apt/sources.list.d/*.list").stdout
        assert f"/cuda/repos/{EXPECTED[release]['cuda']}/x86_64/" in sources, (node, sources)


def test_real_containerd_has_the_nvidia_handler_with_runc_options(os_lab, stock_round):
    for node, release in release_of(os_lab).items():
        dump = config_dump(os_lab, node)
        assert tomlkit.parse(dump)["version"] == EXPECTED[release]["config_version"], node
        assert_nvidia_handler_keeps_runc_options(os_lab, node, dump)


def test_nodes_joined_with_their_release(os_lab, stock_round):
    core = client.CoreV1Api(
        config.new_client_from_config(config_file=os_lab.state["apiserver"]["kubeconfig"])
    )
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for node, release in release_of(os_lab).items():
        info = nodes[node].status.node_info
        assert EXPECTED[release]["codename"] in info.os_image, (node, info.os_image)
        ready = next(c for c in nodes[node].status.conditions if c.type == "Ready")
        assert ready.status == "True", (node, ready.message)


# --- round 2: a hand-written config with imports and runc options of its own ----------------------------------------

# containerd 1.6 and 1.7 read config version 2; 2.x writes version 3 (and still reads 2)
CRI_RUNTIME_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def hand_written_config(version: int) -> str:
    plugin = CRI_RUNTIME_PLUGIN[version]
    return f"""# Our own containerd config, written by hand before gpuready: site imports, runc options.
version = {version}
imports = ["{SITE_IMPORTS}"]

[plugins."{plugin}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."{plugin}".containerd.runtimes.runc.options]
    SystemdCgroup = true
    NoNewKeyring = true
"""


def site_config(version: int) -> str:
    return f'version = {version}\n\n[debug]\n  level = "{SITE_DEBUG_LEVEL}"\n'


@pytest.fixture(scope="module")
def hand_written_round(os_lab: Lab, stock_round: Round) -> Round:
    """Each host's config replaced by a hand-written one (containerd restarted on it, the nvidia drop-in removed),
    then the deploy, twice."""
    for node, release in release_of(os_lab).items():
        version = EXPECTED[release]["config_version"]
        os_lab.ssh(node, "rm -f /etc/containerd/conf.d/99-nvidia.toml && mkdir -p /etc/containerd/site.d")
        write = f"cat > /etc/containerd/config.toml <<'EOF'\n{hand_written_config(version)}EOF\n"
        write += f"cat > /etc/containerd/site.d/10-site.toml <<'EOF'\n{site_config(version)}EOF\n"
        os_lab.ssh(node, write + "systemctl restart containerd")
        # the hand-written config is one this containerd runs with, site import included, before gpuready
        dump = tomlkit.parse(config_dump(os_lab, node)).unwrap()
        assert dump["debug"]["level"] == SITE_DEBUG_LEVEL, node
        assert nvidia_runtime_of(config_dump(os_lab, node)) is None, node
    return converge_twice(os_lab)


def test_hand_written_config_deploy_converges_then_changes_nothing(hand_written_round):
    assert_converged_then_unchanged(hand_written_round)
    changed = hand_written_round.first.changed_operations()
    assert any("containerd" in op for op in changed), changed


def test_hand_written_imports_and_runc_options_kept(os_lab, hand_written_round):
    for node, release in release_of(os_lab).items():
        main = tomlkit.parse(os_lab.ssh(node, "cat /etc/containerd/config.toml").stdout).unwrap()
        assert main["version"] == EXPECTED[release]["config_version"], node
        assert main["imports"] == [SITE_IMPORTS, "/etc/containerd/conf.d/*.toml"], (node, main["imports"])
        dump = config_dump(os_lab, node)
        # the site's imported file is still read
        assert tomlkit.parse(dump).unwrap()["debug"]["level"] == SITE_DEBUG_LEVEL, node
        assert_nvidia_handler_keeps_runc_options(os_lab, node, dump, NoNewKeyring=True)


def test_lab_down_leaves_no_host_running(os_lab, hand_written_round):
    """Last: the module's lab goes down cleanly (every host's processes gone with their cgroups)."""
    pids = [host["pid"] for host in os_lab.state["hosts"].values()]
    hosts.down(os_lab.paths, quiet=True)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or hosts._proc_start(pid) is None, pid
    assert not any(cgroup.exists() for cgroup in hosts.lab_cgroups(os_lab.paths))
    assert not os.path.exists(os_lab.paths.state_file)
