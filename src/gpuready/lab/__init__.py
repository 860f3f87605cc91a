"""The local lab: real Debian hosts under systemd-nspawn with emulated GPUs, and a real Kubernetes control plane with an emulated node agent."""
