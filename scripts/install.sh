#!/usr/bin/env bash
# Install vpunas on a fresh Debian machine: the Fashion-MNIST data package, a virtual environment in .venv and
# the project with its pinned dependencies. With --tests, also what the test suite needs: the test tools
# (pytest, Playwright) and the Debian package chromium (the report's browser test). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") PACKAGES=(dataset-fashion-mnist); EXTRA="" ;;
  --tests) PACKAGES=(dataset-fashion-mnist chromium); EXTRA="[test]" ;;
  *) echo "usage: scripts/install.sh [--tests]" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
MISSING=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || MISSING+=("$package")
done
if [ ${#MISSING[@]} -gt 0 ]; then
  $SUDO apt-get install -y "${MISSING[@]}" || { $SUDO apt-get update && $SUDO apt-get install -y "${MISSING[@]}"; }
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24"
.venv/bin/python -m pip install --quiet --no-cache-dir -e ".$EXTRA"
.venv/bin/python -m pip check
