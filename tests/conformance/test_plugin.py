"""The plugin's own contract: options, skipping without an inventory, usage errors before any connection, layer
order and gating, shared --connection with pytest-testinfra."""

from __future__ import annotations

import json

import pytest
from inventories import write_inventory

LAYERED_SUITE = {
    "test_a_metrics.py": """
        import pytest
        pytestmark = pytest.mark.metrics
        def test_series(node):
            pass
    """,
    "test_b_host.py": """
        import pytest
        pytestmark = pytest.mark.host
        def test_driver(node):
            if node.name == "gpu-node-2":
                pytest.fail("gpu-node-2: nvidia-smi not found", pytrace=False)
        def test_toolkit(node):
            pass
    """,
    "test_c_gpu.py": """
        import pytest
        pytestmark = pytest.mark.gpu
        def test_count(node):
            pass
    """,
    "test_d_plain.py": """
        def test_not_conformance():
            pass
    """,
}


def write_suite(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    pytester.makepyfile(**{name.removesuffix(".py"): body for name, body in files.items()})


@pytest.fixture
def two_node_inventory(make_node):
    node = make_node("l4-1")
    path = node.inventory()
    data = node.inventory_data()
    return write_inventory(path, [("gpu-node-1", data), ("gpu-node-2", data)])


def test_without_inventory_conformance_tests_skip_with_the_reason(pytester, suite_dir):
    result = pytester.runpytest_inprocess("conformance", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=28)  # host 13, gpu 11, diag 4 (the cluster layers are deselected)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*no --inventory given: the conformance suite needs the fleet's inventory*"])


def test_help_lists_the_options_and_loads_nothing(pytester, tmp_path):
    missing = tmp_path / "does-not-exist.py"
    result = pytester.runpytest_inprocess("--help", "--inventory", str(missing))
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "gpuready conformance:",
            "*--inventory=INVENTORY*",
            "*--kube-context*",
            "*--nodes*",
            "*--report-dir*",
        ]
    )
    text = result.stdout.str()
    for option in ("--kubeconfig", "--command-timeout", "--pod-timeout", "--connection"):
        assert option in text


def test_markers_are_registered(pytester):
    result = pytester.runpytest_inprocess("--markers")
    for layer in ("host", "gpu", "node", "workloads", "metrics"):
        result.stdout.fnmatch_lines([f"@pytest.mark.{layer}: {layer} layer*"])


def test_bad_inventory_is_a_usage_error_before_anything_runs(pytester, suite_dir, make_node):
    node = make_node("l4-1")
    node.activate()
    (node.root / "calls").unlink()  # what preparing the fake driver ran
    inventory = node.inventory(nvidia_driver_version="580.95")
    inventory.write_text(inventory.read_text().replace("'gpu_count': 1", "'gpu_count': 0"))
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(inventory), "--connection", "local"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*problem(s) in the inventory*", "*host gpu-node-1: gpu_count = 0: must be an integer >= 1*"]
    )
    assert not (node.root / "calls").exists()  # no command ran on the node


def test_unknown_node_selection_is_a_usage_error(pytester, suite_dir, two_node_inventory):
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(two_node_inventory), "--nodes", "gpu-node-9"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "unknown node(s) ['gpu-node-9']; the inventory has ['gpu-node-1', 'gpu-node-2']"
        in result.stderr.str()
    )


def test_unsupported_connection_is_a_usage_error(pytester, suite_dir, two_node_inventory):
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(two_node_inventory), "--connection", "docker"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--connection docker: the conformance suite supports ssh or local*"])


def test_local_connection_with_several_nodes_is_a_usage_error(pytester, suite_dir, two_node_inventory):
    result = pytester.runpytest_inprocess(
        "conformance", "--inventory", str(two_node_inventory), "--connection", "local"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--connection local checks this machine as one node, but 2 nodes are selected*"]
    )
    ok = pytester.runpytest_inprocess(
        "conformance",
        "--inventory",
        str(two_node_inventory),
        "--connection",
        "local",
        "--nodes",
        "gpu-node-2",
        "--collect-only",
        "-q",
    )
    assert ok.ret == 0


def test_items_run_in_layer_order_with_node_ids(pytester, two_node_inventory):
    write_suite(pytester, LAYERED_SUITE)
    result = pytester.runpytest_inprocess("--inventory", str(two_node_inventory), "--collect-only", "-q")
    ids = [line.rsplit("/", 1)[-1] for line in result.stdout.lines if "::" in line]
    assert ids == [
        "test_d_plain.py::test_not_conformance",
        "test_b_host.py::test_driver[gpu-node-1]",
        "test_b_host.py::test_driver[gpu-node-2]",
        "test_b_host.py::test_toolkit[gpu-node-1]",
        "test_b_host.py::test_toolkit[gpu-node-2]",
        "test_c_gpu.py::test_count[gpu-node-1]",
        "test_c_gpu.py::test_count[gpu-node-2]",
        "test_a_metrics.py::test_series[gpu-node-1]",
        "test_a_metrics.py::test_series[gpu-node-2]",
    ]


