"""The layer model (`VPULayerCostModel::Layer`): a whole layer split over tiles, then into DPU workloads per tile.

docs/vpunn.md §8, with the VPU 4.0 / NPU 5.0 specifics (more strategies, modes, broadcast).
One `LayerModel.cost` call costs any number of (layer, strategy) requests in three passes: plan every tile and
every candidate split in Python, cost all distinct workloads in one batched `DpuModel.cost`, then reduce (list
schedule per split, best split per tile, slowest tile per layer, DMA terms, best strategy). Tile results are cached
by the tile's exact description, so a warm network costs nearly nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from .devices import DeviceConfig, device_config
from .dma import DmaModel, theoretical_dma_cycles
from .dpu import DpuModel
from .enums import (ActivationFunction, DataType, DMADirection, ExecutionMode, ISIStrategy, Layout, Operation,
                    Swizzling, VPUDevice, VPUTilingStrategy)
from .errors import ERROR_TILE_OUTPUT, error_name, is_error
from .sanitizer import check, dtype_bytes, layer_fixups, weights_bytes
from .workload import F, DPUWorkload, workloads_to_matrix

__all__ = ["LayerModel", "LayerRequest", "LayerResult", "TileResult", "dpu_layer", "TILING_STRATEGIES",
           "tiling_strategies"]

_T = VPUTilingStrategy
_STRATEGIES_2X = (_T.NONE, _T.SOH_Overlapped, _T.SOK)
#: per device, the strategies AUTO_MIN takes the minimum over, in the runtime's order (SOHW and SOHK are listed
#: from 4.0 on but not implemented: they always end in ERROR_TILE_OUTPUT)
TILING_STRATEGIES: dict[VPUDevice, tuple[VPUTilingStrategy, ...]] = {
    VPUDevice.VPU_2_0: _STRATEGIES_2X, VPUDevice.VPU_2_7: _STRATEGIES_2X,
    VPUDevice.VPU_4_0: _STRATEGIES_2X + (_T.SOW, _T.SOHW, _T.SOHK, _T.SOHO_K_SWITCH),
    VPUDevice.NPU_5_0: _STRATEGIES_2X + (_T.SOW, _T.SOHW, _T.SOHK, _T.SOHO_K_SWITCH),
}
_ALL_MODES = (ExecutionMode.CUBOID_16x16, ExecutionMode.CUBOID_8x16, ExecutionMode.CUBOID_4x16)
_ONLY_16, _ONLY_8 = (ExecutionMode.CUBOID_16x16,), (ExecutionMode.CUBOID_8x16,)
# candidate MPE modes of the cuboid devices per operation; an operation not listed tries all three
_MODES_27 = {Operation.CM_CONVOLUTION: _ONLY_16, Operation.DW_CONVOLUTION: _ONLY_16, Operation.AVEPOOL: _ONLY_16,
             Operation.MAXPOOL: _ONLY_16, Operation.ELTWISE: _ONLY_8}
_MODES = {VPUDevice.VPU_2_7: _MODES_27, VPUDevice.VPU_4_0: _MODES_27,
          VPUDevice.NPU_5_0: {**{op: m for op, m in _MODES_27.items() if op != Operation.CM_CONVOLUTION},
                              Operation.ELTWISE_MUL: _ONLY_8}}
# operations costed as one workload per tile when nDPU = 1
_NO_Z_SPLIT = (Operation.CONVOLUTION, Operation.ELTWISE, Operation.CM_CONVOLUTION, Operation.LAYER_NORM,
               Operation.ELTWISE_MUL)
_HW_GRID = {ExecutionMode.VECTOR: (16, 1), ExecutionMode.VECTOR_FP16: (4, 1)}  # others 4x4
_Z_SIZES = (16, 32, 48, 64, 80, 128, 144)
_DW_LIKE = (Operation.DW_CONVOLUTION, Operation.MAXPOOL, Operation.AVEPOOL)
_FP16 = (DataType.FLOAT16, DataType.BFLOAT16)


def tiling_strategies(device) -> tuple[VPUTilingStrategy, ...]:
    """The strategies `Layer(layer, nDPU, nTiles)` (AUTO_MIN) tries on a device."""
    return TILING_STRATEGIES[device_config(device).device]


def dpu_layer(device: VPUDevice, operation: Operation, in_whc: Sequence[int], out_whc: Sequence[int], *,
              kernel=(1, 1), stride=(1, 1), padding=(0, 0, 0, 0), dtype: DataType = DataType.UINT8,
              out_dtype: DataType | None = None, activation: ActivationFunction = ActivationFunction.NONE,
              batch: int = 1) -> DPUWorkload:
    """A `DPUWorkload` describing a whole layer with the device's defaults (layout, swizzling, MPE mode).

    kernel and stride are (W, H); padding is (top, bottom, left, right). The layer model tries every MPE mode
    itself; the one set here only matters for the single-workload API.
    """
    v20 = device == VPUDevice.VPU_2_0
    layout = Layout.ZMAJOR if v20 else Layout.ZXY
    swz = Swizzling.KEY_0 if v20 else Swizzling.KEY_5
    mode = (ExecutionMode.VECTOR_FP16 if dtype in _FP16 else ExecutionMode.MATRIX) if v20 \
        else ExecutionMode.CUBOID_16x16
    return DPUWorkload(
        device=device, operation=operation, in_w=in_whc[0], in_h=in_whc[1], in_c=in_whc[2], out_w=out_whc[0],
        out_h=out_whc[1], out_c=out_whc[2], in_b=batch, out_b=batch, in_dtype=dtype,
        out_dtype=dtype if out_dtype is None else out_dtype, in_layout=layout, out_layout=layout,
        k_w=kernel[0], k_h=kernel[1], s_w=stride[0], s_h=stride[1], pad_top=padding[0], pad_bottom=padding[1],
        pad_left=padding[2], pad_right=padding[3], execution_mode=mode,
        activation=activation,
        in_swizzling0=swz, in_swizzling1=swz, out_swizzling0=swz)


@dataclass(frozen=True)
class LayerRequest:
    """One `Layer(layer, strategy, nDPU, nTiles, input_in_ddr, output_in_ddr, prefetching)` call."""

    layer: DPUWorkload
    strategy: VPUTilingStrategy = VPUTilingStrategy.AUTO_MIN
    n_dpu: int = 1
    n_tiles: int = 1
    input_in_ddr: bool = False
    output_in_ddr: bool = False
    prefetching: bool = True


@dataclass(frozen=True)
class TileResult:
    """Best intra-tile split of one tile: cost, workload count, MPE mode, tile output and workload shapes."""

    cycles: int
    n_workloads: int
    mode: ExecutionMode | None
    out_shape: tuple[int, int, int]
    workload_shapes: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class LayerResult:
    """Result of one layer request: `cycles` (or an error code), the strategy that gave it, per-tile details.

    For AUTO_MIN, `strategy` is the winning strategy and `by_strategy` holds the result of every strategy of the
    device (`tiling_strategies`).
    """

    cycles: int
    strategy: VPUTilingStrategy
    tiles: tuple[TileResult, ...] = ()
    dpu_cycles: int = 0
    dma_cycles: int = 0
    by_strategy: tuple["LayerResult", ...] = field(default=(), compare=False)

    @property
    def error(self) -> str:
        return error_name(self.cycles)

    @property
    def valid(self) -> bool:
        return not self.error


def _halvings(m: int, cap: int) -> list[int]:
    """m / 2^i for 0 <= i < log2(m), where 2^i divides m and the quotient does not exceed cap."""
    if m <= 1:
        return []
    out, i = [], 0
    while i < math.log2(m):
        if m % (1 << i) == 0 and m >> i <= cap:
            out.append(m >> i)
        i += 1
    return out


def _counts(cap: int, n_dpu: int, ms: Sequence[int]) -> list[int]:
    counts = {1}
    counts.update(range(n_dpu, cap + 1, n_dpu))
    for m in ms:
        counts.update(_halvings(m, cap))
    return sorted(counts)


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class _Tile:
    """A tile as a template workload row plus the scalar fields the tiler needs."""

    __slots__ = ("row", "key", "op", "w", "h", "c", "cfg", "fp16")

    def __init__(self, row: np.ndarray, cfg: DeviceConfig):
        self.row = row
        self.key = row.tobytes()
        self.op = Operation(int(row[F.operation]))
        self.w, self.h, self.c = int(row[F.out_w]), int(row[F.out_h]), int(row[F.out_c])
        self.cfg = cfg
        self.fp16 = int(row[F.in_dtype]) in _FP16 or int(row[F.out_dtype]) in _FP16

    def modes(self) -> tuple[ExecutionMode, ...]:
        if self.cfg.device == VPUDevice.VPU_2_0:
            if self.fp16:
                return (ExecutionMode.VECTOR_FP16,)
            w, h = self.w, self.h
            vector = -(-w // 16) * h <= -(-w // 4) * -(-h // 4)
            return (ExecutionMode.VECTOR if vector else ExecutionMode.MATRIX,)
        return _MODES[self.cfg.device].get(self.op, _ALL_MODES)

    def candidates(self, n_dpu: int):
        """Candidate splits in the runtime's order: (mode, [((w, h, c), count), ...]) run-length lists."""
        v27 = self.cfg.device >= VPUDevice.VPU_2_7
        hw_ok = n_dpu > 1 and not (v27 and self.op in _DW_LIKE)
        w, h, c = self.w, self.h, self.c
        out = []
        if hw_ok:
            for mode in self.modes():
                g_w, g_h = _HW_GRID.get(mode, (4, 4))
                m = (h // g_w) * (w // g_h)  # the runtime crosses the axes here
                for n in _counts(min(128, m), n_dpu, (m,)):
                    if n == 1:
                        out.append((mode, [((w, h, c), 1)]))
                        continue
                    for cols, rows in self._pairs(n):
                        if cols > w or rows > h:
                            continue
                        out.append((mode, self._hw_split(cols, rows, g_w, g_h)))
        for mode in self.modes():
            # a Z split needs whole 16-channel groups
            single = (n_dpu == 1 and self.op in _NO_Z_SPLIT) or c < 16 or c % 16 \
                or (not v27 and mode != ExecutionMode.VECTOR and self.op != Operation.CONVOLUTION)
            counts = [1] if single else _counts(min(128, -(-c // 16)), n_dpu, [-(-c // z) for z in _Z_SIZES])
            for n in counts:
                if n == 1:
                    out.append((mode, [((w, h, c), 1)]))
                    continue
                per = _round_up(-(-c // n), 16)
                full, rest = divmod(c, per)
                if full + (rest > 0) < n:  # chunks run out: zero-channel workloads fail
                    continue
                if v27 and self.op in _DW_LIKE and (per not in (16, 32, 64) or rest not in (0, 16, 32, 64)):
                    continue
                runs = [((w, h, per), full)]
                if rest:
                    runs.append(((w, h, rest), 1))
                out.append((mode, runs))
        return out

    @staticmethod
    def _pairs(n: int):
        for i in range(1, math.isqrt(n) + 1):
            if n % i == 0:
                yield n // i, i
                yield i, n // i

    def _hw_split(self, cols: int, rows: int, g_w: int, g_h: int):
        w, h, c = self.w, self.h, self.c
        width, height = _round_up(-(-w // cols), g_w), _round_up(-(-h // rows), g_h)
        nx, ny = -(-w // width), -(-h // height)
        last_w, last_h = w - (nx - 1) * width, h - (ny - 1) * height
        runs = []
        for y in range(ny):
            hh = height if y < ny - 1 else last_h
            if nx > 1:
                runs.append(((width, hh, c), nx - 1))
            runs.append(((last_w, hh, c), 1))
        return runs


# (input size, output size, kernel, stride, pad before, pad after, output memory size) columns of a split axis
_H_AXIS = (F.in_h, F.out_h, F.k_h, F.s_h, F.pad_top, F.pad_bottom, F.mem_h)
_W_AXIS = (F.in_w, F.out_w, F.k_w, F.s_w, F.pad_left, F.pad_right, F.mem_w)


def _overlapped_split(row: np.ndarray, axis: tuple, n_tiles: int, broadcast: bool) -> list[np.ndarray]:
    """SOH-overlapped along H (SOHO, SOHO_K_SWITCH) or W (SOW): output slices of ceil(out/nTiles), each with the
    input rows it needs (running count, the tiles overlap; no halo), isi CLUSTERING.

    broadcast (SOHO_K_SWITCH): every tile writes to all tiles, owt = number of tiles, and its output memory spans
    the whole layer output along the axis (CMX check only).
    """
    col_in, col_out, col_k, col_s, col_begin, col_end, col_mem = axis
    size_out, k, s = int(row[col_out]), int(row[col_k]), int(row[col_s])
    pad_end = int(row[col_end])
    desired = -(-size_out // n_tiles)
    avail, pad, left = int(row[col_in]) + int(row[col_begin]), int(row[col_begin]), size_out
    tiles = []
    while left > 0 and len(tiles) < n_tiles:
        o = min(desired, left)
        last = o == left
        need = (o - 1) * s + k
        end = pad_end if last else 0
        size_in = need - pad
        if need > avail:  # reached the layer's end: use part of its end padding
            used = min(need - avail, pad_end)
            size_in -= used
            if not last:
                end = used
        tile = row.copy()
        tile[[col_in, col_out, col_begin, col_end, F.isi_strategy]] = (
            max(0, size_in), o, pad, end, ISIStrategy.CLUSTERING)
        tile[[F.mem_w, F.mem_h, F.mem_c]] = tile[[F.out_w, F.out_h, F.out_c]]
        if broadcast:
            tile[col_mem] = size_out
        tiles.append(tile)
        avail -= o * s
        pad = max(0, pad - o * s)
        left -= o
    if broadcast:
        for tile in tiles:
            tile[F.output_write_tiles] = len(tiles)
    return tiles


def _sok_split(row: np.ndarray, n_tiles: int) -> list[np.ndarray]:
    """SOK: round_up(ceil(C_out/nTiles), 16) output channels per tile, input recomputed from the output, isi
    SPLIT_OVER_K, owt = number of tiles; broadcast: every tile's output memory is the full layer output."""
    c_out = int(row[F.out_c])
    per = _round_up(-(-c_out // n_tiles), 16)
    chunks = [c for c in (min(per, c_out - i * per) for i in range(n_tiles)) if c > 0]
    tiles = np.repeat(row[None, :], len(chunks), axis=0)
    tiles[:, F.out_c] = chunks
    _recompute_input(tiles)
    tiles[:, F.isi_strategy], tiles[:, F.output_write_tiles] = ISIStrategy.SPLIT_OVER_K, len(chunks)
    tiles[:, [F.mem_w, F.mem_h, F.mem_c]] = row[[F.out_w, F.out_h, F.out_c]]
    return list(tiles)


def _recompute_input(m: np.ndarray) -> None:
    """Input W, H (and C) of tiles or workloads from their output, in place: `(out - 1)·s + k - pads` (0 if not
    positive); C_in stays for CONV and CM_CONV, whose kernels read every input channel, else it is C_out."""
    pads = m[:, [F.pad_top, F.pad_bottom, F.pad_left, F.pad_right]]
    m[:, F.in_w] = np.maximum(0, (m[:, F.out_w] - 1) * m[:, F.s_w] + m[:, F.k_w] - pads[:, 2] - pads[:, 3])
    m[:, F.in_h] = np.maximum(0, (m[:, F.out_h] - 1) * m[:, F.s_h] + m[:, F.k_h] - pads[:, 0] - pads[:, 1])
    keep_cin = np.isin(m[:, F.operation], (Operation.CONVOLUTION, Operation.CM_CONVOLUTION))
    m[:, F.in_c] = np.where(keep_cin, m[:, F.in_c], m[:, F.out_c])


def _schedule(costs: list[int], counts: list[int], n_proc: int) -> int:
    """Greedy in-order list schedule: each workload to the least-loaded processor; the largest load."""
    if n_proc == 1:
        return sum(c * k for c, k in zip(costs, counts))
    loads = [0] * n_proc
    for cost, k in zip(costs, counts):
        for _ in range(k):
            j = loads.index(min(loads))
            loads[j] += cost
    return max(loads)


class LayerModel:
    """VPUNN's layer model on top of a `DpuModel` (and optionally a `DmaModel` for the DMA terms).

    Args:
        dpu: the DPU model that costs every workload.
        dma: the DMA NN used for weight and activation transfers; None means the theoretical DMA model.
    """

    def __init__(self, dpu: DpuModel, dma: DmaModel | None = None):
        self.dpu = dpu
        self.dma = dma
        # (tile bytes, n_dpu) -> TileResult
        self._tiles: dict[tuple[bytes, int], TileResult] = {}

    def clear_cache(self) -> None:
        self._tiles.clear()
        self.dpu.clear_cache()
        if self.dma is not None:
            self.dma.clear_cache()

    def layer(self, layer: DPUWorkload, strategy=VPUTilingStrategy.AUTO_MIN, n_dpu: int = 1, n_tiles: int = 1,
              input_in_ddr: bool = False, output_in_ddr: bool = False, prefetching: bool = True) -> LayerResult:
        """One layer, like `VPULayerCostModel::Layer`."""
        return self.cost([LayerRequest(layer, VPUTilingStrategy(strategy), n_dpu, n_tiles, input_in_ddr,
                                       output_in_ddr, prefetching)])[0]

    def cost(self, requests: Sequence[LayerRequest]) -> list[LayerResult]:
        """Cost many layer requests in one batch (AUTO_MIN requests cost every strategy of their device)."""
        flat: list[LayerRequest] = []
        for req in requests:
            if req.strategy == VPUTilingStrategy.AUTO_MIN:
                flat.extend(replace(req, strategy=s) for s in tiling_strategies(req.layer.device))
            else:
                flat.append(req)
        results = self._cost_flat(flat)
        out, pos = [], 0
        for req in requests:
            if req.strategy == VPUTilingStrategy.AUTO_MIN:
                n = len(tiling_strategies(req.layer.device))
                each = tuple(results[pos:pos + n])
                pos += n
                # the first of equal costs wins; error codes are huge, so if all fail the smallest code wins
                best = min(each, key=lambda r: r.cycles)
                out.append(replace(best, by_strategy=each))
            else:
                out.append(results[pos])
                pos += 1
        return out

    # -- planning -------------------------------------------------------------------------------------------

    @staticmethod
    def _split_layer(row: np.ndarray, strategy: VPUTilingStrategy, n_tiles: int) -> list[np.ndarray]:
        """The tile rows of a validated, fixed-up layer (tiles without output dropped; none for SOHW / SOHK)."""
        if strategy == VPUTilingStrategy.NONE:
            tile = row.copy()
            tile[F.isi_strategy] = ISIStrategy.CLUSTERING
            tile[[F.mem_w, F.mem_h, F.mem_c]] = tile[[F.out_w, F.out_h, F.out_c]]
            return [tile] * n_tiles
        if strategy in (VPUTilingStrategy.SOH_Overlapped, VPUTilingStrategy.SOHO_K_SWITCH):
            return _overlapped_split(row, _H_AXIS, n_tiles, strategy == VPUTilingStrategy.SOHO_K_SWITCH)
        if strategy == VPUTilingStrategy.SOW:
            return _overlapped_split(row, _W_AXIS, n_tiles, False)
        if strategy == VPUTilingStrategy.SOK:
            return _sok_split(row, n_tiles)
        return []

    def _cost_flat(self, requests: list[LayerRequest]) -> list[LayerResult]:
        n = len(requests)
        if n == 0:
            return []
        raw = workloads_to_matrix([r.layer for r in requests])
        layers = layer_fixups(raw)
        strategies = np.array([r.strategy for r in requests], dtype=np.int64)
        n_tiles = np.array([r.n_tiles for r in requests], dtype=np.int64)
        checked = layers.copy()
        checked[:, F.isi_strategy] = np.where(strategies == VPUTilingStrategy.SOK, ISIStrategy.SPLIT_OVER_K,
                                              ISIStrategy.CLUSTERING)
        checked[:, F.output_write_tiles] = n_tiles
        layer_code = check(checked, "layer", strategies, n_tiles)

        # tiles of every valid layer, checked in one batch
        tile_rows, owner = [], []
        for i in np.nonzero(layer_code == 0)[0]:
            for t in self._split_layer(layers[i], VPUTilingStrategy(int(strategies[i])), int(n_tiles[i])):
                tile_rows.append(t)
                owner.append(i)
        tile_codes = check(np.array(tile_rows), "tile") if tile_rows else np.zeros(0, np.int64)
        per_layer: dict[int, list[int]] = {}
        for k, i in enumerate(owner):
            per_layer.setdefault(i, []).append(k)

        # plan the tiles that passed their checks and are not cached
        plans: dict[tuple[bytes, int], tuple[_Tile, list]] = {}
        for i, ks in per_layer.items():
            if any(tile_codes[k] for k in ks):
                continue
            cfg = device_config(int(layers[i][F.device]))
            for k in ks:
                key = (tile_rows[k].tobytes(), requests[i].n_dpu)
                if key not in self._tiles and key not in plans:
                    tile = _Tile(tile_rows[k], cfg)
                    plans[key] = (tile, tile.candidates(requests[i].n_dpu))
        self._evaluate(plans)

        results = []
        for i, req in enumerate(requests):
            if layer_code[i]:
                results.append(LayerResult(int(layer_code[i]), req.strategy))
                continue
            ks = per_layer.get(i, [])
            if not ks:  # the strategy produced no tile (SOHW, SOHK)
                results.append(LayerResult(ERROR_TILE_OUTPUT, req.strategy))
                continue
            failed = [k for k in ks if tile_codes[k]]
            if failed:
                zero = tuple(TileResult(0, 0, None, self._whc(tile_rows[k])) for k in ks)
                results.append(LayerResult(int(tile_codes[failed[0]]), req.strategy, zero))
                continue
            tiles = tuple(self._tiles[(tile_rows[k].tobytes(), req.n_dpu)] for k in ks)
            dpu = max(t.cycles for t in tiles)
            results.append(LayerResult(dpu, req.strategy, tiles, dpu_cycles=dpu))
        return self._add_dma(requests, layers, tile_rows, per_layer, results)

    @staticmethod
    def _whc(row: np.ndarray) -> tuple[int, int, int]:
        return int(row[F.out_w]), int(row[F.out_h]), int(row[F.out_c])

    def _evaluate(self, plans: dict) -> None:
        """Cost every workload of every planned split in one batch; store each tile's best split."""
        if not plans:
            return
        index: dict[tuple, int] = {}
        templates, variants = [], []
        for key, (tile, cands) in plans.items():
            t = len(templates)
            templates.append(tile.row)
            for mode, runs in cands:
                for shape, _ in runs:
                    wkey = (t, mode, shape)
                    if wkey not in index:
                        index[wkey] = len(variants)
                        variants.append((t, int(mode)) + shape)
        v = np.array(variants, dtype=np.int64)
        m = np.array(templates)[v[:, 0]]
        m[:, F.execution_mode] = v[:, 1]
        m[:, F.out_w], m[:, F.out_h], m[:, F.out_c] = v[:, 2], v[:, 3], v[:, 4]
        _recompute_input(m)
        m[:, F.in_b] = m[:, F.out_b]
        cycles = self.dpu.cost(m).tolist()
        bad = is_error(np.array(cycles)).tolist() if cycles else []
        for t, (key, (tile, cands)) in enumerate(plans.items()):
            best = None
            for mode, runs in cands:
                ids = [index[(t, mode, shape)] for shape, _ in runs]
                if any(bad[j] for j in ids):
                    continue
                cost = _schedule([cycles[j] for j in ids], [k for _, k in runs], tile.cfg.dpus_per_tile)
                if cost <= 0:  # a valid 0-cycle DPU() result, but the tiler rejects a split that costs nothing
                    continue
                if best is None or cost < best[0]:
                    best = (cost, mode, runs)
            if best is None:
                self._tiles[key] = TileResult(ERROR_TILE_OUTPUT, 0, None, (tile.w, tile.h, tile.c))
                continue
            cost, mode, runs = best
            shapes = tuple(shape for shape, k in runs for _ in range(k))
            self._tiles[key] = TileResult(int(cost), len(shapes), mode, (tile.w, tile.h, tile.c), shapes[:40])

    # -- DMA ------------------------------------------------------------------------------------------------

    def _add_dma(self, requests, layers, tile_rows, per_layer, results) -> list[LayerResult]:
        """Weights (prefetching=False) and activation (input/output in DDR) transfers, added to valid costs.

        Weight transfers (one per tile, its weights tensor as counted in CMX) are list-scheduled on the device's DMA
        ports; activation transfers (the layer's own input and output) add.
        The first DMA error replaces the result.
        """
        wanted = [i for i, r in enumerate(requests) if results[i].valid and
                  (not r.prefetching or r.input_in_ddr or r.output_in_ddr)]
        if not wanted:
            return results
        need_w = [k for i in wanted if not requests[i].prefetching for k in per_layer[i]]
        w_bytes = dict(zip(need_w, weights_bytes(np.array([tile_rows[k] for k in need_w])).tolist())) \
            if need_w else {}
        transfers = []  # (request index, is weights, device, bytes, direction)
        for i in wanted:
            req = requests[i]
            device = int(layers[i][F.device])
            if not req.prefetching:
                for k in per_layer[i]:
                    transfers.append((i, True, device, w_bytes[k], DMADirection.DDR2CMX))
            raw = workloads_to_matrix([req.layer])[0]
            if req.input_in_ddr:
                n = raw[F.in_w] * raw[F.in_h] * raw[F.in_c] * raw[F.in_b] * dtype_bytes(int(raw[F.in_dtype]))
                transfers.append((i, False, device, int(math.ceil(n)), DMADirection.DDR2CMX))
            if req.output_in_ddr:
                n = raw[F.out_w] * raw[F.out_h] * raw[F.out_c] * raw[F.out_b] * dtype_bytes(int(raw[F.out_dtype]))
                transfers.append((i, False, device, int(math.ceil(n)), DMADirection.CMX2DDR))
        costs = self._dma_cycles(transfers)
        weights: dict[int, list[int]] = {i: [] for i in wanted}
        activations: dict[int, list[int]] = {i: [] for i in wanted}
        for (i, is_weights, *_), c in zip(transfers, costs):
            (weights if is_weights else activations)[i].append(c)
        out = list(results)
        for i in wanted:
            errors = [c for c in weights[i] + activations[i] if is_error(c)]
            if errors:
                out[i] = replace(results[i], cycles=int(errors[0]))
                continue
            ports = device_config(int(layers[i][F.device])).dma_ports
            dma = (_schedule(weights[i], [1] * len(weights[i]), ports) if weights[i] else 0) + sum(activations[i])
            out[i] = replace(results[i], cycles=results[i].dpu_cycles + dma, dma_cycles=dma)
        return out

    def _dma_cycles(self, transfers) -> list[int]:
        if not transfers:
            return []
        devices = np.array([t[2] for t in transfers])
        if self.dma is not None:  # a 1-D transfer of the model's workload type; another device's is an error
            return self.dma.cost_1d(devices, [t[3] for t in transfers], [t[4] for t in transfers]).tolist()
        out = np.zeros(len(transfers), dtype=np.int64)
        for device in np.unique(devices):
            sel = np.nonzero(devices == device)[0]
            out[sel] = theoretical_dma_cycles(VPUDevice(int(device)), [transfers[j][3] for j in sel],
                                              [transfers[j][4] for j in sel])
        return out.tolist()
