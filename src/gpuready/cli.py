"""The ``gpuready`` console script: ``plan`` an inventory, and run the local ``lab``.

Deploys run with pyinfra's own CLI and the conformance suite with pytest; this script only adds what neither has.
"""

from __future__ import annotations

import argparse
import sys

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


def _models(args: argparse.Namespace) -> int:
    from gpuready.nvidia import catalogue

    for model in catalogue.MODELS.values():
        mig = ", ".join(catalogue.mig_profiles(model.name)) if model.mig_capable else "-"
        print(f"{model.name:<26} {model.memory_mib:>7} MiB  {model.family:<13} MIG: {mig}")
    return 0


def _knobs(args: argparse.Namespace) -> int:
    from gpuready.spec import knobs

    sys.stdout.write(knobs.render_group_data())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuready", description=__doc__.splitlines()[0])
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
    try:
        from gpuready.lab.cli import add_lab_parser
    except ImportError:  # the lab is optional on machines that only deploy and test
        pass
    else:
        add_lab_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
