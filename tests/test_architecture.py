"""The one-way rules (docs/architecture.md), checked by import-linter with the contracts in pyproject.toml (in a
process of its own: it reconfigures logging): between the packages, `nas` -> `search_spaces` -> `hw_cost` | `tasks`;
inside `nas`, between its rooms, from `cli` down to the core."""
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_packages_import_one_way_only():
    proc = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout
