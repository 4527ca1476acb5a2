"""`DpuModel`: the VPUNN DPU cost model (`VPUCostModel::DPU`, single-workload semantics), batched.

One call costs any number of workloads: sanitize and validate all rows, expand dual-sparsity and >64-channel
extrapolation rows into their NN queries and encode every query (one compiled pass, `_plan`), run the NN once on
the distinct descriptors (float32, `x @ W.T + b`; reader.py), then post-process and fold the expansions back
(`_fold`) (docs/vpunn.md §2). A single workload takes the same
path; its cost is dominated by the NN pass.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Iterable

import numpy as np
from numba import njit

from .descriptors import DESCRIPTOR_SIZES, UnencodableWorkload, encode, encode_rows, unencodable
from .enums import DEV, OP
from .errors import ERROR_INVALID_OUTPUT_RANGE, VpunnError, error_name
from .reader import VpunnNetwork, read_vpunn
from .sanitizer import CONTEXTS, as_matrix, bits, check_row, int_field, member, sanitize, sanitize_rows
from .theoretical import theoretical_row
from .workload import F, DPUWorkload, workloads_to_matrix

__all__ = ["DpuModel", "LruCache", "UnencodableWorkload", "nn_cycles"]


#: output interface versions of the DPU files, all cycle counts: 2 and 5 pass the NN value through, 4 scales
#: DW_CONVOLUTION on VPU 4.0 and later (a 2.7-trained network adapted to 4.0, docs/vpunn.md §2.3)
OUTPUT_VERSIONS = (2, 4, 5)
_MAX_NN_CYCLES = 4e9
# output version 4: DW_CONVOLUTION factors [context row, 16 / 32 / 64 input channels], for 8-bit and wider inputs
_DW_FACTORS_8BIT = np.array([[1.0, 0.8, 0.75], [0.5, 0.44, 0.69], [0.81, 0.75, 0.75], [0.69, 0.68, 0.73],
                             [0.60, 0.60, 0.65]], dtype=np.float32)
_DW_FACTORS_WIDE = np.array([[1.0, 1.0, 1.0], [0.48, 0.47, 0.71], [0.76, 0.74, 0.77], [0.69, 0.69, 0.73],
                             [0.60, 0.60, 0.65]], dtype=np.float32)
# the NN queries of a valid workload (docs/vpunn.md §2.1 steps 3-4): one; two sparsity clones; the 32- and
# 64-channel references
_PLAIN, _DUAL_SPARSE, _EXTRAPOLATED = 0, 1, 2
_WORKLOAD = CONTEXTS["workload"]


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


@njit(cache=True)
def nn_cycles(value, query, output_version) -> int:
    """Output interfaces 2, 4 and 5: ceil of the NN value, or ERROR_INVALID_OUTPUT_RANGE outside [0, 4e9].

    Interface 4 first scales DW_CONVOLUTION on VPU 4.0 and later by a float32 factor (`_dw_factor`).
    """
    if not 0 <= value <= _MAX_NN_CYCLES:
        return ERROR_INVALID_OUTPUT_RANGE
    if output_version == 4:
        value = value * _dw_factor(query)
        if not 0 <= value <= _MAX_NN_CYCLES:
            return ERROR_INVALID_OUTPUT_RANGE
    return np.int64(np.ceil(value))


@njit(cache=True)
def _dw_factor(query) -> np.float32:
    """Output interface 4's factor of a sanitized workload: 1 except DW_CONVOLUTION on VPU 4.0 and later with 16,
    32 or 64 input channels (docs/vpunn.md §2.3)."""
    in_c = int_field(query, F.in_c)
    channel = 0 if in_c == 16 else (1 if in_c == 32 else (2 if in_c == 64 else -1))
    if int_field(query, F.device) < DEV.VPU_4_0 or int_field(query, F.operation) != OP.DW_CONVOLUTION \
            or channel < 0:
        return np.float32(1)
    kw, kh, sw, sh = int_field(query, F.k_w), int_field(query, F.k_h), int_field(query, F.s_w), \
        int_field(query, F.s_h)
    if sw == 1 and sh == 1:
        context = 1 if kw == 3 else (0 if kw == 1 or kh == 1 else 2)
    else:
        context = 3 if sw == 2 or sh == 2 else 4
    table = _DW_FACTORS_WIDE if bits(int_field(query, F.in_dtype)) > 8 else _DW_FACTORS_8BIT
    return table[context, channel]


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
        if len(d) == 1:  # a single query: nothing to deduplicate
            rows, inverse = d, slice(None)
        else:
            distinct = _distinct_rows(d)
            if distinct is None:  # a fingerprint collision: exact keys
                keys = d.view(np.dtype((np.void, d.shape[1] * d.itemsize))).ravel().tolist()
                last = {k: i for i, k in enumerate(keys)}
                distinct = np.unique(np.fromiter(map(last.__getitem__, keys), np.int64, len(keys)),
                                     return_inverse=True)
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

    def cost(self, workloads: Iterable[DPUWorkload] | np.ndarray) -> np.ndarray:
        """Cycles per workload (int64 holding the runtime's uint32: an error code where invalid).

        As the single-workload `DPU()`: an NN error (output out of range) falls back to the theoretical cycles.
        """
        m = as_matrix(workloads_to_matrix(workloads))
        failed = np.full(3, -1, dtype=np.int64)
        sanitized, codes, first, queries, descriptors = _plan(m, self.version, DESCRIPTOR_SIZES[self.version],
                                                              failed)
        if failed[0] >= 0:
            exc = unencodable(failed, self.version)
            raise UnencodableWorkload(int(np.flatnonzero((first >= 0) & (first <= exc.index))[-1]), exc.reason)
        return _fold(sanitized, codes, first, queries, self.nn_values(descriptors), self.network.output_version)

    def cost_one(self, workload: DPUWorkload) -> tuple[int, str]:
        """(cycles, error name or '') of one workload."""
        cycles = int(self.cost([workload])[0])
        return cycles, error_name(cycles)


@njit(cache=True)
def _query_kind(workload) -> int:
    """How a sanitized, valid workload is queried: _PLAIN, _DUAL_SPARSE or _EXTRAPOLATED (docs/vpunn.md §2.1
    steps 3-4)."""
    if int_field(workload, F.in_sparsity_enabled) != 0 and int_field(workload, F.weight_sparsity_enabled) != 0:
        return _DUAL_SPARSE
    if member(int_field(workload, F.operation), (OP.DW_CONVOLUTION, OP.MAXPOOL, OP.AVEPOOL)) \
            and int_field(workload, F.in_c) > 64:
        return _EXTRAPOLATED
    return _PLAIN


@njit(cache=True)
def _plan(m, version, size, failed):
    """Sanitize and check the workloads, write the NN queries of the valid ones and encode them.

    Returns (sanitized, error code per workload, index of its first query or -1, queries, descriptors); the queries
    of a workload are consecutive. An unencodable query stops the encoding and fills `failed` (`encode_rows`).
    """
    sanitized = sanitize_rows(m, m.copy())
    codes = np.empty(len(m), dtype=np.int64)
    first = np.full(len(m), -1, dtype=np.int64)
    n_queries = 0
    for i in range(len(m)):
        codes[i] = check_row(sanitized[i], _WORKLOAD, 0, 1)
        if codes[i] == 0:
            first[i] = n_queries
            n_queries += 1 if _query_kind(sanitized[i]) == _PLAIN else 2
    queries = np.empty((n_queries, m.shape[1]))
    for i in range(len(m)):
        j = first[i]
        if j < 0:
            continue
        queries[j] = sanitized[i]
        kind = _query_kind(sanitized[i])
        if kind != _PLAIN:
            queries[j + 1] = sanitized[i]
        if kind == _DUAL_SPARSE:  # one clone without activation sparsity, one without weight sparsity
            queries[j, F.act_sparsity] = queries[j, F.in_sparsity_enabled] = 0
            queries[j + 1, F.weight_sparsity] = queries[j + 1, F.weight_sparsity_enabled] = 0
        elif kind == _EXTRAPOLATED:
            queries[j, F.in_c] = queries[j, F.out_c] = 32
            queries[j + 1, F.in_c] = queries[j + 1, F.out_c] = 64
    descriptors = np.zeros((n_queries, size), dtype=np.float32)
    encode_rows(queries, version, descriptors, failed)
    return sanitized, codes, first, queries, descriptors


@njit(cache=True)
def _fold(sanitized, codes, first, queries, values, output_version):
    """Cycles per workload from the NN values of its queries (docs/vpunn.md §2.1 step 5, §2.2): the error code of
    an invalid one; the theoretical cycles where an NN value is unusable."""
    out = codes.copy()
    for i in range(len(out)):
        j = first[i]
        if j < 0:
            continue
        kind = _query_kind(sanitized[i])
        cycles = nn_cycles(values[j], queries[j], output_version)
        if kind == _PLAIN:
            out[i] = _fallback(sanitized[i]) if cycles == ERROR_INVALID_OUTPUT_RANGE else cycles
            continue
        other = nn_cycles(values[j + 1], queries[j + 1], output_version)
        if kind == _DUAL_SPARSE:  # each clone is a DPU() call of its own, fallback included
            if cycles == ERROR_INVALID_OUTPUT_RANGE:
                cycles = _fallback(sanitized[i])
            if other == ERROR_INVALID_OUTPUT_RANGE:
                other = _fallback(sanitized[i])
            out[i] = min(cycles, other)
        else:
            out[i] = _extrapolate(sanitized[i], cycles, other)
    return out


@njit(cache=True)
def _extrapolate(workload, c32, c64) -> int:
    """Linear extrapolation from the 32- and 64-channel costs, in float32 (docs/vpunn.md §2.1 step 4); the
    theoretical cycles if either failed or the result is negative."""
    if c32 == ERROR_INVALID_OUTPUT_RANGE or c64 == ERROR_INVALID_OUTPUT_RANGE:
        return _fallback(workload)
    a, b = np.float32(c32), np.float32(c64)
    slope = (b - a) / np.float32(32)
    cycles = np.int64(np.ceil(slope * np.float32(workload[F.out_c]) + (a - slope * np.float32(32))))
    return _fallback(workload) if cycles < 0 else cycles


@njit(cache=True)
def _fallback(workload) -> int:
    """The theoretical cycles `DPU()` returns for an NN error: the runtime's uint64 value cut to its uint32 result."""
    return theoretical_row(workload, True) & 0xFFFFFFFF
