"""A package repository = a URL and a signing keyring from group data, so a mirror is a one-line change.

Keyrings go to /etc/apt/keyrings and sources reference them with ``signed-by=``: never apt-key, never trusted=yes.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt

from gpuready.deploy_context import repo_vars
from gpuready.operations import apt as gpu_apt

KEYRING_DIR = "/etc/apt/keyrings"


def pins_installed(pins: list[str]) -> bool:
    """Whether every ``name=version`` pin is installed at exactly that version."""
    installed = host.get_fact(DebPackages)
    return all(version in installed.get(name, []) for name, _, version in (p.partition("=") for p in pins))


@deploy("Package repository")
def repository(repo: str, url_template: str, keyring_url_template: str, pins: list[str]) -> None:
    """Add the repository ``repo`` with its keyring; refresh apt lists only when needed for ``pins``."""
    values = repo_vars()
    url = url_template.format(**values)
    keyring = f"{KEYRING_DIR}/{repo}.gpg"
    key = apt.key(
        name=f"Install the {repo} signing key", src=keyring_url_template.format(**values), dest=keyring
    )
    source = apt.repo(
        name=f"Add the {repo} repository", src=f"deb [signed-by={keyring}] {url} /", filename=repo
    )
    # apt update is not idempotent (it always reports a change): run it only when a pin is missing or the
    # source changed, so a converged node reports zero changes
    if not pins_installed(pins):
        apt.update(name=f"Update apt lists for {repo}")
    else:
        apt.update(
            name=f"Update apt lists for {repo}",
            _if=lambda: key.did_change() or source.did_change(),
        )


def install_pinned(what: str, pins: list[str], hold_name: str) -> None:
    """Install ``name=version`` pins and hold them: held packages move only when the inventory moves them."""
    apt.packages(
        name=f"Install {what}",
        packages=pins,
        no_recommends=True,
        # the pins are held: changing the version on purpose needs this flag, unattended upgrades do not get it
        extra_install_args="--allow-change-held-packages",
        allow_downgrades=True,
    )
    gpu_apt.held(name=hold_name, packages=pins)
