"""Waiting on a real cluster without sleep-and-hope: poll a condition until it holds or a deadline passes.

One helper for every test directory (tests/ is on sys.path through its conftest.py): the default deadline is
generous because two cores may be shared with other test sessions; a failure names what was awaited and the
last value seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT_S = 120.0


def wait_for(check: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT_S, what: str = "condition") -> Any:
    """Poll until `check()` is truthy and return that value; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {value!r}")
        time.sleep(0.1)
