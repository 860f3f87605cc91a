"""A package repository = a URL and a signing keyring from group data, so a mirror is a one-line change.

Keyrings go to /etc/apt/keyrings and sources reference them with ``signed-by=``: never apt-key, never trusted=yes.
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Arch, LinuxDistribution

from gpuready.deploy.context import repo_vars
from gpuready.deploy.facts.apt import HeldPackages
from gpuready.deploy.facts.host import FileDigest, FileText
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import apt as gpu_apt
from gpuready.spec import knobs

KEYRING_DIR = "/etc/apt/keyrings"
REPOSITORIES = ("cuda", "nvidia-container-toolkit", "kubernetes")


def keyring_path(repo: str) -> str:
    return f"{KEYRING_DIR}/{repo}.gpg"


@reads
def facts_read() -> list[FactSpec]:
    """The facts a repository and its pinned packages read: the URL's variables, each repository's keyring and
    list, the installed and held packages."""
    specs: list[FactSpec] = [(LinuxDistribution, {}), (Arch, {}), (DebPackages, {}), (HeldPackages, {})]
    for repo in REPOSITORIES:
        specs += [(FileDigest, {"path": keyring_path(repo)}), (FileText, {"path": gpu_apt.list_path(repo)})]
    return specs


@deploy("Package repository", data_defaults=knobs.defaults("deploy"))
def repository(repo: str, url_template: str, keyring_url_template: str, pins: list[str]) -> None:
    """Add the repository ``repo`` with its keyring; refresh apt lists only when needed for ``pins``."""
    values = repo_vars()
    url = url_template.format(**values)
    keyring = keyring_path(repo)
    gpu_apt.repository(
        name=f"Add the {repo} repository and its signing key",
        repo=repo,
        source=f"deb [signed-by={keyring}] {url} /",
        keyring=keyring,
        keyring_url=keyring_url_template.format(**values),
        # apt lists are refreshed when a pin is missing (or the source changed), so a converged node reports
        # zero changes
        refresh=bool(gpu_apt.missing(pins)),
    )


def install_pinned(what: str, pins: list[str]) -> None:
    """Install ``name=version`` pins and hold them: held packages move only when the inventory moves them."""
    gpu_apt.pinned(
        name=f"Install and hold {what}",
        packages=pins,
        no_recommends=True,
        # the pins are held: changing the version on purpose needs this flag, unattended upgrades do not get it
        extra_install_args="--allow-change-held-packages",
        allow_downgrades=True,
    )
