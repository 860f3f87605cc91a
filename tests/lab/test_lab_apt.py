"""The lab's signed repositories seen by apt on a lab host: signed installs, unsigned and foreign-signed refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuready.lab import aptrepo

pytestmark = pytest.mark.lab
NODE = "gpu-node-2"
# Only the one test repository (no Debian mirror needed); apt-get install must see the same source list as update.
APT = "apt-get -o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts=/etc/apt/gpuready-tests.d"


def build_dummy_deb(outdir: Path, name: str = "gpuready-lab-dummy", version: str = "1.0-1") -> Path:
    root = outdir / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share" / name).mkdir(parents=True)
    (root / "usr/share" / name / "hello").write_text("hello from the lab repository\n")
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: lab <lab@gpuready.invalid>\n"
        "Description: a package for the lab's repository tests\n"
    )
    deb = outdir / f"{name}_{version}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True
    )
    return deb


@pytest.fixture(scope="module")
def test_repos(lab, tmp_path_factory):
    """Three copies of one repository under the lab's served root: lab-signed, unsigned, signed by a stranger."""
    work = tmp_path_factory.mktemp("apt")
    deb = build_dummy_deb(work)
    untrusted = build_dummy_deb(work, "gpuready-lab-untrusted")
    root = Path(lab.state["repo"]["root"])
    lab_signer = aptrepo.ensure_signing_key(lab.paths.gnupg_home)
    stranger = aptrepo.ensure_signing_key(work / "gnupg", uid="someone else <other@example.invalid>")
    layout = aptrepo.REPOS["cuda"]
    for kind, debs, signer in (
        ("signed", [deb], lab_signer),
        ("unsigned", [deb, untrusted], None),
        ("foreign", [deb, untrusted], stranger),
    ):
        aptrepo.build_flat_repo(root / "tests" / kind, debs, layout, signer)
    # The deploy's way: fetch the armored key, dearmor it into /etc/apt/keyrings, signed-by= it.
    lab.ssh(
        NODE,
        f"mkdir -p /etc/apt/keyrings && curl -fsS {lab.state['repo']['keyring_url']} "
        "| gpg --dearmor --yes -o /etc/apt/keyrings/gpuready-lab.gpg",
    )
    yield stranger
    lab.ssh(
        NODE,
        "rm -rf /etc/apt/gpuready-tests.d; apt-get purge -y gpuready-lab-dummy gpuready-lab-untrusted",
        check=False,
    )


def apt_update_from(lab, kind: str) -> subprocess.CompletedProcess[str]:
    url = f"{lab.state['repo']['base_url']}/tests/{kind}/"
    return lab.ssh(
        NODE,
        "mkdir -p /etc/apt/gpuready-tests.d && "
        f"echo 'deb [signed-by=/etc/apt/keyrings/gpuready-lab.gpg] {url} /' > /etc/apt/gpuready-tests.d/t.list && "
        f"{APT} update 2>&1",
        check=False,
    )


def test_install_from_the_signed_repository(lab, test_repos):
    update = apt_update_from(lab, "signed")
    assert update.returncode == 0, update.stdout
    assert "InRelease" in update.stdout and "Err:" not in update.stdout
    install = lab.ssh(
        NODE, f"DEBIAN_FRONTEND=noninteractive {APT} install -y gpuready-lab-dummy 2>&1", check=False
    )
    assert install.returncode == 0, install.stdout
    status = lab.ssh(NODE, "dpkg-query -W -f '${Status} ${Version}' gpuready-lab-dummy").stdout
    assert status == "install ok installed 1.0-1"
    hello = lab.ssh(NODE, "cat /usr/share/gpuready-lab-dummy/hello").stdout
    assert hello == "hello from the lab repository\n"


def test_unsigned_repository_is_refused(lab, test_repos):
    update = apt_update_from(lab, "unsigned")
    assert update.returncode == 100
    base = lab.state["repo"]["base_url"]
    assert f"E: The repository '{base}/tests/unsigned  Release' is not signed." in update.stdout
    assert_not_installable(lab)


