"""Where the VPUNN model files come from: the copies shipped in the package, unless $VPUNAS_VPUNN_DIR or an
explicit folder says otherwise; a named folder that is missing is a one-line error."""
from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import hw_cost
import hw_cost.vpunn.paths as vpaths
from hw_cost.vpunn import VpunnError, load_vpunn_cost_model, read_vpunn
from hw_cost.vpunn.paths import ENV_VAR, MODEL_FILES, SHIPPED_MODEL_DIR, find_model_dir, resolve_model_file
from conftest import REPO

PACKAGE = Path(hw_cost.__file__).resolve().parent
NOTICE_FILES = ("NOTICE", "README.md", "LICENSE-Apache-2.0.txt")


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_shipped_folder_is_the_default(no_env):
    folder = find_model_dir()
    assert folder == SHIPPED_MODEL_DIR == PACKAGE / "vpunn" / "models"
    for name in sorted(set(MODEL_FILES.values())):
        path = resolve_model_file(name)
        assert path.is_file() and path.parent == folder
        assert read_vpunn(path).layers  # a real model file, not a pointer or a stub
    assert load_vpunn_cost_model("VPU_2_0.fast").name == "vpunn:VPU_2_0.fast"


@pytest.mark.parametrize("blank", ["", "  "])
def test_blank_env_var_means_unset(monkeypatch, blank):
    monkeypatch.setenv(ENV_VAR, blank)
    assert find_model_dir() == SHIPPED_MODEL_DIR


def test_shipped_folder_carries_the_licence_notice():
    for name in NOTICE_FILES:
        assert (SHIPPED_MODEL_DIR / name).is_file()
    notice = (SHIPPED_MODEL_DIR / "NOTICE").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in notice and "Intel Corporation" in notice
    assert "intel/npu-nn-cost-model" in notice and "8a2ae92bc74e24242b1e7fd7fc299fa07f352e3a" in notice
    licence = (SHIPPED_MODEL_DIR / "LICENSE-Apache-2.0.txt").read_text(encoding="utf-8")
    assert "Apache License" in licence and "END OF TERMS AND CONDITIONS" in licence


def test_package_data_covers_the_shipped_files():
    """A non-editable install (wheel) must carry the model files and their notice: pyproject's package-data."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["hw_cost.vpunn"]
    shipped = sorted(p.relative_to(PACKAGE / "vpunn").as_posix() for p in SHIPPED_MODEL_DIR.iterdir())
    assert shipped == sorted([f"models/{n}" for n in set(MODEL_FILES.values())] + [f"models/{n}" for n in NOTICE_FILES])
    for rel in shipped:
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in patterns), rel


def test_search_order(tmp_path, monkeypatch):
    env_dir, explicit_dir = tmp_path / "env", tmp_path / "explicit"
    for folder in (env_dir, explicit_dir):
        folder.mkdir()
        shutil.copy(SHIPPED_MODEL_DIR / "vpu_2_7.fast.vpunn", folder)
    monkeypatch.setenv(ENV_VAR, str(env_dir))
    assert resolve_model_file("vpu_2_7.fast.vpunn") == env_dir / "vpu_2_7.fast.vpunn"
    assert resolve_model_file("vpu_2_7.fast.vpunn", explicit_dir) == explicit_dir / "vpu_2_7.fast.vpunn"
    # a folder that is named is used alone: no falling back to the shipped files
    with pytest.raises(VpunnError, match=f"vpu_2_7.vpunn not found .*in {env_dir}") as exc:
        resolve_model_file("vpu_2_7.vpunn")
    one_line(exc)


def test_env_var_at_a_missing_folder_is_one_line(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(ENV_VAR, str(missing))
    with pytest.raises(VpunnError, match=f"{ENV_VAR}={missing} is not a directory") as exc:
        find_model_dir()
    assert "intel/npu-nn-cost-model" in one_line(exc)
    with pytest.raises(VpunnError, match=f"{ENV_VAR}=.*not a directory"):
        load_vpunn_cost_model("VPU_2_7")
    # an explicit folder wins over the variable, so the broken variable is not consulted then
    assert find_model_dir(SHIPPED_MODEL_DIR) == SHIPPED_MODEL_DIR


def test_explicit_missing_folder_and_unshipped_file_are_one_line(tmp_path, no_env):
    with pytest.raises(VpunnError, match="VPUNN model directory .*nowhere does not exist") as exc:
        find_model_dir(tmp_path / "nowhere")
    one_line(exc)
    with pytest.raises(VpunnError, match=f"vpu_4_1.vpunn not found.*shipped folder holds only.*{ENV_VAR}") as exc:
        resolve_model_file("vpu_4_1.vpunn")
    assert "intel/npu-nn-cost-model" in one_line(exc)


def test_broken_installation_is_one_line(monkeypatch, no_env):
    monkeypatch.setattr(vpaths, "default_model_dir", lambda: None)
    with pytest.raises(VpunnError, match=f"no VPUNN model directory found.*{ENV_VAR}") as exc:
        find_model_dir()
    one_line(exc)


def test_a_lone_copy_of_the_package_finds_its_models(tmp_path):
    """A copy of `hw_cost` alone in an empty folder (no project, nothing beside it) resolves and reads every
    model file from inside itself."""
    root = tmp_path / "clone"
    shutil.copytree(PACKAGE, root / "hw_cost", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "import hw_cost\n"
            "from hw_cost.vpunn.paths import MODEL_FILES, find_model_dir, resolve_model_file\n"
            "from hw_cost.vpunn import read_vpunn\n"
            "assert hw_cost.__file__.startswith(sys.argv[1]), hw_cost.__file__\n"
            "print(find_model_dir())\n"
            "for name in sorted(set(MODEL_FILES.values())): read_vpunn(resolve_model_file(name))\n")
    env = {k: v for k, v in os.environ.items() if k not in (ENV_VAR, "PYTHONPATH")} | {"OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code, str(root)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == root.resolve() / "hw_cost" / "vpunn" / "models"
