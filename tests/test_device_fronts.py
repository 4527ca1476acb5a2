"""`nas.reporting.device_fronts`: a run's front on several devices (ranking agreement, fastest arch per quality
level)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from nas.reporting.device_fronts import DeviceTable


def _table(latency_x, latency_y, quality=(90.0, 91.0, 92.0)) -> DeviceTable:
    return DeviceTable("top1", ["X", "Y"], ["a", "b", "c"], list(quality),
                           {"X": np.array(latency_x, dtype=float), "Y": np.array(latency_y, dtype=float)})


def test_opposite_rankings_pick_different_archs():
    table = _table([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert table.tau("X", "Y") == pytest.approx(-1.0)
    assert table.levels() == [(92.0, {"X": "c", "Y": "c"}), (91.0, {"X": "b", "Y": "c"}),
                              (90.0, {"X": "a", "Y": "c"})]
    assert "differs between devices at 2 of 3 levels" in table.lines()[-1]


def test_same_ranking_serves_every_device():
    table = _table([1.0, 2.0, 3.0], [10.0, 20.0, 30.0])
    assert table.tau("X", "Y") == pytest.approx(1.0)
    assert all(len(set(best.values())) == 1 for _, best in table.levels())
    assert table.lines()[-1].endswith("one search serves all these devices.")


def test_a_dominated_arch_is_never_the_fastest_at_its_level():
    table = _table([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], quality=(91.0, 90.0, 92.0))
    assert table.fastest_reaching(90.0) == {"X": "a", "Y": "a"}  # b is slower and worse than a


def test_generation_models_take_the_run_s_precision_and_model_folder(tmp_path):
    """`npu_generation_model`: a run's NPU generations are costed with its own `cost.dtype` and `cost.model_dir`
    (the device fronts of `vpunas cost RUN --devices` and the report too), unless the caller gives others."""
    from hw_cost import CostModelError
    from hw_cost.vpunn.paths import MODEL_FILES, find_model_dir
    from nas.config import CostConfig
    from nas.context import npu_generation_model

    shutil.copy(find_model_dir() / MODEL_FILES["VPU_2_0"], tmp_path)
    cost = CostConfig(model="vpunn:VPU_2_0", dtype="fp16", model_dir=str(tmp_path))
    model = npu_generation_model(cost, "VPU_2_0")
    assert (model.name, model.dtype) == ("vpunn:VPU_2_0", "fp16")
    with pytest.raises(CostModelError, match=f"{MODEL_FILES['VPU_2_7']} not found .* in {tmp_path}"):
        npu_generation_model(cost, "VPU_2_7")  # looked up in the run's folder, which lacks it
    assert npu_generation_model(cost, "VPU_2_7", dtype="uint8", model_dir=str(find_model_dir())).dtype == "uint8"
