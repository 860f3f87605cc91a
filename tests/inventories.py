"""Inventory files for tests, written the way a user must write them: fleet-wide knobs (gpuready.spec.knobs) that every
host sets alike go to the group's data, never to one host's (the spec refuses that)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuready.spec.knobs import KNOBS


def write_inventory(path: Path, hosts: list[tuple[str, dict[str, Any]]], group: str = "gpu_nodes") -> Path:
    lifted = {
        name: hosts[0][1][name]
        for name, knob in KNOBS.items()
        if knob.fleet_wide
        and hosts
        and all(name in data for _, data in hosts)
        and all(data[name] == hosts[0][1][name] for _, data in hosts)
    }
    entries = [(host, {k: v for k, v in data.items() if k not in lifted}) for host, data in hosts]
    path.write_text(f"{group} = ({entries!r}, {lifted!r})\n")
    return path
