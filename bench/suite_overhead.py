"""What the conformance suite itself costs per check, with no cluster and no node: the host and gpu layers
(``pytest conformance -m "host or gpu"``, in-process, as bench/probe_scale.py runs them) on N inventory nodes whose
commands are answered instantly from canned outputs.

The outputs are recorded once: the suite runs on one H100 stand-in host (tests/conformance/shims.FakeNode: the
lab's emulated nvidia-smi, stand-in systemctl, journalctl, containerd, nvidia-ctk), every command's answer kept;
then each of the N nodes gets a runner that replays them (a dictionary look-up, no process). What remains is the
suite's own part: collection and parametrization, fixtures, our hooks (gating, recording, masking), the checks'
judging, pytest's terminal output and the fleet report (fleet.xml, verdict.json, report.html, the table).

Prints, per fleet size: the items, wall time split into collection, the test loop, the reports written at session
finish and the terminal summary, and milliseconds per item; then the ratio between the sizes. With ``--profile``
also the top functions by cumulative and by own time (cProfile) of the largest size. Asserts nothing.
Goal (issue 30): the suite's own part under 15 s for 1000 nodes.

Run: .venv/bin/python bench/suite_overhead.py [--sizes 100,1000] [--profile] [--no-report-dir]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "conformance")]
from inventories import write_inventory  # noqa: E402
from shims import GROUP_DATA, fake_node  # noqa: E402

from gpuready.conformance import SUITE_DIR  # noqa: E402
from gpuready.conformance.plugin import SUITE  # noqa: E402
from gpuready.conformance.runners import NodeRunner, TimedLocalBackend  # noqa: E402

PROFILE = "h100-sxm-8"


class Recording(TimedLocalBackend):
    """The stand-in host's commands, run for real once; every answer kept in ``answers``."""

    def __init__(self, timeout: float, env: dict[str, str], answers: dict[str, Any]) -> None:
        super().__init__(timeout, env=env)
        self.answers = answers

    def execute(self, command: str) -> Any:
        self.answers[command] = result = super().execute(command)
        return result


class Canned(TimedLocalBackend):
    """Replays the recorded answers; a command never recorded answers 127 (and is counted in ``missed``)."""

    def __init__(self, answers: dict[str, Any], missed: set[str]) -> None:
        super().__init__(60.0)
        self.answers = answers
        self.missed = missed

    def execute(self, command: str) -> Any:
        answer = self.answers.get(command)
        if answer is None:
            self.missed.add(command)
            return self.result(127, self.encode(command), b"", b"not recorded")
        return answer


class Runners:
    """Sets the run's ``runner_factory`` as soon as the suite exists (after the plugin's pytest_sessionstart)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        session.config.stash[SUITE].runner_factory = self.factory


class Phases:
    """Wall-clock marks: collection done, test loop done, session finish (the reports) done, terminal summary."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.items = 0

    def mark(self, name: str) -> None:
        self.marks[name], self.cpu[name] = time.perf_counter(), time.process_time()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.mark("collected")
        self.items = len(session.items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        try:
            return (yield)
        finally:
            self.mark("ran")

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        try:
            return (yield)
        finally:
            self.mark("finished")

    @pytest.hookimpl(wrapper=True)
    def pytest_terminal_summary(self) -> Any:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return (yield)
        finally:
            self.marks["summary"], self.cpu["summary"] = (
                time.perf_counter() - start,
                time.process_time() - cpu,
            )


def suite_args(inventory: Path, report: Path | None, extra: list[str]) -> list[str]:
    """bench/probe_scale.py's command line (less the cluster), with the suite's own pytest.ini as `gpuready check`
    names it."""
    args = ["-c", str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR), str(SUITE_DIR), "-m", "host or gpu",
            "-q", "-p", "no:cacheprovider", "--tb=no", "--inventory", str(inventory), "--no-header",
            "-o", "console_output_style=classic", *extra]  # fmt: skip
    return [*args, "--report-dir", str(report)] if report is not None else args


def record(root: Path) -> dict[str, Any]:
    """Every command's answer on one H100 stand-in host, from one run of the layers on it."""
    node = fake_node(root / "stand-in", PROFILE)
    node.write()
    node.prepare_driver()
    env = {**__import__("os").environ, **node.env()}
    (root / "stand-in" / "group_data").mkdir(parents=True, exist_ok=True)
    (root / "stand-in" / "group_data" / "all.py").write_text(GROUP_DATA.read_text())
    path = write_inventory(root / "stand-in" / "inventory.py", [("gpu-node-1", node.inventory_data())])
    answers: dict[str, Any] = {}
    factory = Runners(lambda n, connection, timeout: NodeRunner(n.name, Recording(timeout, env, answers)))
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = pytest.main(suite_args(path, None, []), plugins=[factory])
    if code != 0:
        print(out.getvalue()[-3000:])
        raise SystemExit(f"recording on the stand-in host: exit {code}")
    return {"answers": answers, "data": node.inventory_data()}


