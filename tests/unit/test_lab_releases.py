"""The lab's Debian releases without booting anything: `--os` parsing and cycling, one base per release, the mirror
for a release the machine's sources do not name, and the CUDA repository served at every release's path."""

from __future__ import annotations

import pytest

from gpuready.cli import build_parser
from gpuready.lab import aptrepo, hosts
from gpuready.lab import cli as lab_cli


def parse_up(*argv: str):
    return build_parser().parse_args(["lab", "up", *argv])


def test_os_is_repeatable_and_defaults_to_none():
    assert parse_up().os is None
    assert parse_up("--os", "bookworm", "--os", "sid").os == ["bookworm", "sid"]


@pytest.mark.parametrize("command", ["up", "base"])
def test_os_refuses_an_unknown_release(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["lab", command, "--os", "buster"])
    assert exit_.value.code == 2
    assert "invalid choice: 'buster'" in capsys.readouterr().err


def test_up_passes_the_releases_on(monkeypatch):
    seen = {}

    def fake_up(paths, **kwargs):
        seen.update(kwargs)
        return {"hosts": {}}

    monkeypatch.setattr(hosts, "up", fake_up)
    assert lab_cli.main(["up", "--nodes", "2", "--os", "sid", "--os", "trixie"]) == 0
    assert seen["releases"] == ["sid", "trixie"]
    assert lab_cli.main(["up"]) == 0
    assert seen["releases"] is None  # hosts.up's default: DEFAULT_RELEASE for every host


def test_base_builds_each_release_named_once(monkeypatch, capsys):
    built = []
    monkeypatch.setattr(
        hosts,
        "ensure_base",
        lambda suite, rebuild=False: (built.append(suite), (hosts.base_path(suite), None))[1],
    )
    assert lab_cli.main(["base", "--os", "sid", "--os", "bookworm", "--os", "sid"]) == 0
    assert built == ["sid", "bookworm"]
    assert lab_cli.main(["base"]) == 0
    assert built[-1] == hosts.DEFAULT_RELEASE == "trixie"
    assert "sid: " in capsys.readouterr().out


def test_releases_cycle_over_the_hosts_like_profiles():
    plan = hosts.plan_hosts(5, ["l4-1", "t4-1"], releases=["bookworm", "trixie", "sid"])
    assert [(h.name, h.profile, h.os) for h in plan] == [
        ("gpu-node-1", "l4-1", "bookworm"),
        ("gpu-node-2", "t4-1", "trixie"),
        ("gpu-node-3", "l4-1", "sid"),
        ("gpu-node-4", "t4-1", "bookworm"),
        ("gpu-node-5", "l4-1", "trixie"),
    ]
    # numbered from elsewhere, the cycle still starts with the first host
    assert [h.os for h in hosts.plan_hosts(2, None, 201, releases=["sid", "bookworm"])] == ["sid", "bookworm"]
    assert {h.os for h in hosts.plan_hosts(3, None)} == {"trixie"}
    with pytest.raises(hosts.LabError, match=r"unknown Debian release\(s\) \['jessie'\]"):
        hosts.plan_hosts(2, None, releases=["trixie", "jessie"])


def test_one_base_per_release_named_by_it(tmp_path, monkeypatch):
    paths = {suite: hosts.base_path(suite, tmp_path) for suite in hosts.RELEASES}
    assert len(set(paths.values())) == 3
    for suite, path in paths.items():
        assert path.parent == tmp_path and path.name.startswith(f"base-{suite}-")
    assert hosts.base_recipe("sid")["suite"] == "sid"
    monkeypatch.setattr(hosts, "BASE_PACKAGES", (*hosts.BASE_PACKAGES, "vim-tiny"))
    assert hosts.base_path("sid", tmp_path) != paths["sid"]


def test_a_new_base_replaces_only_its_own_releases_earlier_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(hosts, "progress", lambda message: None)
    names = [
        "base-trixie-0123456789abcdef",  # the new one
        "base-trixie-1111111111111111",  # an earlier trixie recipe: removed
        "base-trixie-2222222222222222",  # an earlier one a running lab's overlay uses: kept
        "base-sid-3333333333333333",  # another release: kept
        "base-4444444444444444",  # named before bases carried their release (bookworm): removed
    ]
    for name in names:
        (tmp_path / name).mkdir()
    mounts = f"overlay /x overlay rw,lowerdir={tmp_path / names[2]},upperdir=/u,workdir=/w 0 0\n"
    hosts._prune_old_bases(tmp_path / names[0], "trixie", mounts)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[0], names[2], names[3]])


