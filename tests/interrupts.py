"""For tests that stop a child with SIGINT: the child starts with SIGINT's default action, whatever ours is.

A shell without job control starts its background commands with SIGINT and SIGQUIT ignored (POSIX), an ignored
signal stays ignored across exec, and Python installs its KeyboardInterrupt handler only where SIGINT is not
ignored at start: a test run started as `make test &` from a script hands SIGINT to its children as ignored, and a
shell cannot even trap a signal ignored on entry. Seen in session 25: a CI run started that way failed the two
Ctrl-C tests (the suite ran to its end; the join script's INT trap never ran), while their SIGTERM twins passed.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT and SIGQUIT back to their default actions in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
