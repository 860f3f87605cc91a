"""Repository URL templates filled from host facts: the lab's Debian releases, and the Ubuntu and Arm paths it never boots."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyinfra.context import ctx_host
from pyinfra.facts.server import Arch, LinuxDistribution

from gpuready.deploy import context as deploy_context


@pytest.mark.parametrize(
    ("distro", "arch", "expected"),
    [
        (
            {"name": "Ubuntu", "major": 22, "release_meta": {"VERSION_ID": "22.04"}},
            "x86_64",
            {"distro": "ubuntu2204", "arch": "x86_64", "deb_arch": "amd64"},
        ),
        (
            {"name": "Ubuntu", "major": 24, "release_meta": {"VERSION_ID": "24.04"}},
            "aarch64",
            {"distro": "ubuntu2404", "arch": "sbsa", "deb_arch": "arm64"},
        ),
        (
            {"name": "Debian", "major": 12, "release_meta": {"VERSION_ID": "12"}},
            "x86_64",
            {"distro": "debian12", "arch": "x86_64", "deb_arch": "amd64"},
        ),
        (  # trixie
            {"name": "Debian", "major": 13, "minor": 8, "release_meta": {"VERSION_ID": "13"}},
            "x86_64",
            {"distro": "debian13", "arch": "x86_64", "deb_arch": "amd64"},
        ),
        (  # sid: os-release has VERSION_CODENAME=forky and no VERSION_ID, so pyinfra finds no major either
            {"name": "Debian", "major": None, "release_meta": {"VERSION_CODENAME": "forky", "ID": "debian"}},
            "x86_64",
            {"distro": "debian13", "arch": "x86_64", "deb_arch": "amd64"},
        ),
    ],
    ids=["ubuntu2204", "ubuntu2404-arm", "bookworm", "trixie", "sid"],
)
def test_repo_vars(monkeypatch, distro, arch, expected):
    facts = {LinuxDistribution: distro, Arch: arch}
    fake = SimpleNamespace(get_fact=lambda cls, **kw: facts[cls])
    monkeypatch.setattr(
        deploy_context,
        "current_node",
        lambda: SimpleNamespace(versions=SimpleNamespace(kubernetes_minor="1.34")),
    )
    with ctx_host.use(fake):
        values = deploy_context.repo_vars()
    assert values == {**expected, "minor": "1.34"}
    url = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/".format(**values)
    assert url.endswith(f"/{expected['distro']}/{expected['arch']}/")
