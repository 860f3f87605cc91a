"""pytest plugin of the conformance suite: options, per-node parametrization, layer gating and the fleet report.

Registered under the ``pytest11`` entry point; ``gpuready check --inventory ...`` runs it on the suite the package
ships (:data:`gpuready.conformance.SUITE_DIR`), from any directory.
Nothing here connects to a host or a cluster at import or ``--help`` time: the inventory is loaded (pure Python,
no connection; ``load_fleet`` keeps pyinfra's gevent patching out of this process) when the session starts, and a
node is
contacted when its layer's commands first run.

A conformance test is a test function carrying one layer marker (``host``, ``gpu``, ``node``, ``workloads``,
``metrics``, usually as a module ``pytestmark``) and taking the ``node`` argument; the plugin parametrizes it
with every selected node of the fleet. Adding a layer's tests is adding a file: gating and reporting key on the
marker only. A ``--site DIR``'s test files are conformance tests too, of the "site" layer, without a marker.

Order and gating: collected items are sorted by layer (stable, so file and node order is kept within a layer),
globally rather than per node. A layer then runs for the whole fleet before the next one starts, which is what
the fleet-wide layers need: the workloads layer creates one pod per node *at once* and must know, before it
starts, which nodes are still in the running. When a check of a layer fails on a node, every later layer's
checks on that node are skipped with "skipped: <layer> layer failed on <node>: <first failure>". Before a
layer's first check, a layer module may have the suite run that layer's commands on every node still in the
running at once (:meth:`Suite.prefetch`); the checks then read cached outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from gpuready.conformance import report as fleet_report
from gpuready.conformance.checks import CannotCheck, Output
from gpuready.conformance.report import LAYERS, FleetResults, Measurement

if TYPE_CHECKING:
    from gpuready.spec import NodeSpec

LAYER_HELP = {
    "host": "host layer: driver, services, container runtime (over SSH or local)",
    "gpu": "gpu layer: GPU inventory, health and configuration",
    "node": "node layer: the Kubernetes Node object (allocatable, labels, taints)",
    "workloads": "workloads layer: GPU pods on every node",
    "metrics": "metrics layer: dcgm-exporter series per GPU",
    "policy": "policy layer: cluster policies as behaviour (taints, product affinity, priority and preemption, GPU quotas)",
    "diag": "diag layer: copy bandwidth against per-model floors and DCGM diagnostics",
    "site": "site layer: a --site directory's own checks (test_*.py taking `host` or `node`), run on every node",
}
DEFAULT_TIMEOUT = 60.0
NO_INVENTORY = "no --inventory given: the conformance suite needs the fleet's inventory (gpuready check --inventory inventory/<env>.py, or --discover)"


@dataclass
class Suite:
    """Everything one run of the suite shares: the selected nodes, options, runners, gating and results."""

    nodes: list[NodeSpec]
    inventory: str
    connection: str
    timeout: float
    # --pod-timeout, else the inventory's pod_timeout (the largest of the nodes)
    pod_timeout: float
    kubeconfig: str | None
    kube_context: str | None
    report_dir: str | None
    results: FleetResults
    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    runner_factory: Callable[[Any, str, float], Any] | None = None
    report_paths: list[Any] = field(default_factory=list)
    _runners: dict[str, Any] = field(default_factory=dict)
    _facts: dict[tuple[str, str], Any] = field(default_factory=dict)
    _prefetched: set[str] = field(default_factory=set)
    # the node-side layers this run selects (-m): what a probe pod gathers (see selected_probe_layers)
    probe_layers: tuple[str, ...] = ("host", "gpu")
    cluster: Any = None  # gpuready.kube.Cluster, connected on first use by the Kubernetes layers
    workloads: Any = None  # gpuready.conformance.workloads.Workloads: the run's namespace and pods
    probes: Any = None  # gpuready.conformance.probe.ProbeFleet: --connection pod's probe pods and namespace
    restore_signal: Callable[[], None] | None = None
    notes: list[str] = field(default_factory=list)
    discovery: Any = (
        None  # --discover: gpuready.spec.discovery.Discovery (the nodes' problems by kind, pools)
    )

    def connect(self) -> Any:
        """The cluster of --kubeconfig/--kube-context (else the inventory's ``kubeconfig`` data, else the
        client's defaults), connected once per run: one ``GET /version`` bounded by --command-timeout, as every
        API request of the run is."""
        if self.cluster is None:
            from gpuready import kube

            kubeconfig = self.kubeconfig or next(
                (n.knobs["kubeconfig"] for n in self.nodes if n.knobs["kubeconfig"]), None
            )
            self.cluster = kube.connect(kubeconfig, self.kube_context, timeout=self.timeout)
        return self.cluster

    def cleanup(self) -> None:
        """Delete the run's namespace (idempotent): after success, failure, timeout and Ctrl-C alike."""
        if self.workloads is not None:
            workloads, self.workloads = self.workloads, None
            with contextlib.suppress(Exception):  # an unreachable cluster must not hide the run's outcome
                workloads.delete()
        if self.probes is not None:
            with contextlib.suppress(Exception):
                self.probes.delete()

    def cached(self, node: Any, key: str, compute: Callable[[], Any]) -> Any:
        """Facts derived from a node's outputs, computed once per node per run (checks share them)."""
        if (node.name, key) not in self._facts:
            self._facts[(node.name, key)] = compute()
        return self._facts[(node.name, key)]

    def runner(self, node: Any) -> Any:
        if node.name not in self._runners:
            from gpuready.conformance import runners

            factory = self.runner_factory or runners.make_runner
            if self.connection == "pod" and self.runner_factory is None:
                factory = self.probe_fleet().runner
            self._runners[node.name] = factory(node, self.connection, self.timeout)
        return self._runners[node.name]

    def probe_fleet(self) -> Any:
        """--connection pod: the run's probe pods (gpuready.conformance.probe), on the suite's cluster."""
        if self.probes is None:
            from gpuready.conformance.probe import ProbeFleet

            self.probes = ProbeFleet(self.nodes, self.connect, self.timeout, self.pod_timeout)
        return self.probes

    def gated(self, node: Any, layer: str) -> str | None:
        """The skip reason when an earlier layer failed on the node, else None."""
        for earlier in LAYERS[: LAYERS.index(layer)]:
            message = self.failures.get((node.name, earlier))
            if message is not None:
                return f"skipped: {earlier} layer failed on {node.name}: {message}"
        return None

    def probe_commands(self, node: Any, also: str | None = None) -> list[str]:
        """Every command the run's node-side layers (host, gpu: :data:`PROBE_LAYERS`; and ``also``) run on
        ``node``, in order, once each: what one probe pod per node gathers with ``--connection pod``."""
        layers = [x for x in PROBE_LAYERS if x in self.probe_layers or x == also]
        return list(dict.fromkeys(c for layer in layers for c in PROBE_LAYERS[layer](node)))

    def prefetch(
        self, layer: str, commands_of: Callable[[Any], list[str]] | None = None, workers: int = 32
    ) -> None:
        """Run a layer's commands (``commands_of``; :data:`PROBE_LAYERS` for host and gpu) on every node still in
        the running at once (each node's in order), so the layer costs the slowest node's time, not the sum over
        the fleet; the checks then read the cache (the commands testinfra's modules run, e.g. ``systemctl
        is-active kubelet``, are cached the same way). With ``--connection pod`` the first of the run's host and
        gpu layers gathers both, in one probe pod per node: one round of pods per run, not one per layer (a node
        a later layer gates out had its answers gathered for nothing, which costs less than a second round);
        another layer (diag) gets a round of its own."""
        from concurrent.futures import ThreadPoolExecutor

        from gpuready.conformance.runners import ConnectionFailed

        if layer in self._prefetched:
            return
        self._prefetched.add(layer)
        if commands_of is None:
            commands_of = PROBE_LAYERS[layer]
        if self.connection == "pod" and self.runner_factory is None:  # one probe pod per node, all at once
            if layer in PROBE_LAYERS:
                self._prefetched.update(self.probe_layers)
                wanted = {
                    n.name: self.probe_commands(n, layer) for n in self.nodes if self.gated(n, layer) is None
                }
            else:
                wanted = {
                    n.name: ["true", *commands_of(n)] for n in self.nodes if self.gated(n, layer) is None
                }
            self.probe_fleet().gather(wanted)
            return
        jobs = [(self.runner(n), commands_of(n)) for n in self.nodes if self.gated(n, layer) is None]

        def run_all(job: tuple[Any, list[str]]) -> None:
            runner, commands = job
            for command in commands:
                try:
                    runner.run(command)
                except ConnectionFailed:
                    return  # the node's connection check reports it

        if jobs:
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
                list(pool.map(run_all, jobs))

    def close(self) -> None:
        self.cleanup()
        if self.restore_signal is not None:
            self.restore_signal()
            self.restore_signal = None
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()


def _host_commands(node: NodeSpec) -> list[str]:
    from gpuready.conformance.checks import host

    return ["true", *host.commands(node)]


def _gpu_commands(node: NodeSpec) -> list[str]:
    from gpuready.conformance.checks import gpu, host

    return [host.NVIDIA_SMI_COMMAND, *gpu.commands(node)]


# The layers whose checks read commands run on the node (over SSH, here, or in a probe pod), and those commands.
PROBE_LAYERS: dict[str, Callable[[NodeSpec], list[str]]] = {"host": _host_commands, "gpu": _gpu_commands}


def selected_probe_layers(markexpr: str) -> tuple[str, ...]:
    """The node-side layers a ``-m`` expression selects (every test carries one layer marker), so that a probe
    pod gathers nothing a run of ``-m node`` does not read. No expression: all of them."""
    return tuple(layer for layer in PROBE_LAYERS if marks_select(markexpr, {layer}))


SUITE = pytest.StashKey[Suite]()


TESTINFRA = "pytest11.testinfra"  # pytest-testinfra's entry point name


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("gpuready", "gpuready conformance")
    group.addoption(
        "--inventory",
        default=None,
        help="pyinfra inventory file describing the fleet (e.g. inventory/lab.py); without it the suite skips",
    )
    group.addoption(
        "--discover",
        action="store_true",
        default=False,
        help="instead of --inventory: expectations from the cluster itself (GPU feature discovery's labels, the "
        "device plugin's config, the probes' nvidia-smi), checked to agree with each other (needs a kubeconfig)",
    )
    group.addoption(
        "--expect-driver",
        default=None,
        metavar="VERSION",
        help="with --discover: the driver every pool must run",
    )
    group.addoption(
        "--expect-toolkit",
        default=None,
        metavar="VERSION",
        help="with --discover: the NVIDIA Container Toolkit every pool must run",
    )
    group.addoption("--kubeconfig", default=None, help="kubeconfig for the node/workloads/metrics layers")
    group.addoption("--kube-context", default=None, help="kubeconfig context (default: the current one)")
    group.addoption(
        "--data",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override inventory data as pyinfra's --data does (e.g. nvidia_driver_version=580.178.04), to check "
        "the fleet against a change before or while it is deployed; repeatable",
    )
    group.addoption(
        "--nodes",
        default=None,
        help="comma-separated node names to check (default: every node of the inventory)",
    )
    # pytest-testinfra (installed with gpuready) also defines --connection, where "ssh" and "local" mean what
    # they mean here. Two plugins cannot both add it, and entry points load in no fixed order: register
    # testinfra first, then share its option (values are checked when the session starts).
    if pluginmanager.get_plugin(TESTINFRA) is None and not pluginmanager.is_blocked(TESTINFRA):
        pluginmanager.load_setuptools_entrypoints("pytest11", name=TESTINFRA)
    # testinfra's --connection (same flag, same dest) is shared, not added twice: pytest 9.2 refuses a second one
    # with ValueError, 9.0 with argparse's ArgumentError, 8.x only when it builds the parser (seen with the pytest
    # of a GPU machine's image), so look first
    if not any("--connection" in option.names() for group in parser._groups for option in group.options):
        group.addoption(
            "--connection",
            default=None,
            help="how the host and gpu layers reach a node: ssh (inventory ssh_* data, strict host keys; the "
            "default), local (this machine, e.g. a GPU CI runner) or pod (a probe pod per node through the "
            "cluster: only a kubeconfig needed)",
        )
    from gpuready.arguments import seconds

    group.addoption(
        "--command-timeout",
        default=DEFAULT_TIMEOUT,
        type=seconds,
        metavar="SECONDS",
        help=f"seconds to wait for one command on a node or one API request (default {DEFAULT_TIMEOUT:g})",
    )
    group.addoption(
        "--pod-timeout",
        default=None,
        type=seconds,
        metavar="SECONDS",
        help="seconds the suite's pods (workloads, metrics, policy) may take from creation to their end "
        "(default: the inventory's pod_timeout)",
    )
    group.addoption(
        "--non-disruptive",
        action="store_true",
        default=False,
        help="run only the layers that leave running workloads alone: host, gpu and node (the same as -m "
        "'host or gpu or node'); workloads, metrics, policy and diag start GPU pods or load the GPUs",
    )
    group.addoption(
        "--site",
        action="append",
        default=[],
        metavar="DIR",
        help="also run the test_*.py files of DIR, your own checks, once per node like the layers (their `host` "
        "is the node, their results the node's 'site' layer; gated by the layers before it); repeatable",
    )
    group.addoption(
        "--report-dir",
        default=None,
        help="write the fleet report here: fleet.xml (junit, one suite per node), verdict.json, report.html",
    )
    from gpuready.conformance import verdict_back

    verdict_back.add_options(group)  # --write-back, --taint-failed, --taint-max-fraction, --metrics-file


class _NodeHost:
    """The ``host`` fixture of a suite run: the node under test, not pytest-testinfra's ``--hosts`` entry.

    Registered only when the run has an inventory (or ``--discover``), after testinfra's plugin, so it is the
    ``host`` every test of the run sees: the layer files and a ``--site`` directory's checks alike. Any other
    pytest run keeps testinfra's own fixture."""

    @pytest.fixture
    def host(self, node: Any, gpuready_suite: Suite) -> Any:
        return node_host(node, gpuready_suite)


def _run_suite(config: pytest.Config) -> Any:
    """The ``gpuready_suite`` fixture of a run with an inventory (or ``--discover``), reading the run's config from
    a closure: the module's fixture of that name takes ``request``, and every check depends on it, so "request"
    would be in every check's fixture closure, for which pytest builds a FixtureDef (and inspects a signature)
    several times per check (4% of the suite's time on 1000 nodes). A plain function, not a method: pytest warns
    about session-scoped fixtures bound to an instance."""

    @pytest.fixture(scope="session", name="gpuready_suite")
    def gpuready_suite() -> Suite:
        suite = config.stash.get(SUITE, None)
        if suite is None:
            pytest.skip(NO_INVENTORY)
        return suite

    # A module as the plugin object: pytest 9.0 keeps plugin objects in a set (hashable needed), and reads a
    # module's fixtures from the module itself, not its type
    from types import ModuleType

    holder = ModuleType("gpuready_run_suite")
    holder.gpuready_suite = gpuready_suite  # type: ignore[attr-defined]
    return holder


def _site_dirs(config: pytest.Config) -> list[Path]:
    """The ``--site`` directories, resolved; one that is not a directory is a usage error naming it."""
    dirs = []
    for given in config.getoption("site") or []:
        path = Path(given).expanduser().resolve()
        if not path.is_dir():
            raise pytest.UsageError(f"--site {given}: not a directory (a directory of test_*.py site checks)")
        dirs.append(path)
    return dirs


def pytest_configure(config: pytest.Config) -> None:
    for layer in LAYERS:
        config.addinivalue_line("markers", f"{layer}: {LAYER_HELP[layer]}")
    config.stash[_SITE_DIRS] = _site_dirs(config)
    config.args.extend(str(d) for d in config.stash[_SITE_DIRS] if str(d) not in config.args)
    if config.getoption("inventory") or config.getoption("discover"):
        config.pluginmanager.register(_NodeHost(), "gpuready-node-host")
        config.pluginmanager.register(_run_suite(config), "gpuready-run-suite")
    config.addinivalue_line(
        "markers", "discover: a check of --discover's expectations (deselected without it)"
    )
    from gpuready.conformance.progress import ProgressPlugin

    config.pluginmanager.register(ProgressPlugin(), "gpuready-progress")  # lines while pods are awaited


def pytest_sessionstart(session: pytest.Session) -> None:
    """Load and validate the inventory before anything is collected or contacted; a bad one is a usage error, as
    are a --report-dir the run could not write its reports to and a kubeconfig that is missing or unreadable."""
    config = session.config
    if not (config.getoption("discover") or config.getoption("inventory")):
        return
    _check_arguments(config, config.getoption("kubeconfig"))
    if config.getoption("discover"):
        from gpuready.conformance.discovered import start_suite

        config.stash[SUITE] = start_suite(config, new_suite)
        return
    inventory = config.getoption("inventory")
    import os

    from gpuready.spec import SpecError, load_fleet, parse_data_overrides

    names = [n.strip() for n in (config.getoption("nodes") or "").split(",") if n.strip()]
    connection = config.getoption("connection") or "ssh"
    from gpuready.conformance.runners import CONNECTIONS

    if connection not in CONNECTIONS:
        raise pytest.UsageError(
            f"--connection {connection}: the conformance suite supports {' or '.join(CONNECTIONS)}"
        )
    try:
        overrides = parse_data_overrides(config.getoption("data"))
    except ValueError as exc:
        raise _usage_error(exc) from None
    try:
        fleet = load_fleet(inventory, overrides)
        nodes = fleet.select(names)
    except SpecError as exc:
        raise _usage_error(exc) from None
    if not config.getoption("kubeconfig"):  # the inventory's, the one the run uses without --kubeconfig
        _check_arguments(config, next((n.knobs["kubeconfig"] for n in nodes if n.knobs["kubeconfig"]), None),
                         "the inventory's kubeconfig")  # fmt: skip
    from gpuready.arguments import in_pod

    if connection == "pod" and not (
        config.getoption("kubeconfig")
        or config.getoption("kube_context")
        or os.environ.get("KUBECONFIG")
        or any(n.knobs["kubeconfig"] for n in nodes)
        or in_pod()
    ):
        raise pytest.UsageError(
            "--connection pod runs the host and gpu layers in probe pods through the cluster: give it one "
            "(--kubeconfig, --kube-context, $KUBECONFIG, `kubeconfig` in the inventory's data, or run the suite "
            "in a pod with a service account)"
        )
    if connection == "local" and len(nodes) > 1:
        raise pytest.UsageError(
            f"--connection local checks this machine as one node, but {len(nodes)} nodes are selected: "
            f"add --nodes <this machine's name> (the inventory has {', '.join(n.name for n in nodes)})"
        )
    config.stash[SUITE] = new_suite(
        config,
        nodes,
        inventory,
        connection,
        config.getoption("kubeconfig"),
        float(config.getoption("pod_timeout") or max(n.knobs["pod_timeout"] for n in nodes)),
    )


def new_suite(
    config: pytest.Config,
    nodes: list[NodeSpec],
    inventory: str,
    connection: str,
    kubeconfig: str | None,
    pod_timeout: float,
) -> Suite:
    """The run's one :class:`Suite`, built here for both sources of expectations (``--inventory`` above,
    ``--discover`` in :func:`gpuready.conformance.discovered.start_suite`, which fills its nodes in later): the
    options every run shares, the SIGTERM handler and the probe layers ``-m`` selects."""
    suite = Suite(
        nodes=nodes,
        inventory=inventory,
        connection=connection,
        timeout=float(config.getoption("command_timeout")),
        pod_timeout=pod_timeout,
        kubeconfig=kubeconfig,
        kube_context=config.getoption("kube_context"),
        report_dir=config.getoption("report_dir"),
        results=FleetResults([n.name for n in nodes], inventory),
    )
    suite.restore_signal = _interrupt_on_sigterm()
    suite.probe_layers = selected_probe_layers(config.getoption("markexpr") or "")
    return suite


def _usage_error(problem: object) -> pytest.UsageError:
    """A usage error whose message went through the one masking function (gpuready.spec.secrets.mask)."""
    from gpuready.spec.secrets import mask

    return pytest.UsageError(mask(problem))


def _check_arguments(config: pytest.Config, kubeconfig: str | None, named_by: str = "--kubeconfig") -> None:
    """Before anything runs: --report-dir can be created and written to (else the reports of a whole run would be
    lost at its end), and the kubeconfig exists, is readable and parses (it is not yet contacted)."""
    from gpuready.arguments import kubeconfig_problem, report_dir_problem

    report_dir = config.getoption("report_dir")
    from gpuready.conformance.verdict_back import option_problem

    problem = (report_dir and report_dir_problem(report_dir)) or kubeconfig_problem(kubeconfig, named_by)
    problem = problem or option_problem(config)
    if problem:
        raise _usage_error(problem)


def pytest_collection_finish(session: pytest.Session) -> None:
    """When a selected check needs the cluster (or --connection pod reaches nodes through it), connect once, now:
    an API server that is unreachable, or refuses the kubeconfig's credentials, is ONE usage error naming the URL
    and the cause, not an identical setup error per check."""
    config = session.config
    suite = config.stash.get(SUITE, None)
    if suite is None or config.getoption("collectonly") or suite.cluster is not None:
        return
    needs = suite.connection == "pod" and any(layer_of(i) in suite.probe_layers for i in session.items)
    if not (needs or any(layer_of(i) and "cluster" in getattr(i, "fixturenames", ()) for i in session.items)):
        return
    from gpuready.kube import KubeError

    try:
        suite.connect()
    except KubeError as exc:
        raise _usage_error(f"{exc}; no check was run") from None


def _interrupt_on_sigterm() -> Callable[[], None] | None:
    """A CI job that is cancelled gets SIGTERM: turn it into Ctrl-C, so pytest tears the session down (and the
    run's namespace is deleted) instead of dying with pods left behind."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return None  # someone else handles it

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


_LAYER = pytest.StashKey[str | None]()
_SITE_DIRS = pytest.StashKey[list[Path]]()
# a check's setup time (its fixtures: the probe round or the pods the first check of a layer waits for), added to
# its call time in verdict.json, as ``pytest --durations`` counts both: without it a run of 27 s showed 8 s of checks
_SETUP_SECONDS = pytest.StashKey[float]()


def _layer_of(node: Any, path: Path, config: pytest.Config) -> str | None:
    """The layer marker of a test, or "site" for an unmarked test of a ``--site`` directory."""
    marked = next((x for x in LAYERS if node.get_closest_marker(x) is not None), None)
    if marked is None and any(path.is_relative_to(d) for d in config.stash.get(_SITE_DIRS, [])):
        return "site"
    return marked


def layer_of(item: pytest.Item) -> str | None:
    """The item's layer, looked up once per item (the hooks ask for it several times per check)."""
    if _LAYER not in item.stash:
        item.stash[_LAYER] = _layer_of(item, item.path, item.config)
    return item.stash[_LAYER]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node" not in metafunc.fixturenames:
        return
    layer = _layer_of(metafunc.definition, metafunc.definition.path, metafunc.config)
    if layer is None:
        return  # not a conformance test: leave any other `node` fixture alone
    suite = metafunc.config.stash.get(SUITE, None)
    if suite is None:
        metafunc.parametrize(
            "node", [pytest.param(None, marks=pytest.mark.skip(reason=NO_INVENTORY))], ids=["no-inventory"]
        )
        return
    marks = {m.name for m in metafunc.definition.iter_markers()} | {layer}
    disruptive = metafunc.config.getoption("non_disruptive") and not marks & set(NON_DISRUPTIVE)
    if disruptive or not marks_select(metafunc.config.getoption("markexpr") or "", marks):
        # -m deselects it anyway: one item to deselect instead of one per node (54,000 items on 1000 nodes)
        metafunc.parametrize("node", [], ids=[])
        return
    metafunc.parametrize("node", suite.nodes, ids=[n.name for n in suite.nodes])


def pytest_itemcollected(item: pytest.Item) -> None:
    """A ``--site`` check gets the ``site`` marker, so ``-m site`` (and ``-m "not site"``) select it as pytest does
    any layer."""
    if layer_of(item) == "site" and item.get_closest_marker("site") is None:
        item.add_marker(pytest.mark.site)


def marks_select(markexpr: str, names: set[str]) -> bool:
    """Whether ``-m markexpr`` keeps a test marked ``names``; True when unsure: no expression, a bad one (pytest
    reports it), or one with mark arguments (``mark(key=value)``)."""
    if not markexpr.strip() or "=" in markexpr:
        return True
    from _pytest.mark.expression import Expression

    try:
        expression = Expression.compile(markexpr)
    except Exception:
        return True
    return expression.evaluate(lambda name, /, **_: name in names)


NO_CLUSTER = (
    "node, workloads, metrics and policy layers not run: no cluster given (--kubeconfig, --kube-context, $KUBECONFIG, "
    "`kubeconfig` in the inventory's data, or a pod's service account)"
)
# The layers that leave running workloads alone, the only ones --non-disruptive runs: workloads and policy need
# idle GPUs (they wait pod_timeout on a busy node), metrics starts a pod holding a GPU on every node the run has
# none on (to see a pod's labels on its series), diag loads every GPU (bandwidth, DCGM diagnostics).
NON_DISRUPTIVE = ("host", "gpu", "node")
NON_DISRUPTIVE_NOTE = "--non-disruptive: only the host, gpu and node layers ran (workloads, metrics, policy and diag hold or load GPUs)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Layer order, globally (see the module docstring); items without a layer keep their place at the front.

    Without any cluster to look at (a host-only run, e.g. a GPU runner before it joins), the checks that need
    the ``cluster`` fixture are deselected, and the terminal summary says so, rather than failing every node on a connection error.
    """
    import os

    from gpuready.arguments import in_pod

    suite = config.stash.get(SUITE, None)
    if config.getoption("non_disruptive"):
        disruptive = [item for item in items if layer_of(item) not in (None, *NON_DISRUPTIVE)]
        if disruptive:
            config.hook.pytest_deselected(items=disruptive)
            dropped = {id(item) for item in disruptive}
            items[:] = [item for item in items if id(item) not in dropped]
        if suite is not None:
            suite.notes.append(NON_DISRUPTIVE_NOTE)
    given = (
        config.getoption("kubeconfig")
        or config.getoption("kube_context")
        or os.environ.get("KUBECONFIG")
        or (suite is not None and any(n.knobs["kubeconfig"] for n in suite.nodes))
        or in_pod()
    )
    # only the suite's own checks: another test suite in the same run may have a fixture of that name
    kube = [item for item in items if layer_of(item) and "cluster" in getattr(item, "fixturenames", ())]
    if kube and not given:
        config.hook.pytest_deselected(items=kube)
        dropped = {id(item) for item in kube}
        items[:] = [item for item in items if id(item) not in dropped]
        if suite is not None:
            suite.notes.append(NO_CLUSTER)
    if suite is None or suite.discovery is None:  # the discovery's own checks only run with --discover
        items[:] = [item for item in items if item.get_closest_marker("discover") is None]
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(layer_of(item) or "", -1), order[id(item)]))


def _node_and_layer(item: pytest.Item) -> tuple[str, str] | None:
    layer = layer_of(item)
    callspec = getattr(item, "callspec", None)
    node = callspec.params.get("node") if callspec is not None else None
    if layer is None or node is None:
        return None
    return node.name, layer


def _check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", item.name)
    others = {k: v for k, v in item.callspec.params.items() if k != "node"}  # type: ignore[attr-defined]
    return name + (f"[{','.join(f'{k}={v}' for k, v in others.items())}]" if others else "")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    where = _node_and_layer(item)
    if where is None:
        return
    _node, layer = where
    suite = item.config.stash.get(SUITE, None)
    if suite is None:
        return
    reason = suite.gated(item.callspec.params["node"], layer)  # type: ignore[attr-defined]
    if reason is not None:
        # reported at the test's location (as a skip marker is), not at this hook's
        raise pytest.skip.Exception(reason, _use_item_location=True)


def _message(report: pytest.TestReport, call: pytest.CallInfo[None]) -> str:
    """The one-line message the fleet report records, masked (gpuready.spec.secrets.mask)."""
    from gpuready.spec.secrets import mask

    if call.excinfo is not None:
        exc = call.excinfo.value
        msg = getattr(exc, "msg", None)
        if isinstance(msg, str) and isinstance(exc, (pytest.fail.Exception, pytest.skip.Exception)):
            return mask(msg)
        return mask(f"{call.excinfo.typename}: {exc}".strip())
    if report.longrepr is None and not hasattr(report, "node"):
        return ""  # what longreprtext is then, without a TerminalWriter built (twice) per passing check
    text = report.longreprtext.strip()
    return mask(text.splitlines()[-1]) if text else ""


def _mask_report(report: pytest.TestReport) -> None:
    """What pytest prints of a check (its failure, its skip reason, its captured output) with every secret
    masked: a check that echoes a token or a kubeconfig credential does not put it in the terminal or CI logs."""
    from gpuready.spec.secrets import has_secret, mask

    if report.longrepr is not None:
        if isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
            path, line, reason = report.longrepr
            report.longrepr = (path, line, mask(reason))
        elif has_secret(str(report.longrepr)):
            report.longrepr = mask(str(report.longrepr))
    if report.sections:
        report.sections = [(title, mask(text)) for title, text in report.sections]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    where = _node_and_layer(item)
    suite = item.config.stash.get(SUITE, None)
    if where is None or suite is None or getattr(report, "wasxfail", None) is not None:
        return report
    _mask_report(report)
    node, layer = where
    if report.when == "setup" and report.outcome == "passed":
        item.stash[_SETUP_SECONDS] = report.duration
    if report.when == "call" or report.outcome != "passed":
        status = {"passed": "pass", "failed": "fail", "skipped": "skip"}[report.outcome]
        message = _message(report, call)
        if status == "fail":
            first = message.removeprefix(f"{node}: ").splitlines()[0] if message else f"{item.name} failed"
            suite.failures.setdefault((node, layer), first)
        if status != "pass" or report.when == "call":
            figures = tuple(
                v for k, v in item.user_properties if k == MEASUREMENT and isinstance(v, Measurement)
            )
            seconds = report.duration + (
                item.stash.get(_SETUP_SECONDS, 0.0) if report.when == "call" else 0.0
            )
            suite.results.record(node, layer, _check_name(item), status, message, seconds, figures)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    suite = session.config.stash.get(SUITE, None)
    if suite is None:
        return
    suite.close()
    suite.results.finish()
    if suite.cluster is not None:  # the API server the run used (report.public_url drops any credential)
        suite.results.api_server = getattr(suite.cluster, "url", None)
    if suite.report_dir:
        suite.report_paths = fleet_report.write_reports(suite.results, suite.report_dir, int(exitstatus))
    from gpuready.conformance import verdict_back

    verdict_back.finish(session.config, suite, int(exitstatus))  # --metrics-file, --write-back


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE, None)
    if suite is None or not suite.results.nodes:
        return
    terminalreporter.section("gpuready fleet verdict")
    terminalreporter.write_line(f"inventory: {suite.inventory}")
    for line in fleet_report.render_table(suite.results).splitlines():
        terminalreporter.write_line(line)
    for note in suite.notes:
        terminalreporter.write_line(note)
    for path in suite.report_paths:
        terminalreporter.write_line(f"wrote {path}")


# --- what conformance tests use ----------------------------------------------------------------------------------


def _skip_here(reason: str) -> NoReturn:
    """Skip, reported at the test's location (pytest's skip marker does the same) rather than at this helper's."""
    from gpuready.spec.secrets import mask

    raise pytest.skip.Exception(mask(reason), _use_item_location=True)


