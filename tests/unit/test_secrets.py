"""Secrets are never echoed: one masking function (gpuready.spec.secrets.mask) behind the spec's errors, the
conformance plugin's messages and reports; the join config is written, used and removed by one shell with a trap;
a probe pod's log carries only the keys of containerd's config the host checks read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from interrupts import default_sigint
from test_spec import write_inventory

from gpuready.conformance import probe
from gpuready.conformance.checks import Output
from gpuready.conformance.checks import host as host_checks
from gpuready.deploy.operations import kubeadm
from gpuready.nvidia.containerd_config import cdi_settings, nvidia_runtime_of
from gpuready.spec import SpecError, load_fleet
from gpuready.spec.secrets import MASK, mask

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "conformance" / "data"
TOKEN = "abcdef.0123456789abcdef"
SECRET_HALF = "0123456789abcdef"

# --- the one masking function ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"host node-1: kube_api_endpoint = '{TOKEN}': not host:port", SECRET_HALF),
        (f"--data kube_join_token={TOKEN}", SECRET_HALF),
        ("users:\n- name: admin\n  user:\n    token: eyJhbGciOiJSUzI1NiJ9.eyJzdWIi.c2ln\n", "eyJhbGci"),
        ("    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=\n", "LS0tLS1CRUdJTi"),
        ("  password: hunter2\n", "hunter2"),
        ("{'ssh_password': 'hunter 2', 'gpu_count': 1}", "hunter 2"),
        ('{"token": "s3cr3t-value"}', "s3cr3t-value"),
        ("ssh_password=hunter2", "hunter2"),
        (
            '  [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]\n    password = "pw1"\n',
            "pw1",
        ),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ("kubectl --token s3cr3t get nodes", "s3cr3t"),
    ],
)
def test_mask_hides_tokens_and_credentials(text, secret):
    masked = mask(text)
    assert secret not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "no bootstrap token: set $GPUREADY_JOIN_TOKEN or write it to /etc/gpuready/token",
        "kube_join_token_file = '/etc/gpuready/token'",
        "nvidia_driver_version = '580.95.05': not a pinned version",
        "containerd's cdi_spec_dirs ['/etc/cdi'] do not include /var/run/cdi",
    ],
)
def test_mask_leaves_ordinary_messages_alone(text):
    assert mask(text) == text


def test_the_token_id_is_kept_to_name_the_token():
    assert mask(f"token {TOKEN} expired") == f"token abcdef.{MASK} expired"


def test_a_token_typed_into_the_inventory_is_not_echoed_by_the_spec(tmp_path):
    inventory = write_inventory(tmp_path, kube_api_endpoint=TOKEN, ssh_password="hunter2")
    with pytest.raises(SpecError) as info:
        load_fleet(inventory)
    text = str(info.value) + "\n".join(info.value.problems)
    assert SECRET_HALF not in text and "hunter2" not in text
    assert "kube_api_endpoint" in text  # the key is still named


def test_spec_error_masks_whatever_problem_it_is_given():
    error = SpecError("inv.py", [f"host n: kube_join_token = {TOKEN!r}", "  password: hunter2"])
    assert SECRET_HALF not in str(error) and "hunter2" not in str(error)
    assert all(SECRET_HALF not in p for p in error.problems)


# --- the conformance plugin's messages and reports ----------------------------------------------------------------

LEAKY_SUITE = f"""
import pytest
from gpuready.conformance.plugin import judge
pytestmark = pytest.mark.host

def test_judged(node):
    judge(node, lambda: ["containerd printed password = 'hunter2' and {TOKEN}"])

def test_raises(node):
    raise RuntimeError("kubeconfig says token: eyJhbGciOiJSUzI1NiJ9.payload.sig")

def test_prints(node):
    print("client-key-data: LS0tLS1CRUdJTiBSU0E=")
    assert False, "see the output"

def test_skips(node):
    pytest.skip("node-1: bootstrap {TOKEN} is not valid")
"""


def test_plugin_messages_and_reports_mask_secrets(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY_SUITE)
    inventory = write_inventory(tmp_path)
    reports = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_leaky.py",
         "--inventory", str(inventory), "--connection", "local", "--report-dir", str(reports)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    for secret in ("hunter2", SECRET_HALF, "eyJhbGciOiJSUzI1NiJ9", "LS0tLS1CRUdJTiBSU0E="):
        assert secret not in out, secret
        for report in reports.iterdir():
            assert secret not in report.read_text(), (secret, report.name)
    assert MASK in out
    verdict = json.loads((reports / "verdict.json").read_text())
    assert MASK in json.dumps(verdict)


# --- the join config ----------------------------------------------------------------------------------------------


def test_the_join_is_one_command_with_a_trap():
    script = kubeadm.join_script()
    assert script.count("kubeadm join --config") == 1  # run once (its name recurs in the failure message)
    assert "trap" in script and "rm -f /etc/kubernetes/gpuready/join.yaml" in script
    assert TOKEN not in script  # the token comes on standard input only


@pytest.fixture
def fake_kubeadm(tmp_path):
    """A kubeadm that records the config it was given, then does what $KUBEADM_DOES says (exit N, or sleep)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "kubeadm").write_text(
        '#!/bin/sh\ncp "$3" "$SEEN"\ncase "$KUBEADM_DOES" in sleep) echo started >"$SEEN.started"; sleep 30;;'
        ' *) exit "$KUBEADM_DOES";; esac\n'
    )
    (bin_ / "kubeadm").chmod(0o755)
    return bin_


