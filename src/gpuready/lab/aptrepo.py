"""Signed flat apt repositories laid out like NVIDIA's and Kubernetes', served over HTTP on the lab's network.

The deploy configures repositories as "base URL + keyring". The lab serves the same relative layout as the real
sites under its own base URL and signs it with its own key, so the deploy's repository code runs unchanged: only the
URL and the keyring differ.
"""

from __future__ import annotations

import argparse
import email.utils
import gzip
import hashlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuready.lab import network
from gpuready.lab.state import link_or_copy, write_atomic


@dataclass(frozen=True)
class RepoLayout:
    """Where a repository lives relative to the base URL, and the Release header the real one carries.

    `template` is the same path with the placeholders of the inventory knob `<knob>_url` (group_data/all.py);
    `aliases` are the other paths the template fills in on the lab's hosts, served as the same repository.
    """

    path: str
    template: str
    knob: str
    origin: str
    label: str
    architecture: str
    aliases: tuple[str, ...] = ()


# Same relative paths as the real repositories:
#   https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/  (flat, "./"; debian13 the same)
#   https://nvidia.github.io/libnvidia-container/stable/deb/amd64/               (flat, "./")
#   https://pkgs.k8s.io/core:/stable:/v1.36/deb/                                 (flat, "./")
REPOS: dict[str, RepoLayout] = {
    "cuda": RepoLayout(
        path="cuda/repos/debian12/x86_64",
        template="cuda/repos/{distro}/{arch}",
        # bookworm hosts fill {distro} with debian12, trixie and sid hosts with debian13 (deploy.context)
        aliases=("cuda/repos/debian13/x86_64",),
        knob="cuda_repo",
        origin="NVIDIA",
        label="NVIDIA CUDA",
        architecture="x86_64",
    ),
    "libnvidia-container": RepoLayout(
        path="libnvidia-container/stable/deb/amd64",
        template="libnvidia-container/stable/deb/{deb_arch}",
        knob="nvidia_container_repo",
        origin="libnvidia-container",
        label="libnvidia-container",
        architecture="amd64",
    ),
    "kubernetes": RepoLayout(
        path="kubernetes/core:/stable:/v1.36/deb",
        template="kubernetes/core:/stable:/v{minor}/deb",
        knob="kubernetes_repo",
        origin="obs://build.opensuse.org",
        label="isv",
        architecture="amd64",
    ),
}


def inventory_data(base_url: str, keyring_url: str) -> dict[str, str]:
    """The repository knobs of group_data/all.py pointed at a lab: `cuda_repo_url`, `cuda_repo_keyring_url`, ..."""
    data = {}
    for layout in REPOS.values():
        data[f"{layout.knob}_url"] = f"{base_url}/{layout.template}/"
        data[f"{layout.knob}_keyring_url"] = keyring_url
    return data


KEY_UID = "gpuready lab archive signing key <lab@gpuready.invalid>"


