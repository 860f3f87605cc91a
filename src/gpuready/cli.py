"""The ``gpuready`` console script: ``plan`` an inventory, ``discover`` one from a cluster, ``check`` a fleet with the
conformance suite, and run the local ``lab``.

Deploys run with pyinfra's own CLI and the conformance suite with pytest (``gpuready check`` is pytest on the suite
the package ships); this script only adds what neither has.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from gpuready.arguments import seconds
from gpuready.spec import SpecError, load_fleet


def _plan(args: argparse.Namespace) -> int:
    from gpuready.deploy import plan

    try:
        fleet = load_fleet(args.inventory)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(plan.render_json(fleet) if args.json else plan.render_text(fleet))
    for warning in fleet.security_warnings():
        print(f"gpuready: WARNING: known vulnerabilities: {warning}", file=sys.stderr)
    for warning in fleet.cuda_warnings():
        print(f"gpuready: WARNING: CUDA newer than the driver: {warning}", file=sys.stderr)
    return 0


def _discover(args: argparse.Namespace) -> int:
    from gpuready.arguments import kubeconfig_problem
    from gpuready.conformance import discovered

    # before anything runs: a missing or unreadable kubeconfig is a usage error, like a bad inventory
    problem = kubeconfig_problem(args.kubeconfig)
    if problem:
        print(f"gpuready discover: {problem}", file=sys.stderr)
        return 2
    return discovered.main(args)


def _models(args: argparse.Namespace) -> int:
    from gpuready.nvidia import catalogue

    for model in catalogue.MODELS.values():
        mig = ", ".join(catalogue.mig_profiles(model.name)) if model.mig_capable else "-"
        print(f"{model.name:<46} {model.memory_mib:>7} MiB  {model.family:<13} MIG: {mig}")
    return 0


def _knobs(args: argparse.Namespace) -> int:
    from gpuready.spec import knobs

    sys.stdout.write(knobs.render_group_data())
    return 0


def _values(args: argparse.Namespace) -> int:
    from gpuready.deploy import helm_values  # gpuready[deploy]: without it, main names the extra (exit 2)

    return helm_values.run(args)


def _manifests(args: argparse.Namespace) -> int:
    import yaml

    from gpuready.conformance import manifests

    layers = (
        [x.strip() for x in args.layers.split(",") if x.strip()] if args.layers else list(manifests.LAYERS)
    )
    try:
        manifests.rules(layers)  # an unknown layer is refused before anything is printed
        taint = args.taint_max_fraction if args.taint_failed else None
        image = args.image or manifests.DEFAULT_IMAGE
        if args.sonobuoy:
            objects = [manifests.sonobuoy_plugin(image, layers, args.write_back, taint)]
        else:
            objects = manifests.render(args.namespace, image, args.schedule, layers, args.write_back, taint)
    except ValueError as exc:
        print(f"gpuready manifests: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0


CHECK_HELP = (
    "run the conformance suite (pytest on the suite installed with gpuready; every other argument is pytest's or "
    "the suite's: --inventory FILE | --discover, --kubeconfig, --connection ssh|local|pod, --report-dir, --site DIR, "
    "-m LAYERS; `gpuready check --help` lists them all)"
)


def check(pytest_args: list[str]) -> int:
    """Run the suite the package ships (:data:`gpuready.conformance.SUITE_DIR`): this process becomes
    ``python -m pytest`` on it (exec), so signals, the exit status and pytest's own plugin loading are pytest's, as
    if the user had typed the pytest command.

    The suite's own ``pytest.ini`` is named with ``-c``, so the directory the user runs from (an empty one, or a
    project with a pytest configuration of its own) changes nothing: same options, same rootdir, no cache written
    into the installed package."""
    import os

    from gpuready.conformance import SUITE_DIR

    sys.stdout.flush()
    argv = [sys.executable, "-m", "pytest", "-c", str(SUITE_DIR / "pytest.ini"), "--rootdir", str(SUITE_DIR),
            *pytest_args, str(SUITE_DIR)]  # fmt: skip
    os.execv(sys.executable, argv)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    from gpuready import __version__
    from gpuready.extras import MissingExtra

    parser = argparse.ArgumentParser(prog="gpuready", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpuready {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "plan", help="print what the deploy installs and the conformance suite expects, per node"
    )
    p.add_argument("inventory", help="pyinfra inventory file, e.g. inventory/example.py")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_plan)
    m = sub.add_parser("models", help="list the GPU models and MIG profiles gpuready knows")
    m.set_defaults(func=_models)
    k = sub.add_parser(
        "knobs", help="print inventory/group_data/all.py: every knob with its default, from the registry"
    )
    k.set_defaults(func=_knobs)
    d = sub.add_parser(
        "discover",
        help="print an inventory of the cluster's GPU nodes, from their labels, the device plugin's config and a "
        "probe pod per node (review it, pin it, commit it: gpuready check --inventory ...)",
    )
    d.add_argument("--kubeconfig", default=None, help="the cluster's kubeconfig (default $KUBECONFIG)")
    d.add_argument("--kube-context", default=None, help="kubeconfig context (default: the current one)")
    d.add_argument("--expect-driver", default=None, metavar="VERSION", help="the driver every pool must run")
    d.add_argument(
        "--expect-toolkit", default=None, metavar="VERSION", help="the toolkit every pool must run"
    )
    d.add_argument("--nodes", default=None, help="comma-separated node names (default: every GPU node)")
    d.add_argument("--no-probe", action="store_true", help="labels only: no probe pods (toolkit not known)")
    d.add_argument("--probe-image", default=None, help="the probe pods' image (knob probe_image)")
    d.add_argument(
        "--command-timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="per probe command and per API request (default 60)",
    )
    d.add_argument("--pod-timeout", type=seconds, default=300.0, metavar="SECONDS", help="per probe pod")
    d.set_defaults(func=_discover)
    ms = sub.add_parser(
        "manifests",
        help="print the YAML that runs the conformance suite in the cluster: Namespace, ServiceAccount, the least "
        "RBAC of the selected layers (ClusterRole and binding), a Job and a CronJob (kubectl apply -f -)",
    )
    from gpuready.conformance.verdict_back import DEFAULT_TAINT_MAX_FRACTION, fraction

    ms.add_argument("--namespace", default="gpuready-conformance", help="where the Job runs")
    ms.add_argument(
        "--image",
        default=None,
        help="an image with gpuready and the suite installed (default gpuready:<this version>)",
    )
    ms.add_argument("--schedule", default="0 3 * * *", metavar="CRON", help="the CronJob's schedule")
    ms.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers to run and grant (default: all), e.g. host,gpu,node",
    )
    ms.add_argument(
        "--write-back", action="store_true", help="run with --write-back, and grant it nodes patch"
    )
    ms.add_argument(
        "--taint-failed",
        action="store_true",
        help="with --write-back: run with --taint-failed (failing nodes get the gpuready.io/conformance-failed "
        "taint, passing ones lose it)",
    )
    ms.add_argument(
        "--taint-max-fraction",
        default=DEFAULT_TAINT_MAX_FRACTION,
        type=fraction,
        metavar="FRACTION",
        help="with --taint-failed: at most this fraction of the run's nodes carry the taint (default 0.1)",
    )
    ms.add_argument(
        "--sonobuoy",
        action="store_true",
        help="print a Sonobuoy plugin definition instead (sonobuoy run --plugin FILE): the same command, its "
        "JUnit (fleet.xml, one testsuite per node) as the plugin's results",
    )
    ms.set_defaults(func=_manifests)
    vp = sub.add_parser(
        "values",
        help="write the spec as Helm values for NVIDIA's charts: nvidia-device-plugin and dcgm-exporter per pool, "
        "the GPU Operator for the cluster (docs/helm-values.md)",
    )
    try:
        from gpuready.deploy.helm_values import add_arguments as values_arguments
    except MissingExtra:  # without gpuready[deploy]: listed, and running it names the extra
        vp.add_argument("args", nargs=argparse.REMAINDER)
    else:
        values_arguments(vp)
    vp.set_defaults(func=_values)
    # parsed by pytest, not here (main hands everything after `check` over): listed for `gpuready --help`
    sub.add_parser("check", help=CHECK_HELP, add_help=False)
    why = _lab_missing()
    if why:  # a plain install: listed, saying which extra brings it (main answers `gpuready lab ...` itself)
        sub.add_parser("lab", help=f"the local lab: {why}", add_help=False)
    else:
        from gpuready.lab.cli import add_lab_parser

        add_lab_parser(sub)
    return parser


def _lab_missing() -> str | None:
    """Why ``gpuready lab`` cannot run here (its extra is not installed), or None."""
    from gpuready.extras import MissingExtra

    try:
        import gpuready.lab  # noqa: F401
    except MissingExtra as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    """Every subcommand, with one exit for a closed pipe: ``gpuready plan ... | head`` ends quietly (exit 141,
    as a shell reports a command killed by SIGPIPE), with no traceback and no "Exception ignored" at exit."""
    from gpuready.extras import MissingExtra

    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["check"]:
            return check(argv[1:])
        if argv[:1] == ["lab"] and (why := _lab_missing()):
            print(f"gpuready: {why}", file=sys.stderr)
            return 2
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE
    except MissingExtra as exc:  # e.g. `gpuready plan` (the deploy side) without gpuready[deploy]
        print(f"gpuready: {exc}", file=sys.stderr)
        return 2


BROKEN_PIPE = 128 + 13  # SIGPIPE


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of the closed pipe says nothing (Python's
    documented way: docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    import os

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