def test_repository_signed_by_another_key_is_refused(lab, test_repos):
    stranger = test_repos
    update = apt_update_from(lab, "foreign")
    assert update.returncode == 100
    # gpgv (bookworm's apt) says NO_PUBKEY <key id>; sqv (apt 3: trixie, sid) "Missing key <key id or fingerprint>,
    # which is needed to verify signature" -- the key id is the fingerprint's last 16 hex digits either way
    said = update.stdout.upper()
    assert stranger.fingerprint[-16:].upper() in said and ("NO_PUBKEY" in said or "MISSING KEY" in said), said
    base = lab.state["repo"]["base_url"]
    assert f"E: The repository '{base}/tests/foreign  InRelease' is not signed." in update.stdout, (
        update.stdout
    )
    assert_not_installable(lab)


def assert_not_installable(lab) -> None:
    install = lab.ssh(NODE, f"{APT} install -y gpuready-lab-untrusted 2>&1", check=False)
    assert install.returncode == 100
    assert "E: Unable to locate package gpuready-lab-untrusted" in install.stdout


def test_lab_repositories_have_the_real_layout(lab):
    base = lab.state["repo"]["base_url"]
    for path in (
        "cuda/repos/debian12/x86_64",
        "cuda/repos/debian13/x86_64",  # trixie and sid hosts (gpuready.deploy.context.distro_path)
        "libnvidia-container/stable/deb/amd64",
        "kubernetes/core:/stable:/v1.36/deb",
    ):
        out = lab.ssh(
            NODE,
            f"curl -fsS '{base}/{path}/InRelease' | head -1; "
            f"curl -fsS -o /dev/null -w '%{{http_code}}' '{base}/{path}/Packages.gz'",
        ).stdout
        assert out == "-----BEGIN PGP SIGNED MESSAGE-----\n200", path


def test_emulated_driver_installs_from_the_lab_cuda_repository(lab):
    """Configured as the deploy does for the real CUDA repository (URL template + keyring URL, signed-by=, the pin):
    no nvidia-smi before, the pinned driver installs, and nvidia-smi then reports this host's GPUs."""
    from gpuready.deploy.tasks.driver import PREFERENCES_FILE, driver_preferences
    from gpuready.lab import hardware
    from gpuready.nvidia.smi import parse_list, parse_query_xml

    node = "gpu-node-1"
    data = aptrepo.inventory_data(lab.state["repo"]["base_url"], lab.state["repo"]["keyring_url"])
    url = data["cuda_repo_url"].format(distro="debian12", arch="x86_64")
    assert lab.ssh(node, "command -v nvidia-smi || echo absent").stdout == "absent\n"
    lab.ssh(
        node,
        f"curl -fsS {data['cuda_repo_keyring_url']} | gpg --dearmor --yes -o /etc/apt/keyrings/cuda-lab.gpg "
        f"&& echo 'deb [signed-by=/etc/apt/keyrings/cuda-lab.gpg] {url} /' > /etc/apt/sources.list.d/cuda.list",
    )
    # the deploy's pin: the repository also serves a newer branch, which apt would pick for the dependencies
    pin = driver_preferences("580.178.04-1", "580")
    lab.ssh(node, f"cat > {PREFERENCES_FILE} <<'EOF'\n{pin}EOF")
    apt = "apt-get -o Dir::Etc::sourcelist=/dev/null"  # the lab repository only, no Debian mirror needed
    install = lab.ssh(
        node,
        f"{apt} update && DEBIAN_FRONTEND=noninteractive {apt} install -y "
        "nvidia-driver-cuda=580.178.04-1 2>&1",
        check=False,
    )
    try:
        assert install.returncode == 0, install.stdout
        hw = hardware.read_hardware(lab.paths.machine_dir(node) / "hardware.json")
        listed = parse_list(lab.ssh(node, "nvidia-smi -L").stdout)
        assert [(g.index, g.name, g.uuid) for g in listed] == [
            (g["index"], g["name"], g["uuid"]) for g in hw["gpus"]
        ]
        report = parse_query_xml(lab.ssh(node, "nvidia-smi -q -x").stdout)
        assert report.driver_version == "580.178.04"
        assert report.attached_gpus == len(report.gpus) == 8
        assert {g.uuid for g in report.gpus} == {g["uuid"] for g in hw["gpus"]}
    finally:
        lab.ssh(
            node,
            f"{apt} purge -y 'nvidia-*' 'libnvidia-*' libcuda1; rm -f /etc/apt/sources.list.d/cuda.list "
            f"{PREFERENCES_FILE}",
            check=False,
        )
