"""What the lab's nvidia-smi MIG commands cost (the static tools' ELF, gpuready/lab/silicon/tools).

On one emulated A100 x4 machine in a temporary directory (no lab, no root), times the MIG round trip gpuready's
deploy makes per GPU (``-mig 1``, a reboot, ``mig -cgi 9,14,19,19 -C``, ``mig -lgi``, ``mig -lci``, ``mig -dci``,
``mig -dgi``). With ``--baseline REV`` it times the same through the host entry point of commit REV (extracted
with ``git archive``): ``python3 nvidia_smi.py``, e.g. 5d45058, whose ``nvidia-smi mig`` was Python
(emulator/mig.py), or 293b33f, the last whose nvidia-smi was Python (it handed changes to the static tools), and
prints the ratio. Medians of --runs rounds.
Run: .venv/bin/python bench/emulated_smi.py [--runs 20] [--baseline 293b33f]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from gpuready.lab import hardware
from gpuready.lab.silicon import build

REPO = Path(__file__).resolve().parents[1]
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
ROUND = [
    ["mig", "-i", "0", "-cgi", "9,14,19,19", "-C"],
    ["mig", "-lgi"],
    ["mig", "-lci"],
    ["mig", "-i", "0", "-dci"],
    ["mig", "-i", "0", "-dgi"],
]


def one_round(smi: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    for args in ROUND:
        done = subprocess.run([*smi, *args], env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            sys.exit(f"{' '.join([*smi, *args])} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return time.perf_counter() - start


def machine_env(tmp: Path, tools: str) -> dict[str, str]:
    """The emulated tools' environment for the machine whose hardware file is in ``tmp``, as on a lab host."""
    return {
        "PATH": "/usr/bin:/bin",
        "GPUREADY_LAB_HARDWARE": str(tmp / "hardware.json"),
        "GPUREADY_LAB_STATE": str(tmp / "state" / "state.json"),
        "GPUREADY_LAB_BOOT_ID": "boot-1",
        "GPUREADY_LAB_DRIVER_VERSION": "580.178.04",
        "GPUREADY_LAB_STATIC_TOOLS": tools,
    }


def timed(smi: list[str], tmp: Path, tools: str, runs: int) -> float:
    """Median seconds of one round on a fresh machine in MIG mode."""
    for old in tmp.glob("state*"):
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    env = machine_env(tmp, tools)
    subprocess.run([*smi, "-mig", "1"], env=env, capture_output=True, check=True, timeout=60)
    env["GPUREADY_LAB_BOOT_ID"] = "boot-2"  # the reboot that makes MIG mode current
    return statistics.median(one_round(smi, env) for _ in range(runs))


def baseline_emulator(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src/gpuready/lab/emulator"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src" / "gpuready" / "lab" / "emulator"


def parse_args_and_tools(doc: str, baseline_help: str) -> tuple[argparse.Namespace, str]:
    """The emulated-tool benchmarks' command line (--runs, --baseline) and the static tools' build to time."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline", help=baseline_help)
    args = parser.parse_args()
    return args, str(build.ensure_libraries(lambda _line: None, names=["tools"])["tools"])


def main() -> None:
    args, tools = parse_args_and_tools(__doc__, "a commit whose emulator to time as well")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hardware.write_hardware(tmp / "hardware.json", hardware.make_hardware("a100-80gb-4", 0))
        rows = {"nvidia-smi (static tools)": timed([tools, "nvidia-smi"], tmp, tools, args.runs)}
        if args.baseline:
            old = baseline_emulator(args.baseline, tmp / "baseline")
            rows[f"nvidia_smi.py at {args.baseline}"] = timed(
                [PYTHON, "-E", "-s", str(old / "nvidia_smi.py")], tmp, tools, args.runs
            )
    per = len(ROUND)
    print(f"one MIG round ({per} commands: {'; '.join(' '.join(a) for a in ROUND)}), median of {args.runs}:")
    for name, seconds in rows.items():
        print(f"  {name:<40} {seconds * 1000:8.1f} ms  ({seconds * 1000 / per:6.1f} ms a command)")
    if args.baseline:
        base = rows[f"nvidia_smi.py at {args.baseline}"]
        print(f"  ratio now / baseline: {rows['nvidia-smi (static tools)'] / base:.2f}")


if __name__ == "__main__":
    main()