def test_mirror_for_a_release_the_sources_do_not_name():
    entries = [
        ("http://mirror.example/debian/", ["bookworm", "bookworm-updates"]),
        ("http://mirror.example/debian-security", ["bookworm-security"]),
        ("http://other.example/debian", ["sid"]),
    ]
    assert hosts.mirror_for("bookworm", entries) == "http://mirror.example/debian"
    assert hosts.mirror_for("sid", entries) == "http://other.example/debian"
    # trixie is named nowhere: the URI given for another Debian release serves it too
    assert hosts.mirror_for("trixie", entries) == "http://mirror.example/debian"
    assert hosts.mirror_for("trixie", entries[1:2]) == "http://deb.debian.org/debian"
    assert hosts.mirror_for("trixie", []) == "http://deb.debian.org/debian"


def test_mirror_override_applies_to_every_release(monkeypatch):
    monkeypatch.setenv("GPUREADY_LAB_MIRROR", "http://local.mirror/debian")
    assert {hosts.debian_mirror(suite) for suite in hosts.RELEASES} == {"http://local.mirror/debian"}


@pytest.mark.parametrize(
    ("printed", "checks"),
    [("V='false'\n", False), ("V='true'\n", True), ("", True), ("V='0'\n", False)],
)
def test_valid_until_follows_the_machines_apt(monkeypatch, printed, checks):
    monkeypatch.setattr(
        hosts.subprocess, "run", lambda *a, **kw: hosts.subprocess.CompletedProcess(a, 0, printed, "")
    )
    assert hosts.machine_apt_checks_valid_until() is checks


def test_cuda_repository_served_at_every_releases_path(tmp_path):
    built = aptrepo.build_repos(tmp_path, {}, None)  # type: ignore[arg-type]  # unsigned: no gpg needed
    cuda = built["cuda"]
    assert cuda == tmp_path / "cuda/repos/debian12/x86_64"
    alias = tmp_path / "cuda/repos/debian13/x86_64"
    assert alias.is_symlink() and alias.resolve() == cuda.resolve()
    assert (alias / "Release").read_text() == (cuda / "Release").read_text()
    aptrepo.build_repos(tmp_path, {}, None)  # type: ignore[arg-type]  # a rebuild keeps the link
    assert alias.resolve() == cuda.resolve()
    template = aptrepo.REPOS["cuda"].template
    for distro in ("debian12", "debian13"):
        assert (tmp_path / template.format(distro=distro, arch="x86_64")).is_dir()


def test_make_control_plane_makes_every_releases_base_side_by_side_and_reports_a_failure(monkeypatch):
    """`python -m gpuready.lab.cluster.binaries` (make control-plane) starts one debootstrap per release beside the
    Go builds: they run at once (a barrier every release must reach, which one after the other would never pass),
    and one that fails is reported by name without failing the binaries."""
    import os
    import shutil
    import threading

    from gpuready.lab.cluster import binaries

    barrier = threading.Barrier(len(hosts.RELEASES), timeout=30)

    def ensure_base(suite):
        barrier.wait()
        if suite == "sid":
            raise hosts.LabError("debootstrap failed (1): E: Couldn't download packages")
        return hosts.base_path(suite), 12.5

    monkeypatch.setattr(hosts, "ensure_base", ensure_base)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    said: list[str] = []
    started = binaries._start_bases(said.append)
    assert [suite for suite, _ in started] == list(hosts.RELEASES)
    binaries._finish_bases(started, said.append)
    assert not barrier.broken
    assert "the sid base root could not be made now (the lab's start tries again): debootstrap failed (1): " \
        "E: Couldn't download packages" in said, said  # fmt: skip
    assert sum(line.startswith(("bookworm base root built", "trixie base root built")) for line in said) == 2


def test_make_control_plane_leaves_the_bases_alone_without_root(monkeypatch):
    import os

    from gpuready.lab.cluster import binaries

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(hosts, "ensure_base", lambda suite: pytest.fail("no debootstrap without root"))
    assert binaries._start_bases(print) == []


def test_make_control_plane_builds_what_the_lab_hosts_get_and_reports_a_failure(monkeypatch):
    """As root, `make control-plane` builds the hosts' side (hosts.node_side, with the cluster's images) before the
    tests start; a failure is reported by what failed, and the lab's start builds again."""
    import os
    import shutil

    from gpuready.lab.cluster import binaries

    calls: list[tuple[str, bool]] = []

    def node_side(version, progress, cache=None, cluster=True):
        calls.append((version, cluster))
        raise binaries.PrerequisiteError("go build of the device plugin failed")

    monkeypatch.setattr(hosts, "node_side", node_side)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/sbin/{tool}")
    said: list[str] = []
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    binaries._build_node_side("1.36.3", said.append)
    assert calls == [] and said == []
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    binaries._build_node_side("1.36.3", said.append)
    assert calls == [("1.36.3", True)]
    assert said == [
        "the lab hosts' binaries and images could not be built now (the lab's start tries again): "
        "go build of the device plugin failed"
    ]
