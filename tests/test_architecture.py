"""The one-way rule between the packages (docs/architecture.md): `nas` -> `search_spaces` -> `hw_cost` | `tasks`,
checked by import-linter with the contract in pyproject.toml (in a process of its own: it reconfigures logging)."""
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_packages_import_one_way_only():
    proc = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout
