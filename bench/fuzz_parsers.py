"""Mutated real captures through every public parser of tool output: how many parse, how many raise the parser's
documented error, how many raise anything else (a bug), and the time taken.

The parsers, their documented errors, the captures and the mutations (truncation anywhere, flipped bytes, lines
deleted/repeated/swapped, numbers replaced by negative, huge, non-ASCII or non-numbers, junk characters, deep
nesting, JSON values of the wrong type) are those of tests/unit/parser_mutants.py, which the fuzz test in
tests/unit/test_parser_fuzz.py runs with a small hypothesis budget. Here each parser gets N mutants (default
100,000) from a seeded random generator, so a run can be repeated. Asserts nothing; exits 1 when an undocumented
error was seen, and prints the first few of each parser (exception, message, the mutant's length and a sample).

Run: .venv/bin/python bench/fuzz_parsers.py [--mutants 100000] [--seed 31] [--only smi.parse_list ...]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit"))

import parser_mutants  # noqa: E402  (tests/unit is not a package)


def run(target: parser_mutants.Target, mutants: int, seed: int, shown: int) -> tuple[Counter[str], float]:
    rng = random.Random(f"{seed}:{target.name}")
    inputs = parser_mutants.inputs_of(target.name)
    counts: Counter[str] = Counter()
    started = time.perf_counter()
    for _ in range(mutants):
        text = parser_mutants.mutate(rng.choice(inputs), rng, target.json)
        result, exc = parser_mutants.outcome(target, text)
        counts[result] += 1
        if result == "undocumented" and counts[result] <= shown:
            print(f"    {target.name}: {type(exc).__name__}: {str(exc)[:200]} (mutant of {len(text)} chars)")
            print(f"      sample: {text[:160]!r}")
    return counts, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mutants", type=int, default=100_000, help="mutants per parser (default 100,000)")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--only", nargs="*", default=[], help="parser names (as printed) to run, default all")
    parser.add_argument("--show", type=int, default=3, help="undocumented errors to print per parser")
    args = parser.parse_args()
    if args.mutants < 1:
        parser.error("--mutants must be at least 1")
    # in the order given with --only (cheap parsers first, say), else in parser_mutants' order
    targets = [parser_mutants.BY_NAME[n] for n in args.only if n in parser_mutants.BY_NAME] or list(
        parser_mutants.TARGETS
    )
    unknown = set(args.only) - {t.name for t in parser_mutants.TARGETS}
    if unknown:
        parser.error(f"unknown parser(s) {sorted(unknown)}; known: {', '.join(parser_mutants.BY_NAME)}")
    print(f"{args.mutants:,} mutants per parser, seed {args.seed}, {len(targets)} parser(s)")
    print(f"{'parser':40} {'inputs':>6} {'parsed':>9} {'documented':>11} {'undocumented':>13} {'seconds':>8}")
    total: Counter[str] = Counter()
    started = time.perf_counter()
    for target in targets:
        counts, seconds = run(target, args.mutants, args.seed, args.show)
        total += counts
        print(
            f"{target.name:40} {len(parser_mutants.inputs_of(target.name)):>6} {counts['parsed']:>9,}"
            f" {counts['documented']:>11,} {counts['undocumented']:>13,} {seconds:>8.1f}",
            flush=True,
        )
    print(
        f"{'all':40} {'':>6} {total['parsed']:>9,} {total['documented']:>11,} {total['undocumented']:>13,}"
        f" {time.perf_counter() - started:>8.1f}"
    )
    return 1 if total["undocumented"] else 0


if __name__ == "__main__":
    sys.exit(main())
