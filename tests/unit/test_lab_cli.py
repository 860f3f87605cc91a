"""`gpuready lab fault --help` names every fault the lab can inject (argparse only: no lab is started)."""

from __future__ import annotations

import contextlib
import io

import pytest

from gpuready.cli import build_parser
from gpuready.lab import cli as lab_cli
from gpuready.lab import faults


def help_text(parse, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize(
    ("parse", "argv"),
    [
        (build_parser().parse_args, ["lab", "fault", "--help"]),  # gpuready lab fault --help
        (lab_cli.main, ["fault", "--help"]),  # python -m gpuready.lab fault --help
    ],
    ids=["gpuready", "python-m"],
)
def test_fault_help_lists_every_fault(parse, argv):
    text = help_text(parse, argv)
    usage, _, listing = text.partition("\nfaults (")
    assert "FAULT" in usage
    # one entry per fault: "  <name>   [per GPU] <description>", continuation lines indented further
    entries = {
        line.split()[0]: line for line in listing.splitlines() if line.startswith("  ") and line[2] != " "
    }
    assert list(entries) == list(faults.FAULTS)
    for fault in faults.FAULTS.values():
        scope = "[per GPU]" if fault.per_gpu else "[host]"
        assert entries[fault.name].split(maxsplit=1)[1].startswith(scope)


@pytest.mark.parametrize(("argv", "poweroff"), [(["down"], True), (["down", "--kill"], False)])
def test_lab_down_powers_hosts_off_unless_told_to_kill_them(monkeypatch, tmp_path, argv, poweroff):
    calls = []
    monkeypatch.setenv("GPUREADY_LAB_DIR", str(tmp_path))
    monkeypatch.setattr(lab_cli.hosts, "down", lambda paths, **kw: calls.append((paths.root, kw)))
    assert lab_cli.main(argv) == 0
    assert calls == [(tmp_path, {"poweroff": poweroff})]
    assert "--kill" in help_text(lab_cli.main, ["down", "--help"])
