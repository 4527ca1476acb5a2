"""`DpuModel`: the VPUNN DPU cost model (`VPUCostModel::DPU`, single-workload semantics), batched in numpy.

One call costs any number of workloads: sanitize and validate all rows, expand dual-sparsity and >64-channel
extrapolation rows into their NN queries, encode every query, run the NN once on the distinct descriptors
(float32, `x @ W.T + b`), then post-process and fold the expansions back (vpunn-reference.md §3.0, §4.1;
VPU 4.0 / NPU 5.0: npu45-notes §2-3).
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Iterable

import numpy as np

from .descriptors import DESCRIPTOR_SIZES, encode, first_unencodable
from .enums import DTYPE_BITS, Operation, VPUDevice, int_codes
from .errors import ERROR_INVALID_OUTPUT_RANGE, VpunnError, error_name
from .reader import VpunnNetwork, read_vpunn
from .sanitizer import check, sanitize
from .theoretical import theoretical_cycles
from .workload import F, DPUWorkload, workloads_to_matrix

__all__ = ["DpuModel", "LruCache", "UnencodableWorkload", "nn_to_cycles"]

_OP = int_codes(Operation)
_DEV = int_codes(VPUDevice)

#: output interface versions of the DPU files, all cycle counts: 2 and 5 pass the NN value through, 4 scales
#: DW_CONVOLUTION on VPU 4.0 and later (a 2.7-trained network adapted to 4.0, npu45-notes §3)
OUTPUT_VERSIONS = (2, 4, 5)
_MAX_NN_CYCLES = 4e9
# output version 4: DW_CONVOLUTION factors [context row, 16 / 32 / 64 input channels], for 8-bit and wider inputs
_DW_FACTORS_8BIT = np.array([[1.0, 0.8, 0.75], [0.5, 0.44, 0.69], [0.81, 0.75, 0.75], [0.69, 0.68, 0.73],
                             [0.60, 0.60, 0.65]], dtype=np.float32)
_DW_FACTORS_WIDE = np.array([[1.0, 1.0, 1.0], [0.48, 0.47, 0.71], [0.76, 0.74, 0.77], [0.69, 0.69, 0.73],
                             [0.60, 0.60, 0.65]], dtype=np.float32)
_BITS = np.array(DTYPE_BITS)


class UnencodableWorkload(VpunnError):
    """A valid workload that the model's descriptor interface cannot express (the runtime throws too)."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"workload {index}: {reason}")
        self.index, self.reason = index, reason


class LruCache:
    """A bounded mapping of bytes keys to values; the least recently used entry goes first."""

    def __init__(self, size: int):
        self.size = int(size)
        self._data: OrderedDict[bytes, object] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: bytes):
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: bytes, value) -> None:
        if self.size <= 0:
            return
        self._data[key] = value
        if len(self._data) > self.size:
            self._data.popitem(last=False)

    def clear(self) -> None:
        self._data.clear()


def nn_to_cycles(values: np.ndarray) -> np.ndarray:
    """Output interfaces 2, 4 and 5: ceil of the (post-processed) NN value, or ERROR_INVALID_OUTPUT_RANGE outside
    [0, 4e9]."""
    values = np.asarray(values, dtype=np.float32)
    ok = (values >= 0) & (values <= _MAX_NN_CYCLES)
    return np.where(ok, np.ceil(np.where(ok, values, 0)).astype(np.int64), ERROR_INVALID_OUTPUT_RANGE)


def dw_factor(queries: np.ndarray) -> np.ndarray:
    """Output interface 4's float32 factor per sanitized workload: 1 except DW_CONVOLUTION on VPU 4.0 and later
    with 16, 32 or 64 input channels (npu45-notes §3)."""
    a = np.asarray(queries, dtype=np.int64)
    kw, kh, sw, sh = a[:, F.k_w], a[:, F.k_h], a[:, F.s_w], a[:, F.s_h]
    row = np.select([(sw == 1) & (sh == 1) & (kw == 3), (sw == 1) & (sh == 1) & ((kw == 1) | (kh == 1)),
                     (sw == 1) & (sh == 1), (sw == 2) | (sh == 2)], [1, 0, 2, 3], 4)
    channel = np.select([a[:, F.in_c] == c for c in (16, 32, 64)], [0, 1, 2], -1)
    wide = _BITS[np.clip(a[:, F.in_dtype], 0, len(_BITS) - 1)] > 8
    factor = np.where(wide, _DW_FACTORS_WIDE[row, channel], _DW_FACTORS_8BIT[row, channel])
    scaled = (a[:, F.device] >= _DEV.VPU_4_0) & (a[:, F.operation] == _OP.DW_CONVOLUTION) & (channel >= 0)
    return np.where(scaled, factor, np.float32(1))


def _fallback_cycles(sv: np.ndarray) -> np.ndarray:
    """The theoretical cycles `DPU()` returns for an NN error: the runtime's uint64 value cut to its uint32 result."""
    return theoretical_cycles(sv) & 0xFFFFFFFF


