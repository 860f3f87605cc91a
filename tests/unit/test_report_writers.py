"""fleet.xml and verdict.json are written directly (report.fleet_xml, report._json_indented) rather than through
junit-xml's minidom round trip and json's pure-Python indenting encoder: the same text, character for character,
on results full of what needs escaping (quotes, markup, newlines, carriage returns, characters XML forbids)."""

import io
import json
import random

import junit_xml

from gpuready.conformance.report import FleetResults, Measurement, _json_indented, fleet_xml

ALPHABET = [
    *"ab XY&<>\"'\n\r\t=/;:é€",
    "\x01",
    "\x0b",
    "\x7f",
    "\x85",
    "\x9f",
    "\ufffe",
    "\U0001fffe",
    "😀",
    "]]>",
]


def _text(rng: random.Random, most: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, most)))


def _results(rng: random.Random) -> FleetResults:
    names = [f"gpu-node-{i}{_text(rng, 2)}" for i in range(rng.randint(0, 4))]
    results = FleetResults(names, "inventory.py")
    for node in names:
        for _ in range(rng.randint(0, 6)):
            figures = tuple(
                Measurement(
                    rng.choice(["lowest h2d", _text(rng, 4)]),
                    rng.random() * 100,
                    rng.choice([None, 1.5]),
                    "GB/s",
                )
                for _ in range(rng.randint(0, 2))
            )
            results.record(node, rng.choice(["host", "gpu", "site"]), rng.choice(["test_a", _text(rng, 5)]),
                           rng.choice(["pass", "fail", "skip"]), rng.choice(["", _text(rng, 20)]),
                           rng.choice([0.0, 0.0004, rng.random(), 12.3456]), figures)  # fmt: skip
    return results


def test_fleet_xml_is_junit_xmls_document():
    rng = random.Random(30)
    for _ in range(300):
        results = _results(rng)
        expected = io.StringIO()
        junit_xml.to_xml_report_file(expected, results.junit_suites(), prettyprint=True, encoding="utf-8")
        assert fleet_xml(results) == expected.getvalue()


def test_verdict_json_is_json_dumps_indented():
    rng = random.Random(30)
    for _ in range(100):
        verdict = _results(rng).verdict(rng.choice([0, 1, 2]))
        assert _json_indented(verdict) == json.dumps(verdict, indent=2)
    odd = {"a": [1, 2.5, True, None, {}, [], (3, "x")], "b": {1: "int key"}, "c": float("nan"), "é\n": "\x01"}
    assert _json_indented(odd) == json.dumps(odd, indent=2)
