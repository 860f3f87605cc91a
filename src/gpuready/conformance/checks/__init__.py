"""Conformance checks as pure functions: ``(NodeSpec, observed command outputs) -> list of problems``.

Why pure: the same check must judge a real node over SSH, a lab host and a captured output in a unit test, and
only a function that never runs a command can do all three. The suite in ``conformance/`` runs the commands
(:mod:`gpuready.conformance.runners`) and hands the outputs here; an empty list means the check passed.

A check that cannot judge (its input is missing because another check owns that failure, or it does not apply
to this node) raises :class:`CannotCheck`: the suite reports that as a skip with the reason, so one root cause
fails one check instead of every check downstream of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


# What coreutils' timeout(1) exits with, and what the suite's runners report for a command they stopped waiting
# for (gpuready.conformance.runners.TIMEOUT_RC); 128 + 9 is a command killed with SIGKILL.
TIMED_OUT = 124
KILLED = 137


def exit_problem(out: Output, command: str, accepted: tuple[int, ...] = (0,)) -> str | None:
    """Why ``command``'s output cannot be judged, from its exit status alone, or None when the status is one of
    ``accepted``. A check calls this before it reads the output: a command that timed out or failed can have
    printed output that parses (the first GPUs of a listing cut short) and must not pass as a smaller node."""
    if out.rc in accepted:
        return None
    if out.rc == TIMED_OUT:
        how = "timed out"
    elif out.rc == KILLED:
        how = "was killed"
    else:
        how = "failed"
    return f"`{command}` {how} (exit {out.rc}): {out.first_line()}"


class CannotCheck(Exception):
    """The check cannot judge this node; the message says why (reported as a skip)."""


LOG_LINES = 8


@dataclass
class PodResult:
    """Where a pod got to; ``describe()`` is what a failing check quotes."""

    name: str
    node: str
    phase: str = "Unknown"
    reason: str = ""
    message: str = ""
    unschedulable: str | None = None
    log: str = ""
    events: list[str] = field(default_factory=list)
    timed_out: bool = False
    exit_code: int | None = None

    @property
    def running(self) -> bool:
        return self.phase in ("Running", "Succeeded")

    def describe(self) -> str:
        parts = [f"pod {self.name}: phase {self.phase}"]
        if self.timed_out:
            parts[0] += " (timed out waiting)"
        if self.reason:
            parts.append(f"reason {self.reason}" + (f": {self.message}" if self.message else ""))
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.unschedulable:
            parts.append(f"Unschedulable: {self.unschedulable}")
        if self.events:
            parts.append("events: " + " | ".join(shown_events(self.events)))
        tail = [line for line in self.log.splitlines() if line.strip()][-LOG_LINES:]
        if tail:
            parts.append("last log lines: " + " / ".join(tail))
        return "; ".join(parts)


def shown_events(events: list[str], limit: int = 4) -> list[str]:
    """At most `limit` of a pod's events, in their order: the latest Warnings first (they say why a pod failed:
    FailedCreatePodSandBox, FailedScheduling, BackOff), the slots left to the latest others."""
    warnings = [i for i, e in enumerate(events) if e.startswith("Warning ")][-limit:]
    others = [i for i, e in enumerate(events) if not e.startswith("Warning ")]
    keep = set(warnings) | set(others[max(0, len(others) - (limit - len(warnings))) :])
    return [e for i, e in enumerate(events) if i in keep]
