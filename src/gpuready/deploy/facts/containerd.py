"""What the containerd step decides on: the config file as text (tomlkit edits it, keeping the user's layout)."""

from __future__ import annotations

from gpuready.deploy.facts.host import FileText


class ContainerdConfigText(FileText):
    """
    Returns the text of a containerd config file, or ``None`` if it does not exist.

    .. code:: python

        'version = 2\\n\\n[plugins]\\n...'
    """

    def command(self, path: str = "/etc/containerd/config.toml") -> str:
        return super().command(path)
