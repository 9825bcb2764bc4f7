#!/usr/bin/env bash
# Install what the Slurm/MPI tests need on a Debian/Ubuntu machine (run as root).
# Idempotent: when every package is already installed it does nothing (well under a second).
#   slurm/install.sh            install missing packages
#   slurm/install.sh --check    exit 0 if everything is present, 1 if not (installs nothing)
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev)

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "slurm/install.sh: all present (${PACKAGES[*]})"
    exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
    echo "slurm/install.sh: missing ${missing[*]}"
    exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "slurm/install.sh: need root to install ${missing[*]} (apt-get); skipping" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "slurm/install.sh: no apt-get; install ${missing[*]} by hand" >&2
    exit 1
fi

echo "slurm/install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are absent (a fresh container) or an install fails.
if ! compgen -G "/var/lib/apt/lists/*_Packages" >/dev/null; then
    apt-get update -q
fi
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The Debian packages start the system-wide daemons where systemd runs; the tests start
# their own private daemons with their own config, so nothing else is needed here.
echo "slurm/install.sh: done"
