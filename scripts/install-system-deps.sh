#!/usr/bin/env bash
# Debian packages the lab and the tests need on the machine that runs them (root only; containerd only for its
# `config dump`, to check the drop-in against the real parser; nftables: the `nft` the real-kubelet lab's kube-proxy
# runs). Idempotent: installs only what is missing.
set -euo pipefail
pkgs=(debootstrap systemd-container gnupg dpkg-dev apt-utils openssh-client iproute2 python3-venv curl ca-certificates containerd nftables)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "gpuready: the lab needs these Debian packages (run as root to install): ${missing[*]}" >&2
  exit 0
fi
echo "gpuready: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