@dataclass(frozen=True)
class Signer:
    gnupg_home: Path
    fingerprint: str

    def gpg(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return _gpg(self.gnupg_home, *args)


def _gpg(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--no-tty", *args],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )


def ensure_signing_key(gnupg_home: Path, uid: str = KEY_UID) -> Signer:
    """A passphrase-less signing key, generated once per GNUPGHOME."""
    gnupg_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if not _secret_fingerprints(gnupg_home):
            _gpg(gnupg_home, "--passphrase", "", "--quick-generate-key", uid, "ed25519", "sign", "never")
        return Signer(gnupg_home, _secret_fingerprints(gnupg_home)[0])
    finally:
        stop_gpg_agent(gnupg_home)


def _secret_fingerprints(home: Path) -> list[str]:
    out = _gpg(home, "--with-colons", "--list-secret-keys").stdout.decode()
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]


def stop_gpg_agent(gnupg_home: Path) -> None:
    """gpg starts an agent (and may put its sockets under /run/user); the lab must leave neither behind."""
    for args in (["--kill", "gpg-agent"], ["--remove-socketdir"]):
        subprocess.run(
            ["gpgconf", "--homedir", str(gnupg_home), *args], capture_output=True, stdin=subprocess.DEVNULL
        )


def export_keyring(signer: Signer, dest: Path) -> tuple[Path, Path]:
    """The public key twice: binary (dest, what `signed-by=` takes as a .gpg file) and ASCII-armored (dest with
    .asc, the form NVIDIA's and pkgs.k8s.io's key URLs serve, so the deploy's dearmor step runs as for real)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    armored = dest.with_suffix(".asc")
    dest.write_bytes(signer.gpg("--export", signer.fingerprint).stdout)
    armored.write_bytes(signer.gpg("--armor", "--export", signer.fingerprint).stdout)
    for path in (dest, armored):
        path.chmod(0o644)
    return dest, armored


def build_flat_repo(repo_dir: Path, debs: list[Path], layout: RepoLayout, signer: Signer | None) -> None:
    """Link (or copy) the .debs into repo_dir and write Packages, Packages.gz, Release (+ InRelease, Release.gpg if
    signed)."""
    repo_dir.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        link_or_copy(deb, repo_dir / deb.name)
    scan = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
        cwd=repo_dir,
        check=True,
        capture_output=True,
    )
    packages = scan.stdout
    (repo_dir / "Packages").write_bytes(packages)
    (repo_dir / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    for name in ("Release", "InRelease", "Release.gpg"):
        (repo_dir / name).unlink(missing_ok=True)
    write_atomic(repo_dir / "Release", release_text(repo_dir, layout))
    if signer is not None:
        try:
            signer.gpg("--local-user", signer.fingerprint, "--digest-algo", "SHA512", "--clearsign",
                       "-o", str(repo_dir / "InRelease"), str(repo_dir / "Release"))  # fmt: skip
            signer.gpg("--local-user", signer.fingerprint, "--digest-algo", "SHA512", "--armor",
                       "--detach-sign", "-o", str(repo_dir / "Release.gpg"), str(repo_dir / "Release"))  # fmt: skip
        finally:
            stop_gpg_agent(signer.gnupg_home)


def release_text(repo_dir: Path, layout: RepoLayout) -> str:
    files = [repo_dir / "Packages", repo_dir / "Packages.gz"]
    lines = [
        f"Origin: {layout.origin}",
        f"Label: {layout.label}",
        f"Architecture: {layout.architecture}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
    ]
    for field, algo in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512")):
        lines.append(f"{field}:")
        for f in files:
            data = f.read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>16} {f.name}")
    return "\n".join(lines) + "\n"


def build_repos(repo_root: Path, debs_by_repo: dict[str, list[Path]], signer: Signer) -> dict[str, Path]:
    """One flat repository per key of REPOS that has packages (and an empty one for those that do not), also served
    at each of its aliases (a relative symlink: the same files, signature included)."""
    built = {}
    for key, layout in REPOS.items():
        repo_dir = repo_root / layout.path
        build_flat_repo(repo_dir, debs_by_repo.get(key, []), layout, signer)
        for alias in layout.aliases:
            link = repo_root / alias
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(repo_dir, link.parent))
        built[key] = repo_dir
    return built


# --- the HTTP server: a child process that `lab up` starts and `lab down` stops by PID ---


def start_server(
    root: Path, log_path: Path, host: str = "127.0.0.1", port: int = 0, netns: str | None = None
) -> tuple[int, int]:
    """Start the server (port 0: a free one); returns (pid, port). The socket is bound here so the port cannot race.

    With netns, the socket is created in that network namespace (the lab's) and the server runs inside it.
    """
    sock = network.listening_socket(host, port, netns)
    port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "gpuready.lab.aptrepo", "--root", str(root), "--fd", str(sock.fileno())]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            network.exec_argv(netns, argv) if netns else argv,
            pass_fds=[sock.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    sock.close()
    return proc.pid, port


def serve(root: Path, fd: int) -> None:
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
    server.socket.close()
    server.socket = socket.socket(fileno=fd)
    server.daemon_threads = True
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="serve a lab apt repository root over HTTP")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--fd", type=int, required=True, help="an already listening socket")
    args = parser.parse_args(argv)
    os.chdir(args.root)
    serve(args.root, args.fd)


if __name__ == "__main__":
    main()