def run_join(tmp_path: Path, bin_: Path, does: str, stderr: int | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "KUBEADM_DOES": does,
           "SEEN": str(tmp_path / "seen.yaml")}  # fmt: skip
    join_file = tmp_path / "etc" / "join.yaml"
    leftovers = (str(tmp_path / "pki-ca.crt"), str(tmp_path / "bootstrap-kubelet.conf"))
    return subprocess.Popen(
        ["sh", "-c", kubeadm.join_script(str(join_file), leftovers)],
        env=env,
        stdin=subprocess.PIPE,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=default_sigint,  # the Ctrl-C case needs SIGINT deliverable, even when ours is ignored
    )


@pytest.mark.parametrize(("does", "rc"), [("0", 0), ("1", 1)])
def test_the_join_file_is_removed_whether_kubeadm_works_or_fails(tmp_path, fake_kubeadm, does, rc):
    proc = run_join(tmp_path, fake_kubeadm, does)
    proc.communicate(f"token: {TOKEN}\n".encode(), timeout=30)
    assert proc.returncode == rc
    assert f"token: {TOKEN}" in (tmp_path / "seen.yaml").read_text()  # kubeadm read it
    assert not (tmp_path / "etc" / "join.yaml").exists()


def test_a_failed_join_shows_the_kubelets_last_log_lines_and_keeps_kubeadms_status(tmp_path, fake_kubeadm):
    (fake_kubeadm / "journalctl").write_text(
        '#!/bin/sh\necho "args: $*"\necho "E1128 run.go:72] failed to run Kubelet"\n'
    )
    (fake_kubeadm / "journalctl").chmod(0o755)
    proc = run_join(tmp_path, fake_kubeadm, "3", stderr=subprocess.PIPE)
    _, err = proc.communicate(f"token: {TOKEN}\n".encode(), timeout=30)
    assert proc.returncode == 3
    lines = err.decode().splitlines()
    assert lines[0] == "kubeadm join exited 3; the kubelet's last log lines (journalctl -u kubelet):"
    assert lines[1:] == [f"  kubelet: args: -u kubelet -n {kubeadm.KUBELET_LOG_LINES} --no-pager -o cat",
                         "  kubelet: E1128 run.go:72] failed to run Kubelet"]  # fmt: skip
    assert not (tmp_path / "etc" / "join.yaml").exists()
    proc = run_join(
        tmp_path, fake_kubeadm, "0", stderr=subprocess.PIPE
    )  # a join that works shows nothing more
    assert proc.communicate(f"token: {TOKEN}\n".encode(), timeout=30) == (None, b"")


def test_a_join_failing_after_its_deploy_died_still_removes_the_token(tmp_path, fake_kubeadm):
    """The deploy was killed (its SSH channel gone: standard error a pipe nobody reads), then kubeadm fails: the
    shell's message about the failure hits the broken pipe, and the join file must still go (the lab's interrupt
    test caught a version that died of SIGPIPE before its EXIT trap)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = run_join(tmp_path, fake_kubeadm, "1", stderr=write)
        proc.communicate(f"token: {TOKEN}\n".encode(), timeout=30)
    finally:
        os.close(write)
    assert f"token: {TOKEN}" in (tmp_path / "seen.yaml").read_text()
    assert not (tmp_path / "etc" / "join.yaml").exists()
    assert proc.returncode == 1


def test_a_rerun_removes_what_an_interrupted_join_left(tmp_path, fake_kubeadm):
    """kubeadm's preflight refuses the CA and bootstrap kubeconfig a killed join wrote: the join removes them."""
    for name in ("pki-ca.crt", "bootstrap-kubelet.conf"):
        (tmp_path / name).write_text("from the killed join\n")
    proc = run_join(tmp_path, fake_kubeadm, "0")
    proc.communicate(f"token: {TOKEN}\n".encode(), timeout=30)
    assert proc.returncode == 0
    assert not (tmp_path / "pki-ca.crt").exists()
    assert not (tmp_path / "bootstrap-kubelet.conf").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_interrupted_join_leaves_no_token(tmp_path, fake_kubeadm, sig):
    proc = run_join(tmp_path, fake_kubeadm, "sleep")
    assert proc.stdin is not None
    proc.stdin.write(f"token: {TOKEN}\n".encode())
    proc.stdin.close()
    deadline = time.monotonic() + 20
    while not (tmp_path / "seen.yaml.started").exists():
        assert time.monotonic() < deadline, "the fake kubeadm never started"
        time.sleep(0.05)
    assert (tmp_path / "etc" / "join.yaml").exists()  # while kubeadm runs
    assert oct((tmp_path / "etc" / "join.yaml").stat().st_mode & 0o777) == "0o600"
    os.killpg(proc.pid, sig)  # what a Ctrl-C or a lost session sends the command's process group
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert not (tmp_path / "etc" / "join.yaml").exists()


