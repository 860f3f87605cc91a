"""Lab fixtures: one small lab for the whole session, brought up once and always taken down.

Lab tests need root, debootstrap and systemd-nspawn; without them they are skipped with the reason (shown by -ra).
The base root cache is the machine's shared one (GPUREADY_LAB_CACHE or /var/lib/gpuready-lab/cache), so only the
first run on a machine pays for debootstrap; the hosts live in a fresh state dir and a network namespace of their own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from last_user import LastUser

from gpuready.lab import hosts
from gpuready.lab.state import LabPaths

LAB_TOOLS = (
    "debootstrap",
    "systemd-nspawn",
    "ssh",
    "ssh-keygen",
    "gpg",
    "dpkg-deb",
    "dpkg-scanpackages",
    "ip",
)
NODES = 3
# one host per Debian release, in profile order: the H100 on trixie (containerd 1.7) and the MIG A100 on sid
# (containerd 2.x) run CDI mode, the time-sliced L4 on bookworm (containerd 1.6) runtime-class mode, so the whole
# suite proves both modes (inventory/lab.py picks the mode from the release)
RELEASES = ["trixie", "sid", "bookworm"]


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return f"lab tests need root (running as uid {os.geteuid()})"
    missing = [tool for tool in LAB_TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"lab tests need {', '.join(missing)} "
            "(apt-get install debootstrap systemd-container openssh-client gnupg dpkg-dev iproute2)"
        )
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("lab") and (reason := lab_skip_reason()):
        pytest.skip(reason)


# Modules that bring up a deployed multi-host lab of their own run right after test_lab_lifecycle.py, the session
# lab's last user, after which it goes down (_session_lab below). Beside the deployed session lab their hosts would
# exhaust root's inotify instances (fs.inotify.max_user_instances): what a host and a control plane take is declared
# in gpuready.lab.realhost (INOTIFY_PER_REAL_HOST, INOTIFY_CONTROL_PLANE), and hosts.up refuses a lab that would not
# fit (CI at e0092f3: test_lab_dra's two hosts, on real kubelets since that commit, were refused there).
AFTER_LIFECYCLE = ("test_lab_discover.py", "test_lab_dra.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    late = [item for item in items if item.path.name in AFTER_LIFECYCLE]
    rest = [item for item in items if item.path.name not in AFTER_LIFECYCLE]
    lifecycle = [n for n, item in enumerate(rest) if item.path.name == "test_lab_lifecycle.py"]
    if late and lifecycle:
        items[:] = rest[: lifecycle[-1] + 1] + late + rest[lifecycle[-1] + 1 :]


# --- the session lab -------------------------------------------------------------------------------------------


@dataclass
class Lab:
    paths: LabPaths
    state: dict[str, Any]
    extra_env: dict[str, str] = field(
        default_factory=dict
    )  # what inventory/lab.py reads: GPUREADY_LAB_DRA, ...

    def ssh(self, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = hosts.run_on_host(self.paths, node, ["sh", "-c", command])
        if check and result.returncode != 0:
            raise AssertionError(f"{node}: {command!r} exited {result.returncode}: {result.stderr}")
        return result

    def env(self) -> dict[str, str]:
        return {**os.environ, "GPUREADY_LAB_DIR": str(self.paths.root), **self.extra_env}

    def bring_up(self) -> None:
        self.state = hosts.up(self.paths, nodes=NODES, releases=RELEASES)


def hold_wildcard_port(port: int = 22) -> socket.socket | None:
    """Stand in for a machine sshd on 0.0.0.0:22 in this machine's namespace, if 22 is free here.

    When the hosts shared this machine's namespace such a listener took their port 22. Now they listen in the lab's
    own namespace, where it cannot: the session lab comes up with it held to prove that (test_lab_hosts).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return (
                None  # the machine's own sshd (or something) already holds it: the same situation, for real
            )
        raise
    sock.listen(1)
    return sock


# The session lab goes down right after the last test that uses it (test_lab_lifecycle.py's, in a whole run), not
# at the end of the session: the labs of the modules after it (the upgrade's 4 real-kubelet hosts) would not fit
# beside it in root's inotify instances, with the session's virtual-node cluster (tests/conftest.py) still up too.
_session_lab = LastUser("lab")


def pytest_collection_finish(session: pytest.Session) -> None:
    _session_lab.collected(session.items)


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp("lab-state"))
    listener = hold_wildcard_port()
    try:
        try:
            state = hosts.up(paths, nodes=NODES, releases=RELEASES)
        finally:
            if listener is not None:
                listener.close()
        # killed, not shut down: its state is thrown away
        _session_lab.hold(lambda: hosts.down(paths, quiet=True, poweroff=False))
        yield Lab(paths, state)
    finally:
        with contextlib.suppress(Exception):
            _session_lab.release()
            # after its last user this finds nothing left; after a failed bring-up, what that left
            hosts.down(paths, quiet=True, poweroff=False)


