"""Property: every public parser of tool output, given any mutation of a real capture or any text at all, returns a
record or raises its documented error (a ValueError subclass); never TypeError, KeyError, IndexError,
AttributeError, RecursionError or UnicodeError (issue 31, item 6).

The budget here is small so that every test run has it (``GPUREADY_FUZZ_EXAMPLES`` per parser, default 12,
derandomized so that a run is repeatable); ``bench/fuzz_parsers.py`` runs 100,000 mutants per parser.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parser_mutants import TARGETS, Target, inputs_of, mutate, outcome

EXAMPLES = int(os.environ.get("GPUREADY_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
IDS = [target.name for target in TARGETS]


def assert_documented(target: Target, text: str) -> None:
    result, exc = outcome(target, text)
    if result == "undocumented":
        raise AssertionError(
            f"{target.name} raised {type(exc).__name__} (documented: {target.error.__name__}): {exc}; "
            f"input of {len(text)} chars starting {text[:120]!r}"
        ) from exc


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_each_real_capture_is_read_or_refused_with_the_documented_error(target: Target) -> None:
    for text in inputs_of(target.name):
        assert_documented(target, text)


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@FUZZ
@given(data=st.data())
def test_mutated_captures_raise_only_the_documented_error(target: Target, data: st.DataObject) -> None:
    inputs = inputs_of(target.name)
    text = inputs[data.draw(st.integers(0, len(inputs) - 1), label="capture")]
    rng: random.Random = data.draw(st.randoms(use_true_random=False), label="mutations")
    assert_documented(target, mutate(text, rng, target.json))


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
@FUZZ
@given(text=st.text(max_size=400))
def test_any_text_raises_only_the_documented_error(target: Target, text: str) -> None:
    assert_documented(target, text)
