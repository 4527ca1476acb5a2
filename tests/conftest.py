"""Shared test settings: a private HOME (NNI, OpenVINO and ONNX Runtime write there), one torch thread and
the allocator setting of the CLI (`nas.runtime`)."""
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
def _process_settings():
    import torch

    from nas.runtime import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()