@contextlib.contextmanager
def real_kubelet_lab(
    tmp_path_factory: pytest.TempPathFactory, name: str, index: int, release: str, profile: str = "l4-1"
) -> Iterator[Lab]:
    """A one-host lab of its own in the real-kubelet mode (the L4 profile unless `profile`; subnet
    10.<index>.0.0/16), taken down afterwards, beside the session lab: :func:`real_l4_lab` for the modules that
    can share one."""
    if reason := lab_skip_reason():
        pytest.skip(reason)
    paths = LabPaths(tmp_path_factory.mktemp(name))
    try:
        state = hosts.up(
            paths,
            nodes=1,
            profiles=[profile],
            releases=[release],
            first_index=index,
            subnet=f"10.{index}.0.0/16",
        )
        yield Lab(paths, state)
    finally:
        with contextlib.suppress(Exception):
            hosts.down(paths, quiet=True, poweroff=False)  # thrown away: no orderly shutdown


# --- deploys on the session lab ----------------------------------------------------------------------------------

from pyinfra_runs import PyinfraRun, run_pyinfra  # noqa: E402
from suite_runs import wait_until_settled  # noqa: E402


@contextlib.contextmanager
def deployed_real_kubelet_lab(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    index: int,
    release: str,
    profile: str = "l4-1",
    env: dict[str, str] | None = None,
) -> Iterator[Lab]:
    """:func:`real_kubelet_lab` after gpuready's node and add-ons deploys, run with `env` (the lab inventory's
    pool switches), which its later pyinfra and suite runs keep."""
    with real_kubelet_lab(tmp_path_factory, name, index, release, profile) as plain:
        lab = Lab(plain.paths, plain.state, dict(env or {}))
        for deploy in ("deploys/gpu_node.py", "deploys/cluster_addons.py"):
            done = run_pyinfra(lab, deploy=deploy)
            assert done.returncode == 0, done.output[-6000:]
        yield lab


@dataclass
class DeployedLab:
    lab: Lab
    first: PyinfraRun
    second: PyinfraRun
    addons_first: PyinfraRun
    addons_second: PyinfraRun


# test_lab_lifecycle.py takes the session lab down and brings it up again, undeployed: a module that uses
# deployed_lab must sort before it (pytest runs the files in name order), as test_lab_conformance*.py and
# test_lab_deploy.py do.
@pytest.fixture(scope="session")
def deployed_lab(lab: Lab) -> DeployedLab:
    """The session lab converged by both deploys, each run twice (the second runs must change nothing)."""
    first = run_pyinfra(lab)
    assert first.returncode == 0, first.failure
    second = run_pyinfra(lab, "-vv")  # -vv: the commands it ran on each host, for the round-trip count
    addons_first = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
    assert addons_first.returncode == 0, addons_first.failure
    addons_second = run_pyinfra(lab, deploy="deploys/cluster_addons.py")
    deployed = DeployedLab(lab, first, second, addons_first, addons_second)
    # the add-ons roll out and register after the deploy returns, as on a real cluster
    wait_until_settled(deployed)
    return deployed


# --- the shared real-kubelet lab -----------------------------------------------------------------------------------

REAL_INDEX = 222  # its host number and subnet (10.222.0.0/16)
REAL_NODE = f"gpu-node-{REAL_INDEX}"
# the host's Debian release; GPUREADY_LAB_REAL_OS=bookworm|sid to try another (trixie: containerd 1.7, CDI)
REAL_RELEASE = os.environ.get("GPUREADY_LAB_REAL_OS", "trixie")


@dataclass
class RealLab:
    lab: Lab
    first: PyinfraRun  # the node deploy
    second: PyinfraRun  # ... again: it must change nothing


_shared: dict[str, Any] = {}  # the shared real-kubelet lab while it is up: "real" (RealLab), "stack"


@pytest.fixture(scope="module")
def real_l4_lab(tmp_path_factory: pytest.TempPathFactory) -> RealLab:
    """One real-kubelet host (the L4 profile, time-sliced 4 ways by inventory/lab.py) with gpuready's node deploy
    run twice, shared by the modules that test the real kubelet and NVIDIA's real add-ons on it (named
    test_lab_real_*, so they run one after another): a real lab costs minutes to bring up and deploy, so it is
    brought up by the first module that asks and taken down as soon as the next test does not use it
    (:func:`pytest_runtest_teardown`), not left running beside the later labs. Each module leaves it as it found
    it: faults cleared, add-ons as the product renders them."""
    if "real" not in _shared:
        stack = contextlib.ExitStack()
        lab = stack.enter_context(real_kubelet_lab(tmp_path_factory, "lab-real-l4", REAL_INDEX, REAL_RELEASE))
        _shared["stack"] = stack
        first = run_pyinfra(lab)
        assert first.returncode == 0, first.output[-6000:]
        _shared["real"] = RealLab(lab, first, run_pyinfra(lab))
    real: RealLab = _shared["real"]
    return real


def _take_down_shared() -> None:
    stack = _shared.pop("stack", None)
    _shared.pop("real", None)
    if stack is not None:
        stack.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "stack" in _shared and (nextitem is None or "real_l4_lab" not in nextitem.fixturenames):
        _take_down_shared()
    _session_lab.after(item)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _take_down_shared()
