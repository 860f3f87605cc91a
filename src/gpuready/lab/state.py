"""Where the lab keeps everything it creates, and the JSON record of a running lab.

Everything a lab makes lives under one state directory so that `lab down` can prove it left nothing behind. The
base root cache is the one exception: it is expensive (a debootstrap) and identical for every lab, so it has its own
location that test runs share with the default lab.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_LAB_DIR = Path("/var/lib/gpuready-lab")
STATE_VERSION = 1


class LabNotUp(RuntimeError):
    """Raised when a command needs a running lab and there is none."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(f"lab is not up: run `gpuready lab up` (no state in {state_dir})")


def lab_dir() -> Path:
    return Path(os.environ.get("GPUREADY_LAB_DIR") or DEFAULT_LAB_DIR)


def cache_dir() -> Path:
    """The base root cache; shared by every lab on the machine unless GPUREADY_LAB_CACHE says otherwise."""
    return Path(os.environ.get("GPUREADY_LAB_CACHE") or DEFAULT_LAB_DIR / "cache")


@dataclass(frozen=True)
class LabPaths:
    """The layout of one lab's state directory."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def ssh_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def gnupg_home(self) -> Path:
        return self.root / "gnupg"

    @property
    def repo_root(self) -> Path:
        return self.root / "repo"

    @property
    def keyring(self) -> Path:
        return self.repo_root / "keys" / "gpuready-lab-archive-keyring.gpg"

    @property
    def packages_dir(self) -> Path:
        return self.root / "packages"

    @property
    def hosts_dir(self) -> Path:
        return self.root / "hosts"

    def host_dir(self, name: str) -> Path:
        return self.hosts_dir / name

    def machine_dir(self, name: str) -> Path:
        """The host's hardware, outside its root filesystem: bound read-only into the host."""
        return self.host_dir(name) / "machine"

    def console_log(self, name: str) -> Path:
        return self.host_dir(name) / "console.log"

    @property
    def repo_server_log(self) -> Path:
        return self.root / "repo-server.log"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the lock file `path` (made, with its directory, when missing) for the block:
    what builds a cache entry or rewrites shared files runs one at a time, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link to source at target (replacing it), or a copy where they are on different file systems: the
    lab's big cached files (packages, image archives) go into each lab and host without being written again."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM):
            raise
        shutil.copyfile(source, target)


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Readers (the inventory, a concurrent `lab status`) must never see a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_state(paths: LabPaths) -> dict[str, Any] | None:
    try:
        return json.loads(paths.state_file.read_text())
    except FileNotFoundError:
        return None


def require_state(paths: LabPaths) -> dict[str, Any]:
    state = load_state(paths)
    if state is None:
        raise LabNotUp(paths.root)
    return state


def save_state(paths: LabPaths, state: dict[str, Any]) -> None:
    state["version"] = STATE_VERSION
    write_atomic(paths.state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")
