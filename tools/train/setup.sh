#!/bin/sh
# Installs what the trainer needs (Debian 12): PyTorch for CPU, NumPy, and OpenBLAS, whose
# pthread build replaces the reference BLAS as the system alternative (~14x faster training
# here). Idempotent: installs only what is missing. Run as root or with sudo available.
# The trainer runs with Debian's /usr/bin/python3 (not a pyenv/venv python, which lacks these).
set -e
pkgs="python3-torch python3-numpy libopenblas0-pthread"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi
/usr/bin/python3 -c 'import torch, numpy; print("trainer ready: torch", torch.__version__, "numpy", numpy.__version__)'
