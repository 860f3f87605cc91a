"""A package repository = a URL and a signing keyring from group data, so a mirror is a one-line change.

Keyrings go to /etc/apt/keyrings and sources reference them with ``signed-by=``: never apt-key, never trusted=yes.

Each task that installs from a repository adds it itself (:func:`task_repository`), so a task runs alone. The node
deploy first adds all of them (:func:`package_repositories`) and refreshes the apt lists once: a fresh node then
runs one ``apt-get update`` instead of one per repository (each reads every source of the node again; about 2.5 s
each on a lab host, longer against NVIDIA's CUDA repository), and the tasks' own additions are left out.
"""

from __future__ import annotations

import weakref
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Arch, LinuxDistribution

from gpuready.deploy.context import current_node, repo_vars
from gpuready.deploy.facts.apt import HeldPackages
from gpuready.deploy.facts.host import FileDigest, FileText
from gpuready.deploy.node_facts import FactSpec, reads
from gpuready.deploy.operations import apt as gpu_apt
from gpuready.spec import NodeSpec, knobs

KEYRING_DIR = "/etc/apt/keyrings"
# each repository's URL and keyring URL knobs (group data)
KNOBS = {
    "cuda": ("cuda_repo_url", "cuda_repo_keyring_url"),
    "nvidia-container-toolkit": ("nvidia_container_repo_url", "nvidia_container_repo_keyring_url"),
    "kubernetes": ("kubernetes_repo_url", "kubernetes_repo_keyring_url"),
}
REPOSITORIES = tuple(KNOBS)
# the repository each task installs its pins (NodeSpec.apt_packages[task]) from; containerd comes from the
# distribution's own
TASK_REPOSITORY = {
    "driver": "cuda",
    "diag": "cuda",
    "toolkit": "nvidia-container-toolkit",
    "kubernetes": "kubernetes",
}
# the run's pyinfra state -> host name -> the repositories package_repositories set up for it in this run (weak:
# a state gone takes its entries along, and a new one never finds an old one's)
_set_up: weakref.WeakKeyDictionary[Any, dict[str, set[str]]] = weakref.WeakKeyDictionary()


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


def _set_up_here() -> dict[str, set[str]]:
    return _set_up.setdefault(host.state, {})


def _source(repo: str, url_template: str) -> str:
    return f"deb [signed-by={keyring_path(repo)}] {url_template.format(**repo_vars())} /"


def _installs_from_repository(node: NodeSpec, task: str) -> bool:
    """The driver comes from the CUDA repository or the distribution; DCGM only with diag_tools (apt_packages has
    no "diag" otherwise)."""
    if task == "driver":
        return node.versions.driver_source == "cuda-repo"
    return task in node.apt_packages


def task_pins(node: NodeSpec) -> dict[str, list[str]]:
    """Each repository the node's tasks install from -> the pins they install from it."""
    by_repo: dict[str, list[str]] = {}
    for task, repo in TASK_REPOSITORY.items():
        if _installs_from_repository(node, task):
            by_repo.setdefault(repo, []).extend(node.apt_packages[task])
    return {repo: pins for repo, pins in by_repo.items() if pins}


@deploy("Package repository", data_defaults=knobs.defaults("deploy"))
def repository(repo: str, url_template: str, keyring_url_template: str, pins: list[str]) -> None:
    """Add the repository ``repo`` with its keyring; refresh apt lists only when needed for ``pins``. Nothing
    where :func:`package_repositories` set it up earlier in this run."""
    if repo in _set_up_here().get(host.name, ()):
        return
    # apt lists are refreshed when a pin is missing (or the source changed), so a converged node reports zero changes
    _add(repo, url_template, keyring_url_template, refresh=bool(gpu_apt.missing(pins)))


def _add(
    repo: str, url_template: str, keyring_url_template: str, refresh: bool = False, update: bool = True
) -> None:
    gpu_apt.repository(
        name=f"Add the {repo} repository and its signing key",
        repo=repo,
        source=_source(repo, url_template),
        keyring=keyring_path(repo),
        keyring_url=keyring_url_template.format(**repo_vars()),
        refresh=refresh,
        update=update,
    )


def task_repository(task: str) -> None:
    """The repository ``task`` (a key of TASK_REPOSITORY) installs its pins from, added by :func:`repository`;
    nothing where the task installs none from one (a driver from the distribution)."""
    node = current_node()
    repo = TASK_REPOSITORY[task]
    if not _installs_from_repository(node, task):
        return
    url_knob, keyring_knob = KNOBS[repo]
    repository(
        repo=repo,
        url_template=node.repos[url_knob],
        keyring_url_template=node.repos[keyring_knob],
        pins=node.apt_packages[task],
    )


@deploy("Package repositories", data_defaults=knobs.defaults("deploy"))
def package_repositories() -> None:
    """Every repository the node deploy's tasks install from, then one refresh of the apt lists for all of them
    (when one was new or a pin is missing); the tasks' own :func:`repository` calls then do nothing."""
    node = current_node()
    wanted = task_pins(node)
    for repo in wanted:
        url_knob, keyring_knob = KNOBS[repo]
        _add(repo, node.repos[url_knob], node.repos[keyring_knob], update=False)
    sources = {repo: _source(repo, node.repos[KNOBS[repo][0]]) for repo in wanted}
    gpu_apt.lists(
        name=f"Refresh the apt lists for {', '.join(wanted)}",
        sources=sources,
        keyrings=[keyring_path(repo) for repo in wanted],
        pins=[pin for pins in wanted.values() for pin in pins],
    )
    _set_up_here()[host.name] = set(wanted)


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
