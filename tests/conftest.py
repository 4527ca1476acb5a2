"""Shared test settings: a private HOME (NNI, OpenVINO and ONNX Runtime write there) and one torch thread."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

_home = tempfile.mkdtemp(prefix="vpunas-test-home-")
os.environ["HOME"] = _home
os.environ.setdefault("NNI_EXPERIMENT_DIR", os.path.join(_home, "nni-experiments"))


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    import torch

    torch.set_num_threads(1)