def run(
    root: Path,
    recorded: dict[str, Any],
    size: int,
    report: bool,
    extra: list[str],
    profile: bool,
    save: Path | None = None,
) -> dict[str, Any]:
    where = root / f"n{size}"
    (where / "group_data").mkdir(parents=True, exist_ok=True)
    (where / "group_data" / "all.py").write_text(GROUP_DATA.read_text())
    names = [f"gpu-node-{i + 1}" for i in range(size)]
    path = write_inventory(where / "inventory.py", [(n, recorded["data"]) for n in names])
    missed: set[str] = set()
    factory = Runners(lambda n, connection, timeout: NodeRunner(n.name, Canned(recorded["answers"], missed)))
    phases = Phases()
    output = io.StringIO()
    profiler = cProfile.Profile() if profile else None
    with contextlib.redirect_stdout(output):
        start, cpu0 = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        code = pytest.main(
            suite_args(path, where / "report" if report else None, extra), plugins=[factory, phases]
        )
        if profiler is not None:
            profiler.disable()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    m, c = phases.marks, {k: v - cpu0 for k, v in phases.cpu.items()}
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"terminal-{size}.txt").write_text(output.getvalue())
        if report:
            for name in ("fleet.xml", "verdict.json", "report.html"):
                (save / f"{size}-{name}").write_bytes((where / "report" / name).read_bytes())
    summary = [line for line in output.getvalue().splitlines() if " passed" in line or " failed" in line]
    result = {
        "nodes": size,
        "items": phases.items,
        "exit": int(code),
        "wall_s": round(wall, 2),
        "collect_s": round(m.get("collected", start) - start, 2),
        "loop_s": round(m.get("ran", start) - m.get("collected", start), 2),
        "finish_s": round(m.get("finished", start) - m.get("ran", start), 2),
        "summary_s": round(m.get("summary", 0.0), 2),
        "ms_per_item": round(1000 * wall / max(phases.items, 1), 3),
        # CPU seconds of this process (less sensitive than wall time to other processes on a busy machine)
        "cpu_s": round(cpu, 2),
        "cpu_collect_s": round(c.get("collected", 0.0), 2),
        "cpu_loop_s": round(c.get("ran", 0.0) - c.get("collected", 0.0), 2),
        "cpu_finish_s": round(c.get("finished", 0.0) - c.get("ran", 0.0), 2),
        "cpu_summary_s": round(phases.cpu.get("summary", 0.0), 2),
        "cpu_ms_per_item": round(1000 * cpu / max(phases.items, 1), 3),
        "outcome": summary[-1].strip() if summary else "?",
        "output_bytes": len(output.getvalue()),
        "not_recorded": sorted(missed),
    }
    if profiler is not None:
        if save is not None:
            profiler.dump_stats(save / f"profile-{size}.prof")
        for order in ("cumulative", "tottime"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(40)
            print(f"--- cProfile, {size} nodes, by {order} ---")
            print("\n".join(text.getvalue().splitlines()[6:]))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument(
        "--no-report-dir", action="store_true", help="without --report-dir (no fleet.xml etc.)"
    )
    parser.add_argument("--save", type=Path, help="keep each size's terminal output and report files here")
    parser.add_argument(
        "pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -p no:terminal"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="gpuready-suite-overhead-") as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        recorded = record(root)
        print(f"recorded {len(recorded['answers'])} commands on one {PROFILE} stand-in host in "
              f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        results = []
        for size in sizes:
            r = run(root, recorded, size, not args.no_report_dir, args.pytest_args,
                    args.profile and size == sizes[-1], args.save)  # fmt: skip
            results.append(r)
            print(
                f"{size:5d} nodes, {r['items']:6d} items: wall {r['wall_s']:7.2f} s = {r['ms_per_item']:.3f} ms/item "
                f"(collect {r['collect_s']:.2f}, test loop {r['loop_s']:.2f}, reports at session finish "
                f"{r['finish_s']:.2f}, terminal summary {r['summary_s']:.2f}); {r['outcome']}; "
                f"{r['output_bytes']} bytes of terminal output",
                flush=True,
            )
            print(f"{'':5s}  CPU of this process: {r['cpu_s']:7.2f} s = {r['cpu_ms_per_item']:.3f} ms/item (collect "
                  f"{r['cpu_collect_s']:.2f}, test loop {r['cpu_loop_s']:.2f}, reports {r['cpu_finish_s']:.2f}, "
                  f"terminal summary {r['cpu_summary_s']:.2f})", flush=True)  # fmt: skip
            if r["not_recorded"]:
                print(f"  not recorded (answered 127): {r['not_recorded']}")
        if len(results) > 1:
            a, b = results[0], results[-1]
            print(f"ratio {b['nodes']}/{a['nodes']} nodes: items x{b['items'] / max(a['items'], 1):.1f}, "
                  f"wall x{b['wall_s'] / a['wall_s']:.1f}, ms/item x{b['ms_per_item'] / a['ms_per_item']:.2f}, "
                  f"CPU x{b['cpu_s'] / a['cpu_s']:.1f}")  # fmt: skip
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
