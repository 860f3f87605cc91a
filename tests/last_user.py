"""A session resource that goes down right after the last test that uses it, not at the end of the run.

The test cluster (tests/conftest.py's ``lab_cluster``) and the session lab (tests/lab/conftest.py's ``lab``) are
session fixtures whose last users run long before the run ends: left up, they would share the 2 cores and root's
inotify instances with every lab that comes after them. Each conftest keeps one :class:`LastUser`, records its last
user when collection finishes, and releases it in a trylast ``pytest_runtest_teardown`` after that test; the
fixture's own teardown releases it too (a run that stopped early), and then finds nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest


class LastUser:
    def __init__(self, fixture: str) -> None:
        self.fixture = fixture
        self.last: str | None = None  # the nodeid of the last collected test that uses the fixture
        self._down: Callable[[], None] | None = None

    def collected(self, items: Sequence[pytest.Item]) -> None:
        """From ``pytest_collection_finish``: the last test (in run order) whose fixtures include the resource."""
        users = [item.nodeid for item in items if self.fixture in getattr(item, "fixturenames", ())]
        self.last = users[-1] if users else None

    def hold(self, down: Callable[[], None]) -> None:
        """The resource is up; ``down`` takes it down (called at most once)."""
        self._down = down

    @property
    def up(self) -> bool:
        return self._down is not None

    def release(self) -> None:
        """Take the resource down if it is still up."""
        down, self._down = self._down, None
        if down is not None:
            down()

    def after(self, item: pytest.Item) -> None:
        """From a trylast ``pytest_runtest_teardown``: release the resource after its last user."""
        if item.nodeid == self.last:
            self.release()
