"""The one-way rules (docs/architecture.md), checked by import-linter with the contracts in pyproject.toml (in a
process of its own: it reconfigures logging): between the packages, `nas` -> `search_spaces` -> `hw_cost` | `tasks`;
inside `nas`, between its rooms, from `cli` down to the core; inside `hw_cost`, from the cost models down to the
layer descriptors; inside the packages with layers of their own (`hw_cost.vpunn`, `nas.training`, finalisation,
reporting, the strategies)."""
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO


def test_packages_import_one_way_only():
    proc = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in proc.stdout


def test_cost_models_register_by_kind():
    """Every cost model kind is registered once `hw_cost` is imported; a kind cannot be taken twice."""
    import pytest

    from hw_cost import COST_MODEL_KINDS, CostModelError, CostModelSpec, load_cost_model, register_cost_model

    assert set(COST_MODEL_KINDS) == {"lut", "vpunn"}
    # what a kind can do is declared where it registers: a latency table is measured (checked and corrected here)
    assert CostModelSpec.parse("lut:table.json").is_table and not CostModelSpec.parse("vpunn:VPU_2_7").is_table
    assert not load_cost_model("vpunn:VPU_2_7").is_measured
    with pytest.raises(ValueError, match="'lut' is taken by LutCostModel.from_file"):
        register_cost_model("lut")(lambda arg, **options: None)
    with pytest.raises(CostModelError, match=r"unknown cost model 'oracle:x'; expected one of: lut:\.\.\., vpunn:"):
        load_cost_model("oracle:x")


def _strings_outside_docstrings(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings (its messages, keys, ...)."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_library_messages_name_no_command_line_flag():
    """The library names its parameters, the command line its flags (nas/cli/flags.py): outside nas/cli/ no
    string of the code names a flag of a vpunas command."""
    import re

    flags = re.compile(r"(?<![\w-])--(out|device|devices|model-dir|resume|archs|config)\b")
    found = [(str(path.relative_to(REPO)), text) for package in ("nas", "hw_cost", "search_spaces", "tasks")
             for path in sorted((REPO / package).rglob("*.py")) if "cli" not in path.relative_to(REPO).parts
             for text in _strings_outside_docstrings(path) if flags.search(text)]
    assert found == []
