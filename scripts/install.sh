#!/usr/bin/env bash
# Install vpunas on a fresh Debian machine: the Fashion-MNIST data package, a virtual environment in .venv,
# and the project with its pinned dependencies (plus the test tools). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  $SUDO apt-get install -y dataset-fashion-mnist || { $SUDO apt-get update && $SUDO apt-get install -y dataset-fashion-mnist; }
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24"
.venv/bin/python -m pip install --quiet --no-cache-dir -e ".[test]"
.venv/bin/python -m pip check