class NodeShell:
    """A node's command runner as conformance tests see it: a node that cannot be reached turns every check but
    ``test_connection`` into a skip, so the unreachable node fails once, for the right reason."""

    def __init__(self, node: Any, runner: Any) -> None:
        self.node = node
        self.runner = runner

    def run(self, command: str) -> Output:
        from gpuready.conformance.runners import ConnectionFailed

        try:
            return self.runner.run(command)
        except ConnectionFailed as exc:
            _skip_here(f"{self.node.name}: {exc}; test_connection reports it")

    def connection_problems(self) -> list[str]:
        from gpuready.conformance.runners import ConnectionFailed

        try:
            self.runner.run("true")
        except ConnectionFailed as exc:
            return [str(exc)]
        return []


@pytest.fixture(scope="session")
def gpuready_suite(request: pytest.FixtureRequest) -> Suite:
    suite = request.config.stash.get(SUITE, None)
    if suite is None:
        pytest.skip(NO_INVENTORY)
    return suite


def node_host(node: Any, suite: Suite) -> Any:
    """The node under test as a testinfra host (``host.service(...)``, ``host.package(...)``, ``host.file(...)``,
    ``host.run(...)``) on the suite's one connection to it, whose answers are cached for the run. A node that
    cannot be reached skips the check: ``test_connection`` fails it once, for that reason. The ``host`` fixture of a
    suite run (:class:`_NodeHost`) hands it to the host layer and to the ``--site`` checks."""
    shell = NodeShell(node, suite.runner(node))
    for problem in shell.connection_problems():
        _skip_here(f"{node.name}: {problem}; test_connection reports it")
    return shell.runner.host


@pytest.fixture
def node_shell(node: Any, gpuready_suite: Suite) -> NodeShell:
    """Run commands on the node under test (``node_shell.run(cmd) -> Output``), each once per run."""
    return NodeShell(node, gpuready_suite.runner(node))


@pytest.fixture(scope="session")
def cluster(gpuready_suite: Suite) -> Any:
    """The cluster the Kubernetes layers look at (a :class:`gpuready.kube.Cluster`); an unreachable one fails
    every check that needs it with the URL and the reason."""
    from gpuready.kube import KubeError
    from gpuready.spec.secrets import mask

    try:
        return gpuready_suite.connect()
    except KubeError as exc:
        pytest.fail(mask(exc), pytrace=False)


@pytest.fixture(scope="session")
def gpuready_workloads(gpuready_suite: Suite, cluster: Any) -> Iterator[Any]:
    """The run's namespace and pods (:class:`gpuready.conformance.workloads.Workloads`), deleted when the session ends."""
    from gpuready.conformance.workloads import Workloads

    if gpuready_suite.workloads is None:
        gpuready_suite.workloads = Workloads(cluster)
    yield gpuready_suite.workloads
    gpuready_suite.cleanup()


MEASUREMENT = "gpuready.measurement"


def judge_measured(
    node: Any,
    item: pytest.Item,
    check: Callable[..., tuple[list[str], list[Measurement]]],
    *args: Any,
) -> None:
    """``judge`` for a check that measures: its figures (measured, floor, unit) go to the test item's user
    properties (pytest's JUnit XML, verdict.json and the fleet table) whether it passes or fails. Appended to
    ``item.user_properties`` directly: the ``record_property`` fixture warns under pytest's default xunit2."""

    def problems(*check_args: Any) -> list[str]:
        found, figures = check(*check_args)
        item.user_properties.extend((MEASUREMENT, figure) for figure in figures)
        return found

    judge(node, problems, *args)


def judge(node: Any, check: Callable[..., list[str]], *args: Any) -> None:
    """Run a pure check: problems fail the test with a message naming the node; CannotCheck skips it."""
    try:
        problems = check(*args)
    except CannotCheck as exc:
        _skip_here(f"{node.name}: {exc}")
    if problems:
        from gpuready.spec.secrets import mask

        pytest.fail(mask(f"{node.name}: " + "; ".join(problems)), pytrace=False)