def test_a_layer_minus_m_leaves_out_is_not_parametrized_per_node(pytester, two_node_inventory):
    """-m host: the gpu and metrics checks are collected once each, to be deselected, not once per node (a
    1000-node run collected 54,000 items to deselect 31,000)."""
    write_suite(pytester, LAYERED_SUITE)
    result = pytester.runpytest_inprocess("--inventory", str(two_node_inventory), "-m", "host or not metrics", "-q",
                                          "-p", "no:cacheprovider")  # fmt: skip
    # plain; host 2 x 2 (one fails); gpu 1 x 2 (one gated)
    result.assert_outcomes(passed=5, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*1 deselected*"])  # test_series, once
    result = pytester.runpytest_inprocess("--inventory", str(two_node_inventory), "-m", "host", "--collect-only",
                                          "-q", "-p", "no:cacheprovider")  # fmt: skip
    result.stdout.fnmatch_lines(["4/7 tests collected (3 deselected)*"])  # plain, count, series: once each


def test_a_failed_layer_skips_later_layers_on_that_node_only(pytester, two_node_inventory):
    write_suite(pytester, LAYERED_SUITE)
    result = pytester.runpytest_inprocess(
        "--inventory", str(two_node_inventory), "-rs", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=6, failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] *test_c_gpu.py:*: skipped: host layer failed on gpu-node-2: nvidia-smi not found",
            "SKIPPED [[]1[]] *test_a_metrics.py:*: skipped: host layer failed on gpu-node-2: nvidia-smi not found",
        ]
    )
    result.stdout.re_match_lines(
        [r"gpu-node-1\s+PASS\s+PASS\s+-\s+-\s+PASS", r"gpu-node-2\s+FAIL\s+SKIP\s+-\s+-\s+SKIP"]
    )


def test_nodes_option_selects(pytester, two_node_inventory):
    write_suite(pytester, LAYERED_SUITE)
    result = pytester.runpytest_inprocess(
        "--inventory", str(two_node_inventory), "--nodes", "gpu-node-1", "-q"
    )
    result.assert_outcomes(passed=5)


def test_testinfra_still_works_beside_the_plugin(pytester):
    pytester.makepyfile(
        """
        def test_local(host):
            assert host.run("true").rc == 0
        """
    )
    result = pytester.runpytest_inprocess("--connection", "local", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_test_with_another_node_fixture_is_left_alone(pytester, two_node_inventory):
    pytester.makepyfile(
        """
        import pytest
        @pytest.fixture
        def node():
            return "mine"
        def test_other(node):
            assert node == "mine"
        """
    )
    result = pytester.runpytest_inprocess("--inventory", str(two_node_inventory))
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("markexpr", "layers"),
    [
        ("", ("host", "gpu")),
        ("host or gpu", ("host", "gpu")),
        ("gpu", ("gpu",)),
        ("not host", ("gpu",)),
        ("node or workloads", ()),
        ("host and not slow", ("host",)),
    ],
)
def test_a_probe_gathers_only_the_node_side_layers_that_minus_m_selects(markexpr, layers):
    from gpuready.conformance.plugin import selected_probe_layers

    assert selected_probe_layers(markexpr) == layers


def test_a_checks_seconds_count_its_setup_as_pytest_durations_does(pytester, two_node_inventory):
    """The probe round (or the pods) the first check of a layer waits for is set up by a fixture: verdict.json counts
    that wait in the check's seconds, so the checks' seconds account for the run, not only the call phases."""
    write_suite(pytester, {"test_b_host.py": """
        import time
        import pytest
        pytestmark = pytest.mark.host
        @pytest.fixture(scope="session")
        def gathered():
            time.sleep(0.4)  # what a probe round costs, once, in the first check's setup
        def test_driver(node, gathered):
            pass
    """})  # fmt: skip
    report_dir = pytester.path / "reports"
    result = pytester.runpytest_inprocess(
        "--inventory", str(two_node_inventory), "--report-dir", str(report_dir), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    verdict = json.loads((report_dir / "verdict.json").read_text())
    waited = max(n["layers"]["host"]["checks"]["test_driver"]["seconds"] for n in verdict["nodes"].values())
    assert waited >= 0.4, verdict["nodes"]  # in whichever check ran first
    assert verdict["seconds"] >= waited


def test_connection_is_added_once_with_or_without_testinfra(monkeypatch):
    """pytest-testinfra and the suite both want --connection. pytest 9.2 refuses a second one at once (ValueError),
    9.0 and 9.1 through argparse (ArgumentError), 8.x only when it builds the parser: a GPU machine's image with
    pytest 9.1.1 stopped every suite run there. The suite adds it only where testinfra has not."""
    from testinfra.plugin import pytest_addoption as testinfra_addoption

    from gpuready.conformance import plugin

    class Plugins:
        def __init__(self, testinfra: bool) -> None:
            self.testinfra = testinfra

        def get_plugin(self, name):  # registered already (its options added), or blocked with -p no:testinfra
            return object() if self.testinfra else None

        def is_blocked(self, name):
            return not self.testinfra

    added: list[tuple[str, ...]] = []  # every addoption call: a second --connection must not even be tried
    addoption = pytest.OptionGroup.addoption

    def recording(self, *opts, **attrs):
        added.append(opts)
        return addoption(self, *opts, **attrs)

    monkeypatch.setattr(pytest.OptionGroup, "addoption", recording)
    for testinfra in (True, False):
        added.clear()
        parser = pytest.Parser(_ispytest=True)
        if testinfra:
            testinfra_addoption(parser)
        plugin.pytest_addoption(parser, Plugins(testinfra))
        names = [n for group in parser._groups for option in group.options for n in option.names()]
        assert names.count("--connection") == 1 and added.count(("--connection",)) == 1, (testinfra, added)
        assert parser.parse(["--connection", "local"]).connection == "local", testinfra