# --- the probe pod's log ------------------------------------------------------------------------------------------

REGISTRY_AUTH = """
        [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]
          auth = "dXNlcjpodW50ZXIy"
          identitytoken = "id-tok-3"
          password = "hunter2"
          username = "robot"
"""
SCHEMA3 = """version = 3
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins]
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '/etc/containerd/certs.d'
  [plugins.'io.containerd.cri.v1.images'.registry.configs.'r.example'.auth]
    password = 'hunter2'

  [plugins.'io.containerd.cri.v1.runtime']
    enable_cdi = true
    cdi_spec_dirs = [
      '/etc/cdi',
      '/var/run/cdi',
    ]
    sandbox_image = 'registry.example.com/pause:3.10'

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'nvidia'

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
          runtime_type = 'io.containerd.runc.v2'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
            BinaryName = '/usr/bin/nvidia-container-runtime'
            SystemdCgroup = true

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            SystemdCgroup = true
"""


def _with_registry_auth(dump: str) -> str:
    """A dump of a site that keeps registry credentials in containerd's config (and a header with one)."""
    configs = '      [plugins."io.containerd.grpc.v1.cri".registry.configs]\n'
    headers = '      [plugins."io.containerd.grpc.v1.cri".registry.headers]\n'
    assert configs in dump and headers in dump
    dump = dump.replace(configs, configs + REGISTRY_AUTH)
    return dump.replace(headers, headers + '        Authorization = ["Basic cm9ib3Q6aHVudGVyMg=="]\n')


DUMPS = {
    "containerd17-nvidia": _with_registry_auth((DATA / "containerd-dump-nvidia.toml").read_text()),
    "containerd17-debian-default": _with_registry_auth(
        (DATA / "containerd-dump-debian-default.toml").read_text()
    ),
    "containerd2-schema3": SCHEMA3,
}


def probe_containerd(tmp_path: Path, dump: str) -> Output:
    """The probe's script run for real (this machine's sh) with a containerd that prints ``dump``."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (tmp_path / "dump.toml").write_text(dump)
    (bin_ / "containerd").write_text(f"#!/bin/sh\ncat {tmp_path / 'dump.toml'}\n")
    (bin_ / "containerd").chmod(0o755)
    command = host_checks.CONTAINERD_COMMAND
    env = {**os.environ, "GPUREADY_HOST_ROOT": "/", "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(probe.argv([command]), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout  # the log holds base64: the decoded answer is checked below
    return probe.parse(done.stdout, [command])[command]


def read_fields(runtime: dict | None) -> tuple | None:
    """What checks.host reads of a runtime's table."""
    if runtime is None:
        return None
    options = runtime.get("options") or {}
    return runtime.get("runtime_type"), options.get("BinaryName"), options.get("SystemdCgroup")


@pytest.mark.parametrize("name", list(DUMPS))
def test_the_probe_log_carries_only_what_the_checks_read(tmp_path, name):
    dump = DUMPS[name]
    assert "hunter2" in dump
    got = probe_containerd(tmp_path, dump)
    for secret in ("hunter2", "dXNlcjpodW50ZXIy", "id-tok-3", "cm9ib3Q6aHVudGVyMg==", "robot", "registry"):
        assert secret not in got.stdout, secret
    whole = Output(0, dump, "")
    # the checks read the same from the cut config as from the whole one
    for runtime in ("nvidia", "runc"):
        assert read_fields(nvidia_runtime_of(got.stdout, runtime)) == read_fields(
            nvidia_runtime_of(dump, runtime)
        )
    assert cdi_settings(got.stdout) == cdi_settings(dump)
    assert host_checks.containerd_nvidia_handler(got) == host_checks.containerd_nvidia_handler(whole)
    assert host_checks.containerd_cdi(got) == host_checks.containerd_cdi(whole)


def test_the_probe_keeps_containerd_s_exit_status_and_other_commands_whole(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "containerd").write_text(
        "#!/bin/sh\necho 'password = \"x\"'\necho 'failed to load' >&2\nexit 3\n"
    )
    (bin_ / "containerd").chmod(0o755)
    commands = [host_checks.CONTAINERD_COMMAND, "echo 'password = \"kept\"'"]
    env = {**os.environ, "GPUREADY_HOST_ROOT": "/", "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(probe.argv(commands), env=env, capture_output=True, text=True, timeout=60)
    answers = probe.parse(done.stdout, commands)
    assert answers[host_checks.CONTAINERD_COMMAND] == Output(3, "", "failed to load\n")
    assert answers[commands[1]].stdout == 'password = "kept"\n'  # only containerd's config is cut
