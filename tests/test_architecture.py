"""The one-way rule between the packages (docs/architecture.md): `nas` -> `search_spaces` -> `hw_cost` | `tasks`,
checked by import-linter with the contract in pyproject.toml."""
import os

from conftest import REPO


def test_packages_import_one_way_only():
    from importlinter.cli import lint_imports

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        assert lint_imports(config_filename=str(REPO / "pyproject.toml")) == 0
    finally:
        os.chdir(cwd)
