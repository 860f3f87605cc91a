"""The local lab: real Debian hosts under systemd-nspawn with emulated GPUs, and a real Kubernetes control plane
(KWOK for the virtual nodes).

Not part of a plain install: importing it without ``gpuready[lab]`` raises :class:`gpuready.extras.MissingExtra`
naming the extra (``gpuready lab`` prints that and exits 2).
"""

from gpuready.extras import require

require("lab", "the gpuready lab")
