"""The lab's big cached files (image archives, packages) reach each lab and host as hard links, not new copies:
`lab up` of three real-kubelet hosts wrote 1.5 GB of image archives into their overlays before (issue #28)."""

from __future__ import annotations

import errno
import os

import pytest

from gpuready.lab import realhost, state


def test_link_or_copy_links_on_one_file_system_and_copies_across(tmp_path, monkeypatch):
    source = tmp_path / "a.oci.tar"
    source.write_bytes(b"layers")
    state.link_or_copy(source, tmp_path / "linked")
    assert (tmp_path / "linked").stat().st_ino == source.stat().st_ino
    state.link_or_copy(source, tmp_path / "linked")  # again: replaces the link, no FileExistsError

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    state.link_or_copy(source, tmp_path / "copied")
    assert (tmp_path / "copied").read_bytes() == b"layers"
    assert (tmp_path / "copied").stat().st_ino != source.stat().st_ino


def test_link_or_copy_raises_other_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        state.link_or_copy(tmp_path / "missing", tmp_path / "target")


def test_staged_images_are_rewritten_only_when_their_bytes_change(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUREADY_LAB_CACHE", str(tmp_path))
    first = realhost._stage({"pause.oci.tar": b"pause", "busybox.oci.tar": b"busybox", "old.oci.tar": b"x"})
    inode = first["pause.oci.tar"].stat().st_ino
    again = realhost._stage({"pause.oci.tar": b"pause", "busybox.oci.tar": b"busybox v2"})
    assert again["pause.oci.tar"].stat().st_ino == inode  # unchanged: the hosts of a lab already up keep it
    assert again["busybox.oci.tar"].read_bytes() == b"busybox v2"
    assert sorted(p.name for p in (tmp_path / "lab-images").iterdir()) == ["busybox.oci.tar", "pause.oci.tar"]


def test_prepare_host_links_the_images_and_binds_them_at_the_images_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUREADY_LAB_CACHE", str(tmp_path / "cache"))
    staged = realhost._stage({"pause.oci.tar": b"pause"})
    host_dir, root = tmp_path / "host", tmp_path / "host" / "merged"
    root.mkdir(parents=True)
    args = realhost.prepare_host(host_dir, root, 7, "10.213.1.7", staged)
    linked = realhost.images_dir(host_dir) / "pause.oci.tar"
    assert linked.stat().st_ino == staged["pause.oci.tar"].stat().st_ino
    assert f"--bind={realhost.images_dir(host_dir)}:{realhost.IMAGES_DIR}" in args
    assert not (root / realhost.IMAGES_DIR.lstrip("/")).exists()  # nothing written into the overlay
