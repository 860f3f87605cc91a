"""Validate the fleet spec before pyinfra opens a single connection, and name known-vulnerable pins.

pyinfra loads the inventory and then connects to every host before any deploy file runs, so a check inside the
deploy would come after the connections. The repository's ``config.py`` (which pyinfra executes first) installs a
state callback whose ``host_before_connect`` validates the whole inventory once and stops the run with the
SpecError text and exit status 2, like ``gpuready plan``.
"""

from __future__ import annotations

import sys
from typing import Any

from pyinfra.api.host import Host
from pyinfra.api.state import BaseStateCallback, State

from gpuready.deploy.context import fleet_for
from gpuready.spec import SpecError


class ValidateFleetBeforeConnect(BaseStateCallback):
    reported = False

    @classmethod
    def host_before_connect(cls, state: State, host: Host) -> None:
        try:
            fleet = fleet_for(state.inventory)
        except SpecError as exc:
            if not cls.reported:  # every host's greenlet gets here; say it once
                cls.reported = True
                print(f"gpuready: the inventory is invalid, nothing was changed.\n{exc}", file=sys.stderr)
            raise SystemExit(2) from None
        if not cls.reported:
            cls.reported = True
            # known-vulnerable pins are named before anything is installed, never installed silently
            for warning in fleet.security_warnings():
                print(f"gpuready: WARNING: known vulnerabilities: {warning}", file=sys.stderr)


def install() -> None:
    """Register the callback on every State pyinfra initialises from now on (it creates the handler list in init)."""
    if getattr(State.init, "_gpuready", False):
        return
    original = State.init

    def init(self: State, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.add_callback_handler(ValidateFleetBeforeConnect())

    init._gpuready = True  # type: ignore[attr-defined]
    State.init = init  # type: ignore[method-assign]
