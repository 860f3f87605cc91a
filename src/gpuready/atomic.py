"""One way to replace a file that something else reads while it changes (Prometheus' textfile collector, the lab's
emulated tools): write a temporary file in the same directory, then rename it over the old one, so a reader sees
the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path`` atomically (its directory made if missing); the file gets ``mode``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target
