"""The probe of --connection pod (gpuready.conformance.probe): its script run for real with this machine's sh,
the document it prints parsed back to the same outputs the commands give when run directly, the chroot into the
host's root and the GPU Operator's driver root, the per-command timeout, the pod it runs in, and a useful message
for every way its log can be unreadable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuready.conformance import probe
from gpuready.conformance.checks import Output

COMMANDS = [
    "true",
    "printf 'two\\nlines'",
    "echo to stderr >&2; exit 3",
    "cat /nonexistent/file",
    "printf '%s\\n' 'quotes \" and \\\\ backslashes, ünïcode, {\"json\": [1]}'",
    "no-such-command-here",
    "head -c 300000 /dev/zero | tr '\\0' x",  # a big output, as nvidia-smi -q -x of 8 GPUs is
]


def run_probe(commands: list[str], root: str = "/", timeout: str = "60") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUREADY_HOST_ROOT": root, "GPUREADY_COMMAND_TIMEOUT": timeout}
    return subprocess.run(probe.argv(commands), env=env, capture_output=True, text=True, timeout=60)


def direct(command: str) -> Output:
    done = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    return Output(done.returncode, done.stdout, done.stderr)


def test_the_document_gives_back_what_each_command_printed():
    done = run_probe(COMMANDS)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith('{"format":"gpuready-probe/v1"')  # ONE document
    answers = probe.parse(done.stdout, COMMANDS)
    assert list(answers) == COMMANDS
    for command in COMMANDS:
        got, want = answers[command], direct(command)
        assert got.rc == want.rc, command
        assert got.stdout == want.stdout, command
        # the shell names itself in its own messages ("sh: 1: no-such-command-here: not found")
        assert got.stderr.split(":")[-1] == want.stderr.split(":")[-1], command
    assert answers["no-such-command-here"].rc == 127  # what the checks read as "not found"


def test_a_base64_without_w0_is_joined_by_tr(tmp_path):
    """An image whose base64 knows no -w0 (one that wraps at 76 columns and refuses the flag)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    real = shutil.which("base64")
    (bin_ / "base64").write_text(
        f'#!/bin/sh\nfor a; do [ "$a" = -w0 ] && {{ echo "base64: invalid option -- w" >&2; exit 1; }}; done\n'
        f'exec {real} "$@"\n'
    )
    (bin_ / "base64").chmod(0o755)
    env = {**os.environ, "GPUREADY_HOST_ROOT": "/", "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(probe.argv(COMMANDS), env=env, capture_output=True, text=True, timeout=60)
    assert len(done.stdout.splitlines()) == 1, done.stdout[:300]
    answers = probe.parse(done.stdout, COMMANDS)
    assert answers[COMMANDS[-1]].stdout == "x" * 300000 and answers[COMMANDS[1]].stdout == "two\nlines"


def test_render_is_the_inverse_of_parse():
    outputs = [Output(0, "a\n", ""), Output(3, "", "ünïcode\n"), Output(124, "", "")]
    assert list(probe.parse(probe.render(outputs), ["a", "b", "c"]).values()) == outputs


def test_a_command_that_runs_too_long_is_stopped_with_timeouts_exit_status():
    done = run_probe(["sleep 30", "echo after"], timeout="1")
    answers = probe.parse(done.stdout, ["sleep 30", "echo after"])
    assert answers["sleep 30"].rc == 124  # as over SSH (runners.TIMEOUT_RC)
    assert answers["echo after"] == Output(0, "after\n", "")


@pytest.mark.parametrize(
    ("log", "words"),
    [
        ("", "no gpuready-probe/v1 document in its log (it printed: nothing)"),
        ("exec /bin/sh: no such file or directory\n", "it printed: exec /bin/sh: no such file or directory"),
        ('{"format":"gpuready-probe/v1","results":[{"rc":0,"std', "is not JSON"),
        ('{"format":"gpuready-probe/v9","results":[]}\n', "is not gpuready-probe/v1"),
        ('{"format":"gpuready-probe/v1","results":[]}\n', "it answered 0 of 1 commands"),
        (
            '{"format":"gpuready-probe/v1","results":[{"rc":0,"stdout":"!!","stderr":""}]}\n',
            "unreadable result",
        ),
    ],
)
def test_an_unreadable_log_says_what_is_wrong(log, words):
    with pytest.raises(probe.ProbeError, match=r".*") as exc:
        probe.parse(log, ["true"])
    assert words in str(exc.value)


def _tiny_root(base: Path) -> Path:
    """A root with dash and its libraries only: enough for `chroot <root> /bin/sh -c ...`."""
    for path in ["/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]:
        target = base / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    (base / "bin/sh").symlink_to("dash")
    return base


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/lib64/ld-linux-x86-64.so.2").exists(), reason="chroot needs root (x86-64)"
)
def test_commands_run_in_the_host_root_and_nvidia_smi_in_the_gpu_operators_driver_root(tmp_path):
    host = _tiny_root(tmp_path / "host")
    (host / "etc").mkdir()
    (host / "etc/hostname").write_text("gpu-node-7\n")
    commands = ["read name </etc/hostname; echo $name", "nvidia-smi -L"]
    plain = probe.parse(run_probe(commands, root=str(host)).stdout, commands)
    assert plain["read name </etc/hostname; echo $name"] == Output(0, "gpu-node-7\n", "")
    assert plain["nvidia-smi -L"].rc == 127  # no driver on this host
    driver = _tiny_root(host / "run/nvidia/driver")
    smi = driver / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    done = run_probe(commands, root=str(host))
    assert '"driver_root":"/run/nvidia/driver"' in done.stdout
    answers = probe.parse(done.stdout, commands)
    assert answers["nvidia-smi -L"] == Output(0, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n", "")
    assert answers["read name </etc/hostname; echo $name"].stdout == "gpu-node-7\n"


def test_the_probe_pod_reads_the_host_read_only_with_no_token_on_its_node(tmp_path):
    from inventories import write_inventory

    from gpuready.spec import load_fleet

    (node,) = load_fleet(
        write_inventory(
            tmp_path / "inv.py",
            [("gpu-node-1", {"gpu_model": "NVIDIA L4", "gpu_count": 1, "kube_join": False})],
        )
    ).nodes.values()
    pod = probe.probe_pod("probe-1-gpu-node-1", node, ["true"], node.images.probe, 30)
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}
    assert spec["tolerations"] == [{"operator": "Exists"}]  # cordoned, tainted: a probe reaches every node
    assert spec["automountServiceAccountToken"] is False
    assert spec["hostPID"] is True  # systemd answers systemctl only from a peer whose PID it can see
    (container,) = spec["containers"]
    assert container["image"] == "docker.io/library/debian:trixie-slim"
    assert container["command"][:2] == ["/bin/sh", "-c"] and container["command"][3:] == [
        probe.MARKER,
        "true",
    ]
    assert container["securityContext"]["privileged"] is True
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True and mount["mountPath"] == "/host"
    assert spec["volumes"] == [{"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}]
    assert {"name": "GPUREADY_COMMAND_TIMEOUT", "value": "30"} in container["env"]


def test_pod_names_are_dns_labels():
    assert probe.pod_name("gpu-node-1", 2) == "probe-2-gpu-node-1"
    long = probe.pod_name("a" * 80, 1)
    assert len(long) <= 63 and long != probe.pod_name("a" * 79 + "b", 1)
