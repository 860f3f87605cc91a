"""The CLI and the conformance plugin check what they are given before anything runs, and end cleanly: a closed
pipe ends ``gpuready`` quietly; an unwritable --report-dir, a bad kubeconfig, a bad timeout and an API server that
cannot be reached or refuses the credentials are each ONE usage error before any check runs; ``pyinfra --dry`` of
the add-ons deploy writes nothing. Small subprocesses (the real console script, pytest, pyinfra), no cluster."""

from __future__ import annotations

import http.server
import json
import runpy
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_spec import write_inventory

from gpuready import cli

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GPUREADY = BIN / "gpuready"

# --- a closed pipe -------------------------------------------------------------------------------------------------


def test_plan_into_head_ends_quietly():
    done = subprocess.run(
        ["bash", "-c", f"{GPUREADY} plan inventory/example.py | head -1; echo \"status=${{PIPESTATUS[0]}}\""],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.startswith("Inventory inventory/example.py:")
    assert done.stdout.splitlines()[-1] in ("status=0", "status=141")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.mark.parametrize("argv", [["plan", "inventory/example.py"], ["plan", "--json", "inventory/example.py"],
                                  ["models"], ["knobs"]])  # fmt: skip
def test_every_subcommand_ends_quietly_on_a_pipe_closed_before_it_writes(argv):
    """The reader is gone before the command writes (closed at once; the interpreter takes far longer to start)."""
    proc = subprocess.Popen([GPUREADY, *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


# --- timeouts ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "soon"])
@pytest.mark.parametrize("option", ["--command-timeout", "--pod-timeout"])
def test_discover_refuses_a_timeout_that_is_not_a_positive_number(capsys, option, value):
    with pytest.raises(SystemExit) as info:
        cli.main(["discover", f"{option}={value}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and repr(value) in err


def test_discover_takes_a_positive_timeout():
    args = cli.build_parser().parse_args(["discover", "--command-timeout", "2.5", "--pod-timeout", "30"])
    assert (args.command_timeout, args.pod_timeout) == (2.5, 30.0)


def pytest_run(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


# a suite whose every check leaves a mark when it runs: "nothing ran" is then a missing file
SUITE = """
import pathlib
import pytest
import yaml

def _ran(name):
    pathlib.Path("ran").mkdir(exist_ok=True)
    pathlib.Path("ran", name).touch()

@pytest.mark.host
def test_host(node):
    _ran("host")

@pytest.mark.node
def test_node_object(node, cluster):
    _ran("node-object")

@pytest.mark.node
def test_node_labels(node, cluster):
    _ran("node-labels")

@pytest.mark.workloads
def test_pods(node, cluster):
    _ran("pods")
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_suite.py").write_text(SUITE)
    write_inventory(tmp_path)
    return tmp_path


@pytest.mark.parametrize("value", ["-5", "0", "nan"])
@pytest.mark.parametrize("option", ["--command-timeout", "--pod-timeout"])
def test_the_plugin_refuses_a_timeout_that_is_not_a_positive_number(suite, option, value):
    done = pytest_run(suite, "--inventory", "inv.py", "--connection", "local", f"{option}={value}")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"argument {option}: {value!r}" in done.stderr
    assert not (suite / "ran").exists()


# --- the report directory and the kubeconfig, before anything runs -------------------------------------------------


def test_an_unwritable_report_dir_is_a_usage_error_before_the_run(suite):
    (suite / "a-file").write_text("")
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "--report-dir", "a-file/reports"
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "--report-dir a-file/reports: cannot create it" in done.stderr
    assert not (suite / "ran").exists()  # found before the run, not after it


def test_a_report_dir_that_is_a_file_is_a_usage_error(suite):
    (suite / "a-file").write_text("")
    done = pytest_run(suite, "--inventory", "inv.py", "--connection", "local", "--report-dir", "a-file")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--report-dir a-file: not a directory" in done.stderr
    assert not (suite / "ran").exists()


def test_a_writable_report_dir_is_created_and_gets_the_reports(suite):
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "-m", "host", "--report-dir", "r/x"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (suite / "r" / "x" / "verdict.json").exists()
    assert not [p for p in (suite / "r" / "x").iterdir() if p.name.startswith(".gpuready-write-check")]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        ("clusters: [unclosed\n", "not YAML"),
        ("just a string\n", "not a kubeconfig"),
        (b"\xff\xfe\x00binary", "not a text file"),
    ],
)
def test_a_bad_kubeconfig_is_a_usage_error_before_the_run(suite, content, words):
    kubeconfig = suite / "kubeconfig"
    if isinstance(content, bytes):
        kubeconfig.write_bytes(content)
    elif content is not None:
        kubeconfig.write_text(content)
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "--kubeconfig", str(kubeconfig)
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert f"--kubeconfig {kubeconfig}: {words}" in done.stderr
    assert not (suite / "ran").exists()


def test_a_kubeconfig_env_naming_no_file_is_a_usage_error(suite, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(suite / "nope"))
    done = pytest_run(suite, "--inventory", "inv.py", "--connection", "local")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"$KUBECONFIG {suite / 'nope'}: no such file" in done.stderr


def test_discover_refuses_a_missing_kubeconfig_before_anything_runs(tmp_path, capsys):
    assert cli.main(["discover", "--kubeconfig", str(tmp_path / "nope")]) == 2
    assert f"--kubeconfig {tmp_path / 'nope'}: no such file" in capsys.readouterr().err


# --- the API server: one error -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig_for(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{server}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: abcdef.0123456789abcdef}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


@pytest.fixture
def api_server() -> Iterator[tuple[str, dict[str, int]]]:
    """A plain-HTTP stand-in for kube-apiserver: GET /version answers ``state["status"]`` (200 with a version)."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = state["status"] if self.path.startswith("/version") else 404
            body = json.dumps(
                {"major": "1", "minor": "36", "gitVersion": "v1.36.3"}
                if status == 200
                else {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_api_server_is_one_usage_error_naming_url_and_cause(suite):
    url = f"https://127.0.0.1:{free_port()}"  # on loopback, nothing listens: connection refused
    kubeconfig = kubeconfig_for(suite / "kubeconfig", url)
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "--kubeconfig", str(kubeconfig)
    )
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert (
        f"cannot reach the Kubernetes API at {url}: [Errno 111] Connection refused; no check was run"
        in done.stderr
    )
    assert out.count("Connection refused") == 1  # one error, not one per check
    assert "ERROR at setup" not in out
    assert not (suite / "ran").exists()


@pytest.mark.parametrize(("status", "words"), [(401, "401 Unauthorized"), (403, "403 Forbidden")])
def test_an_api_server_refusing_the_credentials_is_one_usage_error(suite, api_server, status, words):
    url, state = api_server
    state["status"] = status
    kubeconfig = kubeconfig_for(suite / "kubeconfig", url)
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "--kubeconfig", str(kubeconfig)
    )
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert f"the Kubernetes API at {url} refused the kubeconfig's request: {words}" in done.stderr
    assert out.count(words) == 1
    assert "0123456789abcdef" not in out  # the kubeconfig's token is never echoed


def test_a_run_that_needs_no_cluster_does_not_contact_it(suite):
    url = f"https://127.0.0.1:{free_port()}"
    kubeconfig = kubeconfig_for(suite / "kubeconfig", url)
    done = pytest_run(
        suite, "--inventory", "inv.py", "--connection", "local", "--kubeconfig", str(kubeconfig), "-m", "host"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (suite / "ran" / "host").exists()


def test_collect_only_does_not_contact_the_cluster(suite):
    kubeconfig = kubeconfig_for(suite / "kubeconfig", f"https://127.0.0.1:{free_port()}")
    done = pytest_run(
        suite,
        "--inventory",
        "inv.py",
        "--connection",
        "local",
        "--kubeconfig",
        str(kubeconfig),
        "--collect-only",
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- pyinfra --dry writes nothing ----------------------------------------------------------------------------------


def test_loading_the_addons_deploy_writes_no_file(tmp_path, monkeypatch):
    """What ``pyinfra --dry`` does with a deploy file: it loads it (every host's operations are planned) and runs
    nothing. The alert rules are written by an operation, so loading the file writes nothing. (In-process: the
    inventory refuses pyinfra's @local as a host name, so the real CLI would need an SSH host.)"""
    from gpuready.deploy import context
    from gpuready.deploy.addons import ALERTS
    from gpuready.deploy.operations import cluster_objects
    from gpuready.spec import load_fleet

    fleet = load_fleet(write_inventory(tmp_path))
    monkeypatch.setattr(context, "current_node", lambda: fleet.nodes["node-1"])
    monkeypatch.setattr(context, "fleet_for", lambda inventory: fleet)
    for name in ("cluster", "applied", "pruned", "node_labels"):
        monkeypatch.setattr(cluster_objects, name, lambda *a, **k: None)
    planned: list[dict] = []
    monkeypatch.setattr(cluster_objects, "local_file", lambda **kwargs: planned.append(kwargs))
    monkeypatch.setattr("pyinfra.host", type("Host", (), {"inventory": None})())
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(REPO / "deploys" / "cluster_addons.py"))
    assert not (tmp_path / "reports").exists()  # nothing written by loading the file
    (write,) = planned
    assert write["name"] == f"Write the alert rules to {ALERTS}" and write["_run_once"] is True
    rules = yaml.safe_load(write["text"])
    assert rules["kind"] == "PrometheusRule" and rules["spec"]["groups"]


def test_the_alert_rules_file_is_written_only_when_it_differs(tmp_path, monkeypatch):
    """The operation behind it: a second add-ons run with the same rules changes nothing (a lab deploy test saw
    the file rewritten, and so reported as a change, on every run)."""
    from types import SimpleNamespace

    from pyinfra.api import FunctionCommand

    from gpuready.deploy.operations import cluster_objects

    noops: list[str] = []
    monkeypatch.setattr(cluster_objects, "host", SimpleNamespace(noop=noops.append))
    target = tmp_path / "reports" / "gpu-alerts.yaml"
    (command,) = cluster_objects.local_file._inner(str(target), "groups: []\n")
    assert isinstance(command, FunctionCommand) and not target.exists()  # planned, not yet written
    command.function(*command.args, **command.kwargs)
    assert target.read_text() == "groups: []\n"
    assert list(cluster_objects.local_file._inner(str(target), "groups: []\n")) == [] and noops
    assert len(list(cluster_objects.local_file._inner(str(target), "groups: [a]\n"))) == 1


def test_version_is_the_installed_distributions(capsys):
    """``gpuready --version`` says the version pip installed (one number: pyproject's, read back from the
    installed metadata), and the LICENSE file is the licence pyproject declares."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from gpuready.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuready {version('gpuready')}"
    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (
        "Apache License" in (root / "LICENSE").read_text() and "Version 2.0" in (root / "LICENSE").read_text()
    )
