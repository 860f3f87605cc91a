"""The local lab: real Debian hosts under systemd-nspawn with emulated GPUs, and an API-server simulator."""