_FINGERPRINT = np.random.default_rng(20260311).random((128, 2)).astype(np.float32)


def _distinct_rows(d: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(first row of each distinct row, inverse) from a random projection of the rows, or None if unsure.

    Distinct fingerprints prove rows distinct; equal fingerprints are confirmed by comparing the rows, and a
    mismatch (a collision) returns None so the caller falls back to exact keys.
    """
    fp = np.ascontiguousarray(d @ _FINGERPRINT[:d.shape[1]]).view(np.int64).ravel()
    _, first, inverse = np.unique(fp, return_index=True, return_inverse=True)
    if len(first) < len(d) and not (d == d[first[inverse]]).all():
        return None
    return first, inverse


class DpuModel:
    """A `.vpunn` DPU model (input interface 10, 11, 4011 or 5114; output interface 2, 4 or 5), run like
    `VPUCostModel::DPU`.

    Args:
        model: path of the file, or an already parsed `VpunnNetwork`.
        cache_size: entries of the result cache (keyed by descriptor bytes, as the runtime's LRU); 0 disables.
        blas_threads: BLAS threads for the NN pass (None: the library's default). One is the default: on the
            shared 2-core machine one thread ran the NN at 100-145k rows/s, two threads fell to 13-99k rows/s
            whenever another process was busy (about 190k rows/s when the machine was idle).
    """

    def __init__(self, model, cache_size: int = 1 << 18, blas_threads: int | None = 1):
        self.network: VpunnNetwork = model if isinstance(model, VpunnNetwork) else read_vpunn(Path(model))
        net = self.network
        if net.input_version not in DESCRIPTOR_SIZES:
            raise VpunnError(f"{net.source}: DPU descriptor interface {net.input_version} (model name "
                             f"{net.name!r}) is not implemented; implemented: "
                             + ", ".join(map(str, DESCRIPTOR_SIZES)))
        if net.output_version not in OUTPUT_VERSIONS:
            raise VpunnError(f"{net.source}: DPU output interface {net.output_version} (model name {net.name!r}) "
                             f"is not implemented; implemented: {', '.join(map(str, OUTPUT_VERSIONS))} (cycles)")
        if net.input_size != DESCRIPTOR_SIZES[net.input_version]:
            raise VpunnError(f"{net.source}: the network takes {net.input_size} inputs but interface "
                             f"{net.input_version} has {DESCRIPTOR_SIZES[net.input_version]}")
        self.version = net.input_version
        self.blas_threads = blas_threads
        self._cache = LruCache(cache_size)

    def __repr__(self) -> str:
        return f"DpuModel({self.network.source!r}, {self.network.name})"

    def clear_cache(self) -> None:
        self._cache.clear()

    @property
    def cache_len(self) -> int:
        return len(self._cache)

    def descriptors(self, workloads) -> np.ndarray:
        """NN input vectors of the *sanitized* workloads (like `getDescriptor` after `sanitize_workload`)."""
        return encode(sanitize(workloads_to_matrix(workloads)), self.version)

    def nn_values(self, descriptors: np.ndarray) -> np.ndarray:
        """Raw NN outputs for descriptor rows, through the cache, one forward pass over the distinct rows."""
        d = np.ascontiguousarray(descriptors, dtype=np.float32)  # row-major: the GEMMs run fastest on it
        if len(d) == 0:
            return np.zeros(0, np.float32)
        distinct = _distinct_rows(d)
        if distinct is None:  # a fingerprint collision: exact keys
            keys = d.view(np.dtype((np.void, d.shape[1] * d.itemsize))).ravel().tolist()
            last = {k: i for i, k in enumerate(keys)}
            distinct = np.unique(np.fromiter(map(last.__getitem__, keys), np.int64, len(keys)), return_inverse=True)
        first, inverse = distinct
        if len(first) == len(d):  # all distinct: keep the given order, no gather
            rows, inverse = d, slice(None)
        else:
            rows = d[first]
        if self._cache.size <= 0:
            return self.network.forward(rows, threads=self.blas_threads)[inverse]
        keys = rows.view(np.dtype((np.void, d.shape[1] * d.itemsize))).ravel().tolist()
        cached = [self._cache.get(k) for k in keys]
        missing = [i for i, v in enumerate(cached) if v is None]
        values = np.array([0.0 if v is None else v for v in cached], dtype=np.float32)
        if missing:
            out = self.network.forward(rows[missing], threads=self.blas_threads)
            values[missing] = out
            for i, v in zip(missing, out.tolist()):
                self._cache.put(keys[i], v)
        return values[inverse]

    def _query_cycles(self, queries: np.ndarray) -> np.ndarray:
        if len(queries) == 0:
            return np.zeros(0, np.int64)
        values = self.nn_values(encode(queries, self.version))
        if self.network.output_version == 4:
            in_range = (values >= 0) & (values <= _MAX_NN_CYCLES)
            values = np.where(in_range, values * dw_factor(queries), values)
        return nn_to_cycles(values)

    def cost(self, workloads: Iterable[DPUWorkload] | np.ndarray) -> np.ndarray:
        """Cycles per workload (int64 holding the runtime's uint32: an error code where invalid).

        As the single-workload `DPU()`: an NN error (output out of range) falls back to the theoretical cycles.
        """
        m = workloads_to_matrix(workloads)
        result = np.zeros(len(m), dtype=np.int64)
        if len(m) == 0:
            return result
        s = sanitize(m)
        code = check(s, "workload")
        result[:] = code
        ok = np.nonzero(code == 0)[0]
        if len(ok) == 0:
            return result
        sv = s if len(ok) == len(s) else np.asfortranarray(s[ok])
        try:
            result[ok] = self._cost_valid(sv)
        except VpunnError:
            bad = first_unencodable(sv, self.version)
            if bad is None:
                raise
            raise UnencodableWorkload(int(ok[bad[0]]), bad[1]) from None
        return result

    def _cost_valid(self, sv: np.ndarray) -> np.ndarray:
        """Cycles of sanitized, valid workloads (§3.0 steps 2-5)."""
        op = sv[:, F.operation].astype(np.int64)
        dual = (sv[:, F.in_sparsity_enabled] != 0) & (sv[:, F.weight_sparsity_enabled] != 0)
        extra = ((op == _OP.DW_CONVOLUTION) | (op == _OP.MAXPOOL) | (op == _OP.AVEPOOL)) \
            & (sv[:, F.in_c] > 64) & ~dual
        plain = ~dual & ~extra
        if plain.all():  # the common case: one query per workload, no copies
            queries, sizes = sv, [len(sv), 0, 0, 0, 0]
        else:
            clone_a, clone_b = sv[dual].copy(), sv[dual].copy()
            clone_a[:, [F.act_sparsity, F.in_sparsity_enabled]] = 0
            clone_b[:, [F.weight_sparsity, F.weight_sparsity_enabled]] = 0
            ref32, ref64 = sv[extra].copy(), sv[extra].copy()
            ref32[:, [F.in_c, F.out_c]] = 32
            ref64[:, [F.in_c, F.out_c]] = 64
            parts = [sv[plain], clone_a, clone_b, ref32, ref64]
            queries, sizes = np.concatenate(parts), [len(p) for p in parts]
        cyc = np.split(self._query_cycles(queries), np.cumsum(sizes)[:-1])
        c_plain, c_a, c_b, c32, c64 = cyc
        bad = lambda c: c == ERROR_INVALID_OUTPUT_RANGE  # noqa: E731  (the only NN error code)
        theo = np.zeros(len(sv), dtype=np.int64)  # the fallback, computed only where an NN value is unusable
        need = np.zeros(len(sv), dtype=bool)
        need[plain] = bad(c_plain)
        need[dual] = bad(c_a) | bad(c_b)
        need[extra] = bad(c32) | bad(c64)
        if need.any():
            theo[need] = _fallback_cycles(sv[need])
        out = np.empty(len(sv), dtype=np.int64)
        out[plain] = np.where(bad(c_plain), theo[plain], c_plain)
        # each dual-sparsity clone is a DPU() call of its own, fallback included; theory ignores sparsity
        theo_d = theo[dual]
        out[dual] = np.minimum(np.where(bad(c_a), theo_d, c_a), np.where(bad(c_b), theo_d, c_b))
        extrapolated = self._extrapolate(sv[extra, F.out_c], c32, c64, theo[extra])
        if (extrapolated < 0).any():  # a negative extrapolation: the theoretical cycles, as for an NN error
            neg = np.nonzero(extra)[0][extrapolated < 0]
            extrapolated[extrapolated < 0] = _fallback_cycles(sv[neg])
        out[extra] = extrapolated
        return out

    @staticmethod
    def _extrapolate(c_out, c32, c64, theo) -> np.ndarray:
        """Linear extrapolation from the 32- and 64-channel costs, in float32 (§3.0 step 3); -1 where negative."""
        f32 = np.float32
        a, b = c32.astype(f32), c64.astype(f32)
        slope = (b - a) / f32(32)
        value = slope * c_out.astype(f32) + (a - slope * f32(32))
        failed = (c32 == ERROR_INVALID_OUTPUT_RANGE) | (c64 == ERROR_INVALID_OUTPUT_RANGE)
        cycles = np.ceil(np.where(failed, 0, value)).astype(np.int64)
        return np.where(failed, theo, np.where(cycles < 0, -1, cycles))

    def cost_one(self, workload: DPUWorkload) -> tuple[int, str]:
        """(cycles, error name or '') of one workload."""
        cycles = int(self.cost([workload])[0])
        return cycles, error_name(cycles)
