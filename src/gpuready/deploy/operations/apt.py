"""apt sources, pinned installs and holds (so unattended upgrades cannot move the driver, toolkit or kubelet
behind the spec), decided from facts the node deploy reads in one round trip."""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt as pyinfra_apt

from gpuready.deploy.facts.apt import AptCandidate, HeldPackages
from gpuready.deploy.facts.host import FileDigest, FileText
from gpuready.deploy.node_facts import node_fact


def list_path(repo: str) -> str:
    """The sources file ``apt.repo`` writes for ``filename=repo``."""
    return f"/etc/apt/sources.list.d/{repo}.list"


def _key_in_place(keyring: str) -> bool:
    return node_fact(FileDigest, path=keyring) is not None


def _source_in_place(repo: str, source: str) -> bool:
    return source in (node_fact(FileText, path=list_path(repo)) or "").splitlines()


def package_names(pins: list[str]) -> list[str]:
    """``name=version`` pins to bare names, as apt-mark wants them."""
    return [pin.split("=", 1)[0] for pin in pins]


@operation()
def repository(
    repo: str, source: str, keyring: str, keyring_url: str, refresh: bool = False, update: bool = True
):
    """
    An apt source ``/etc/apt/sources.list.d/<repo>.list`` with its ``signed-by`` keyring.

    Decided from two facts the node deploy batches (pyinfra's ``apt.key`` and ``apt.repo`` read three); a change
    is made by those operations.

    + repo: the list file's base name
    + source: the ``deb [signed-by=...] URL /`` line
    + keyring: where the dearmored keyring lives
    + keyring_url: where the signing key is downloaded from
    + refresh: run ``apt-get update`` even if the source is in place (a pinned package is missing); it runs
      anyway when the key or the source changed. Never otherwise: apt update always reports a change
    + update: ``False`` leaves the lists to one :func:`lists` after several repositories (the node deploy's)

    **Example:**

    .. code:: python

        apt.repository(name="CUDA repository", repo="cuda", keyring="/etc/apt/keyrings/cuda.gpg",
                       keyring_url="https://.../3bf863cc.pub",
                       source="deb [signed-by=/etc/apt/keyrings/cuda.gpg] https://.../debian12/x86_64/ /")
    """
    list_file = list_path(repo)
    has_key, has_source = _key_in_place(keyring), _source_in_place(repo, source)
    if has_key and has_source and not refresh:
        host.noop(f"{repo}: {list_file} and {keyring} in place")
        return
    if not has_key:
        yield from pyinfra_apt.key._inner(src=keyring_url, dest=keyring)
    if not has_source:
        yield from pyinfra_apt.repo._inner(src=source, filename=repo)
    if update:
        yield from pyinfra_apt.update._inner()


@operation()
def lists(sources: dict[str, str], keyrings: list[str], pins: list[str]):
    """
    One ``apt-get update`` for several repositories added before it with ``update=False``: when any of their keys
    or sources was not in place before this run, or a pin is missing. Never otherwise.

    + sources: each repository's list file base name -> its ``deb`` line
    + keyrings: their keyring paths
    + pins: every ``name=version`` the repositories must serve

    **Example:**

    .. code:: python

        apt.lists(name="Refresh the apt lists", sources={"cuda": "deb [signed-by=...] https://... /"},
                  keyrings=["/etc/apt/keyrings/cuda.gpg"], pins=["nvidia-driver=580.178.04-1"])
    """
    new_keys = [k for k in keyrings if not _key_in_place(k)]
    new_sources = [r for r, line in sources.items() if not _source_in_place(r, line)]
    if not (new_keys or new_sources or missing(pins)):
        host.noop(f"apt lists of {', '.join(sources)} current for their pins")
        return
    yield from pyinfra_apt.update._inner()


@operation()
def installed(packages: list[str], **install_args: Any):
    """
    Packages installed at the pinned version (``name=version``) or at all (a bare name).

    Decided from the installed packages the node deploy batches; the install itself is pyinfra's ``apt.packages``
    with ``install_args`` (``no_recommends``, ``allow_downgrades``, ``extra_install_args``).

    **Example:**

    .. code:: python

        apt.installed(name="Install the driver", packages=["nvidia-driver=580.178.04-1"], no_recommends=True)
    """
    if not missing(packages):
        host.noop(f"{', '.join(packages)} installed")
        return
    yield from pyinfra_apt.packages._inner(packages=packages, **install_args)


@operation()
def pinned(packages: list[str], **install_args: Any):
    """
    ``name=version`` pins installed and held: held packages move only when the inventory moves them.

    The install is pyinfra's ``apt.packages`` with ``install_args``, and only when a pin is missing; the hold is
    ``apt-mark hold`` of the names not held yet.

    **Example:**

    .. code:: python

        apt.pinned(name="Install and hold the driver", packages=["nvidia-driver=580.178.04-1"], no_recommends=True)
    """
    install = bool(missing(packages))
    holds = node_fact(HeldPackages)
    # dpkg drops the hold of a package whose version changes: after an install every name is held again
    todo = (
        package_names(packages)
        if install
        else [name for name in package_names(packages) if name not in holds]
    )
    if not todo:
        host.noop(f"{', '.join(packages)} installed and held")
        return
    if install:
        yield from pyinfra_apt.packages._inner(packages=packages, **install_args)
    yield StringCommand("apt-mark", "hold", *todo)


@operation()
def where_available(package: str, lists_change: bool = False, **install_args: Any):
    """
    ``package`` installed where one of the node's apt repositories has it, and left out (with a warning)
    where none does.

    Decided from the installed packages and ``AptCandidate``, both batched before the run. When the apt lists
    change in this run (a repository added, or refreshed for a missing pin: ``lists_change``) that candidate is
    older than the lists, so the node decides itself, once: ``apt-cache show`` and an install when it answers.
    A converged node (installed, or lists unchanged and no candidate) reports no change.

    + package: the bare package name
    + lists_change: an earlier operation of this run adds or refreshes apt lists

    **Example:**

    .. code:: python

        apt.where_available(name="nvbandwidth where a repository has it", package="nvbandwidth")
    """
    if node_fact(DebPackages).get(package):
        host.noop(f"{package} installed")
        return
    if lists_change:
        install = pyinfra_apt.packages._inner(packages=[package], **install_args)
        commands = [c.get_raw_value() if isinstance(c, StringCommand) else str(c) for c in install]
        yield StringCommand(
            f"if apt-cache show {package} >/dev/null 2>&1; then {' && '.join(commands)}; "
            f"else echo '{package}: no apt repository of this node has it'; fi"
        )
        return
    if node_fact(AptCandidate, package=package) is None:
        logger.warning(
            f"{host.name}: {package}: no apt repository of this node has it, so it is not installed"
        )
        host.noop(f"{package}: no apt repository of this node has it")
        return
    yield from pyinfra_apt.packages._inner(packages=[package], **install_args)


def missing(packages: list[str]) -> list[str]:
    """The ``name=version`` pins (or bare names) not installed, from the batched installed packages."""
    installed = node_fact(DebPackages)
    return [pin for pin in packages if not pin_satisfied(pin, installed)]


def pin_satisfied(pin: str, installed: dict[str, list[str]]) -> bool:
    """Whether ``name=version`` is installed at exactly that version (a bare ``name``: at any version)."""
    name, has_version, version = pin.partition("=")
    versions = installed.get(name) or []
    return version in versions if has_version else bool(versions)
