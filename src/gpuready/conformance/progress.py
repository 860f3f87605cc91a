"""Progress lines on pytest's terminal while the suite waits on pods (see ``workloads.progress``).

Shown by default and with ``-v``; not with ``-q`` (a quiet run prints its dots and the verdict only; the lines are
still INFO records of the ``gpuready.conformance.progress`` logger, so ``--log-cli-level=INFO`` shows them).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

LOGGER = "gpuready.conformance.progress"


class TerminalLines(logging.Handler):
    """Writes each record as one line through pytest's terminal reporter."""

    def __init__(self, terminal: Any) -> None:
        super().__init__(logging.INFO)
        self.terminal = terminal

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.terminal.write_line(f"gpuready: {record.getMessage()}")
        except Exception:  # a closed terminal must not fail a check
            self.handleError(record)


class ProgressPlugin:
    """Registered by the suite's plugin in pytest_configure; attaches the handler once the terminal exists."""

    def __init__(self) -> None:
        self.handler: TerminalLines | None = None
        self.level = logging.NOTSET

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None or session.config.get_verbosity() < 0:
            return
        logger = logging.getLogger(LOGGER)
        self.handler, self.level = TerminalLines(terminal), logger.level
        logger.addHandler(self.handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.handler is not None:
            logger = logging.getLogger(LOGGER)
            logger.removeHandler(self.handler)
            logger.setLevel(self.level)
            self.handler = None
