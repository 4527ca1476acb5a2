"""Single-workload queries against batched ones, on the official vectors of every device, and the compiled pieces
the batch-1 path adds (the NN pass of a few rows, the 6-decimal sparsity rounding)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hw_cost.vpunn import DpuModel, VpunnError, is_error, workload_from_row
from hw_cost.vpunn.descriptors import _round_6dp
from hw_cost.vpunn.jit_cache import STAMP_NAME, drop_stale_cache, sources_hash
from hw_cost.vpunn.paths import SHIPPED_MODEL_DIR
from hw_cost.vpunn.reader import SMALL_BATCH, read_vpunn
from hw_cost.vpunn.sanitizer import check
from hw_cost.vpunn.workload import FIELDS, workloads_to_matrix
from conftest import vector_rows

# model file -> (vectors, device rows it costs)
CASES = {"vpu_2_0": ("vpunn_dpu.csv", "VPU_2_0"), "vpu_2_7": ("vpunn_dpu.csv", "VPU_2_7"),
         "vpu_2_7.fast": ("vpunn_dpu.csv", "VPU_2_7"), "vpu_4_0": ("npu45/npu45_dpu.csv", "VPU_4_0"),
         "vpu_5_1": ("npu45/npu45_dpu.csv", "NPU_5_0")}


def _matrix(vectors: str, device: str) -> np.ndarray:
    return workloads_to_matrix([workload_from_row(r) for r in vector_rows(vectors) if r["device"] == device])


@pytest.mark.parametrize("stem", CASES)
def test_single_queries_equal_the_batch_within_one_cycle(stem):
    """One workload per call runs the NN in compiled code, a batch as BLAS GEMMs: the float32 sums differ in
    order, so a cycle count may differ by one (as Intel's own single and vector calls do)."""
    m = _matrix(*CASES[stem])
    model = DpuModel(read_vpunn(SHIPPED_MODEL_DIR / f"{stem}.vpunn"), cache_size=0)
    batched = model.cost(m)
    singles = np.array([model.cost(m[i:i + 1])[0] for i in range(len(m))])
    valid = ~np.asarray(is_error(batched), dtype=bool)
    assert valid.sum() > 100
    np.testing.assert_array_equal(singles[~valid], batched[~valid])  # the same error codes
    diff = np.abs(singles[valid] - batched[valid])
    assert diff.max() <= 1 and (diff == 1).mean() < 0.02


@pytest.mark.parametrize("stem", ["vpu_2_0", "vpu_2_7", "vpu_4_0", "vpu_5_1"])
def test_compiled_forward_of_few_rows_matches_blas(stem):
    """Same weights, other float32 summation order: each layer's dot products of up to 256 terms may differ by
    about n * eps (256 * 6e-8 = 1.5e-5) relative, compounded over the six layers, hence rtol 1e-4."""
    net = read_vpunn(SHIPPED_MODEL_DIR / f"{stem}.vpunn")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (64, net.input_size)).astype(np.float32) * rng.random((64, net.input_size), np.float32)
    blas = net.forward(x)
    few = np.concatenate([net.forward(x[i:i + SMALL_BATCH]) for i in range(0, len(x), SMALL_BATCH)])
    np.testing.assert_allclose(few, blas, rtol=1e-4, atol=1e-3)


def test_sparsity_rounding_is_printf_exact():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.random(2000), np.round(rng.random(500), 7), [0.0, 1.0, 0.0078125, 0.5e-6, 1.5e-6,
                                                                              0.1234565, 2 ** -20, -0.0]])
    for v in values:
        assert _round_6dp(v) == float(f"{v:f}"), v


def test_check_names_an_unknown_context():
    with pytest.raises(VpunnError, match="unknown check context 'tiles'; valid: workload, tile, layer"):
        check(np.zeros((1, len(FIELDS))), "tiles")


def test_numba_cache_is_dropped_when_any_source_of_the_package_changes(tmp_path):
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (tmp_path / "rules.py").write_text("X = 1\n")
    (tmp_path / "kernels.py").write_text("from .rules import X\n")
    compiled = [cache / "kernels.f-3.py311.nbi", cache / "kernels.f-3.py311.1.nbc"]
    bytecode = cache / "kernels.cpython-311.pyc"
    for path in compiled + [bytecode]:
        path.write_bytes(b"x")
    assert drop_stale_cache(tmp_path)  # no record of the sources the cache came from
    assert not any(p.exists() for p in compiled) and bytecode.exists()
    assert (cache / STAMP_NAME).read_text() == sources_hash(tmp_path)
    for path in compiled:
        path.write_bytes(b"x")
    assert not drop_stale_cache(tmp_path) and all(p.exists() for p in compiled)
    (tmp_path / "rules.py").write_text("X = 2\n")  # only the module the kernels read from changes
    assert drop_stale_cache(tmp_path) and not any(p.exists() for p in compiled)


def test_the_package_cache_is_recorded_as_built_from_the_current_sources():
    import hw_cost.vpunn as package
    root = Path(package.__file__).parent
    assert (root / "__pycache__" / STAMP_NAME).read_text() == sources_hash(root)
