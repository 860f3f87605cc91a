"""Conformance checks as pure functions: ``(NodeSpec, observed command outputs) -> list of problems``.

Why pure: the same check must judge a real node over SSH, a lab host and a captured output in a unit test, and
only a function that never runs a command can do all three. The suite in ``conformance/`` runs the commands
(:mod:`gpuready.observe`) and hands the outputs here; an empty list means the check passed.

A check that cannot judge (its input is missing because another check owns that failure, or it does not apply
to this node) raises :class:`CannotCheck`: the suite reports that as a skip with the reason, so one root cause
fails one check instead of every check downstream of it.
"""

from __future__ import annotations

from typing import NamedTuple


class Output(NamedTuple):
    """What one command printed: exit status, standard output, standard error."""

    rc: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """Both streams: tools print their errors to either."""
        return (self.stdout + "\n" + self.stderr).strip()

    def first_line(self) -> str:
        """The first non-empty line of the error output (or of stdout), to quote in a message."""
        for stream in (self.stderr, self.stdout):
            for line in stream.splitlines():
                if line.strip():
                    return line.strip()
        return f"exit status {self.rc}, no output"


# Exit statuses a shell gives a command it could not start (POSIX: 127 not found, 126 not executable).
NOT_FOUND = 127
NOT_EXECUTABLE = 126


def not_found(out: Output) -> bool:
    return out.rc in (NOT_FOUND, NOT_EXECUTABLE) or "command not found" in out.stderr


class CannotCheck(Exception):
    """The check cannot judge this node; the message says why (reported as a skip)."""
