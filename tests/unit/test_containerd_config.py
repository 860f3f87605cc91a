"""The containerd drop-in rules, on the configs real distributions ship, and against real ``containerd config dump``."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import tomlkit

from gpuready.nvidia.containerd_config import (
    ContainerdConfigError,
    RuntimeSettings,
    nvidia_runtime_of,
    render_drop_in,
    render_main,
)

# /etc/containerd/config.toml as Debian 12's containerd 1.6.20 package ships it
DEBIAN_DEFAULT = """version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""

# containerd 2.x schema 3, with a user's comment and an existing runc root
V3 = """# managed by hand
version = 3

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
Root = "/run/runc-custom"
SystemdCgroup = false
"""

S = RuntimeSettings()


def parsed(text: str) -> dict:
    return tomlkit.parse(text).unwrap()


def test_main_gets_imports_and_systemd_cgroup_and_keeps_the_rest():
    main = parsed(render_main(DEBIAN_DEFAULT, S))
    assert main["imports"] == ["/etc/containerd/conf.d/*.toml"]
    cri = main["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/etc/cni/net.d"}
    assert main["plugins"]["io.containerd.internal.v1.opt"] == {"path": "/var/lib/containerd/opt"}


def test_drop_in_copies_runc_and_the_whole_cri_table():
    drop_in = parsed(render_drop_in(render_main(DEBIAN_DEFAULT, S), S))
    assert drop_in["version"] == 2
    cri = drop_in["plugins"]["io.containerd.grpc.v1.cri"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": "/usr/bin/nvidia-container-runtime"},
    }
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"  # survives containerd < 2.1's per-plugin merge
    assert "default_runtime_name" not in cri["containerd"]
    assert "enable_cdi" not in cri


def test_v3_uses_the_containerd_2_plugin_key_and_keeps_runc_options():
    settings = RuntimeSettings(set_as_default=True, enable_cdi=True)
    main_text = render_main(V3, settings)
    assert main_text.startswith("# managed by hand\nversion = 3\n")
    runc = parsed(main_text)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"Root": "/run/runc-custom", "SystemdCgroup": True}
    cri = parsed(render_drop_in(main_text, settings))["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["Root"] == "/run/runc-custom"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["enable_cdi"] is True


def test_systemd_cgroup_left_alone_when_not_asked():
    main = parsed(render_main(V3, RuntimeSettings(systemd_cgroup=False)))
    runc = main["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is False


def test_second_render_changes_nothing():
    for source in (DEBIAN_DEFAULT, V3, ""):
        once = render_main(source, S)
        assert render_main(once, S) == once
        assert render_drop_in(once, S) == render_drop_in(render_main(once, S), S)


def test_existing_imports_are_kept():
    text = 'version = 2\nimports = ["/etc/containerd/other/*.toml"]\n'
    assert parsed(render_main(text, S))["imports"] == [
        "/etc/containerd/other/*.toml",
        "/etc/containerd/conf.d/*.toml",
    ]


def test_missing_config_becomes_schema_2():
    main = parsed(render_main("", S))
    assert main["version"] == 2
    assert main["imports"] == ["/etc/containerd/conf.d/*.toml"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("version = 4\n", "version 4 is not supported"),
        ('[plugins.cri]\nsandbox_image = "x"\n', "no 'version' key (schema 1"),
        ("version = [", "not valid TOML"),
    ],
)
def test_configs_it_refuses(text, needle):
    with pytest.raises(ContainerdConfigError, match=needle.replace("(", r"\(")):
        render_main(text, S)


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed on this machine")
def test_real_containerd_config_dump_shows_the_handler_with_runc_options(tmp_path):
    settings = RuntimeSettings(drop_in_dir=str(tmp_path / "conf.d"))
    (tmp_path / "conf.d").mkdir()
    main_text = render_main(DEBIAN_DEFAULT, settings)
    (tmp_path / "config.toml").write_text(main_text)
    (tmp_path / "conf.d" / "99-nvidia.toml").write_text(render_drop_in(main_text, settings))
    dump = subprocess.run(
        ["containerd", "--config", str(tmp_path / "config.toml"), "config", "dump"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    nvidia = nvidia_runtime_of(dump)
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
    runc = nvidia_runtime_of(dump, "runc")
    assert runc["options"]["SystemdCgroup"] is True
    assert parsed(dump)["plugins"]["io.containerd.grpc.v1.cri"]["cni"]["bin_dir"] == "/usr/lib/cni"


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd is not installed on this machine")
def test_real_containerd_without_drop_in_has_no_handler(tmp_path):
    (tmp_path / "config.toml").write_text(DEBIAN_DEFAULT)
    dump = subprocess.run(
        ["containerd", "--config", str(tmp_path / "config.toml"), "config", "dump"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert nvidia_runtime_of(dump) is None
