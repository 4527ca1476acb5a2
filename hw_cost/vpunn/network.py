"""`VpunnCostModel`: latency of whole torch networks on VPU 2.0 / 2.7 / 4.0 and NPU 5.0 from the VPUNN layer model.

Every `LayerSpec` of `hw_cost.extract_layers` is costed by one documented rule (the `rule` column of the
per-layer table), never dropped:

* **dpu** - conv, depthwise conv, linear, add, max/avg pool run on the DPU through the layer model
  (`LayerModel`, default AUTO_MIN over the device's strategies: clustering / SOH-overlapped / SOK, and from 4.0
  on also SOW and SOHO_K_SWITCH). Shapes go to VPUNN's W, H, C order, batch 1 (a batch of N costs N times one
  image). Channels are padded up to multiples of 16, except that a conv with 1-15 input channels keeps them
  from VPU 2.7 on (VPUNN runs it as CM_CONVOLUTION); VPU 2.0 has no CM_CONV in its layer model, so there the
  input channels are padded to 16 too. A linear layer is a 1x1 conv.
  A grouped (not depthwise) conv costs the cheaper of a dense conv with block-diagonal weights and its groups
  run one after another. relu/relu6 fuse as RELU, leaky_relu as LRELU.
* **dpu+act** - any other fused activation (hardswish, sigmoid, silu, gelu, tanh, ...): the DPU layer without
  activation plus a SHAVE pass over the output, costed by the memory-bound rule.
* **dpu-split KxH** - a layer no strategy can fit in CMX (ERROR_INPUT_TOO_BIG, common on VPU 2.0 at 224x224)
  is cut, as a compiler would, into K output-channel chunks x H output-row slices (slices keep their share of
  the padding and overlap like SOH tiles), the smallest cut whose pieces fit CMX; the pieces run one after
  another and their costs add. Its tensors cannot stay in CMX: each piece reads its input from DDR and writes
  its output to DDR, costed by the layer model's DMA terms (Intel's `Layer(..., input_in_ddr, output_in_ddr)`),
  rule **dpu-split KxH+ddr**.
* **dpu-theoretical** - a DPU layer the layer model rejects for another reason (e.g. a kernel above 15 or a
  stride above 8) costs VPUNN's theoretical cycles of the whole layer as one workload, divided by the DPUs
  that would share it (tiles x DPUs per tile). Where the runtime's unsigned arithmetic would wrap around (its
  padding-skip estimate above the MAC count, small padded convolutions on 4.0 / 5.0) the count is taken as 0
  skipped MACs instead of ~9e15 cycles, so the fallback never ranks a layer absurdly.
* **memory-bound** - ops the DPU does not run (pixel_shuffle, global_avgpool, upsample, concat, mul,
  standalone act / batchnorm, other): bytes read + bytes written moved once through CMX at the theoretical DMA
  rate (VPUNN's legacy DMA model, CMX->CMX, latency included). Reads are the input tensor (mul: input and an
  output-sized operand; concat: the output-sized inputs), writes the output tensor. When those bytes exceed the
  CMX of all tiles, they move DDR->CMX and CMX->DDR instead, at the DDR rate: rule **memory-bound+ddr**.

Where activations live is the option `activations_in_ddr`: "auto" (default) as above, True for every DPU
layer, False never (every tensor assumed in CMX, as before spills were modelled).

Cycles are DPU clock cycles (700 MHz on VPU 2.0, 1300 MHz on VPU 2.7, 1700 MHz on VPU 4.0, 1950 MHz on NPU 5.0).

Tiles per layer default to the product's tile count: 1 on VPU 2.0 (with 5 DPUs), 2 on VPU 2.7 (NPU 3720),
6 on VPU 4.0 (Lunar Lake's NPU 4) and 3 on NPU 5.0 (Panther Lake's NPU 5, twice the MACs per tile); Intel's
4.0 / 5.0 layer tests and reference vectors use 4, which `n_tiles=4` reproduces.

"""
from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from enum import Enum
from pathlib import Path
from typing import Sequence

import numpy as np
import torch.nn as nn

from ..cost_model import Block, CostModel
from ..layers import LayerSpec, extract_layers
from ..registry import register_cost_model
from .devices import device_config
from .dma import DmaModel, theoretical_dma_cycles
from .dpu import DpuModel
from .enums import ActivationFunction, DataType, DMADirection, ExecutionMode, Operation, VPUDevice, VPUTilingStrategy, \
    parse_enum
from .errors import ERROR_INPUT_TOO_BIG, VpunnError
from .layer import LayerModel, LayerRequest, LayerResult, dpu_layer, tiling_strategies
from .paths import MODEL_FILES, resolve_model_file
from .reader import VpunnNetwork, read_vpunn
from .sanitizer import cmx_required, sanitize
from .theoretical import theoretical_cycles
from .workload import F, DPUWorkload, workloads_to_matrix

__all__ = ["VpunnCostModel", "LayerCost", "NetworkCost", "load_vpunn_cost_model", "read_model_cached",
           "DdrPolicy", "DEVICE_MODELS", "VpunnOptions"]

log = logging.getLogger(__name__)

#: (n_tiles, n_dpu) of each device's product (see the module docstring)
_DEFAULT_TILES = {VPUDevice.VPU_2_0: (1, 5), VPUDevice.VPU_2_7: (2, 1), VPUDevice.VPU_4_0: (6, 1),
                  VPUDevice.NPU_5_0: (3, 1)}
#: spec name -> device, DPU model and DMA model (MODEL_FILES keys); VPU 2.0 has no DMA network of its own
DEVICE_MODELS = {"VPU_2_0": (VPUDevice.VPU_2_0, "VPU_2_0", "DMA_2_7"),
                 "VPU_2_7": (VPUDevice.VPU_2_7, "VPU_2_7", "DMA_2_7"),
                 "VPU_4_0": (VPUDevice.VPU_4_0, "VPU_4_0", "DMA_4_0"),
                 "NPU_5_0": (VPUDevice.NPU_5_0, "NPU_5_0", "DMA_5_0")}
#: input interface of a DPU model file -> the device it was trained for
_INTERFACE_DEVICES = {10: VPUDevice.VPU_2_0, 11: VPUDevice.VPU_2_7, 4011: VPUDevice.VPU_4_0, 5114: VPUDevice.NPU_5_0}
_STRATEGY_ALIASES = {"SOHO": "SOH_Overlapped", "CLUSTERING": "NONE", "AUTO": "AUTO_MIN"}
_ACTIVATIONS = {"none": ActivationFunction.NONE, "relu": ActivationFunction.RELU, "relu6": ActivationFunction.RELU,
                "leaky_relu": ActivationFunction.LRELU}
_DPU_OPS = ("conv", "dwconv", "linear", "add", "maxpool", "avgpool")
_MAX_SPLIT_ROUNDS = 6

class DdrPolicy(str, Enum):
    """Where the activations of DPU layers live (see the module docstring)."""

    AUTO = "auto"      #: tensors that do not fit the CMX of the layer's tiles go through DDR
    ALWAYS = "always"  #: every DPU layer's input and output
    NEVER = "never"    #: none: every tensor is assumed in CMX (as before spills were modelled)

    @classmethod
    def parse(cls, value) -> "DdrPolicy":
        """A policy from its name, or from True (ALWAYS) / False (NEVER)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            return cls.ALWAYS if value else cls.NEVER
        try:
            return cls(str(value).lower())
        except ValueError:
            raise VpunnError(f"activations_in_ddr must be one of {', '.join(p.value for p in cls)} (or true / false), "
                             f"not {value!r}") from None


@dataclass(frozen=True)
class VpunnOptions:
    """The options of a VPUNN cost model (`load_vpunn_cost_model(spec, **options)`; unknown ones are rejected).

    Args:
        model_dir: folder of .vpunn files (default: $VPUNAS_VPUNN_DIR, else the files shipped with vpunas).
        dtype: "uint8" or "fp16": the precision `extract_layers` gives the layers.
        fast: use the .fast model file (same as the ".fast" suffix of the spec).
        n_tiles: tiles per layer (None: 1 on VPU 2.0, 2 on VPU 2.7, 6 on VPU 4.0, 3 on NPU 5.0).
        n_dpu: the layer model's nDPU argument (None: 5 on VPU 2.0, else 1).
        strategy: tiling strategy: AUTO_MIN (the best of the device's), NONE, SOHO or SOK; from VPU 4.0 on also
            SOW or SOHO_K_SWITCH.
        weights_dma: add the weights DMA of every layer (prefetching off).
        activations_in_ddr: a `DdrPolicy` (or its name, or true / false).
        dma: "theoretical" or "nn" (the device's DMA network: dma_2_7, dma_4_0 or dmann_5_0) for DMA transfers.
        blas_threads: BLAS threads of the NN pass (1 is robust on shared cores; None: the library's).
    """

    model_dir: str | None = None
    dtype: str = "uint8"
    fast: bool = False
    n_tiles: int | None = None
    n_dpu: int | None = None
    strategy: str = "AUTO_MIN"
    weights_dma: bool = False
    activations_in_ddr: DdrPolicy = DdrPolicy.AUTO
    dma: str = "theoretical"
    blas_threads: int | None = 1

    def __post_init__(self):
        if self.dtype not in ("uint8", "fp16"):
            raise VpunnError(f"dtype must be 'uint8' or 'fp16', not {self.dtype!r}")
        if self.dma not in ("theoretical", "nn"):
            raise VpunnError(f"dma must be 'theoretical' or 'nn', not {self.dma!r}")
        object.__setattr__(self, "activations_in_ddr", DdrPolicy.parse(self.activations_in_ddr))

    @classmethod
    def from_options(cls, options: dict) -> "VpunnOptions":
        """The options given by name, unknown names refused with the list of valid ones."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise VpunnError(f"unknown vpunn cost-model option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        return cls(**options)

    @property
    def tiling_strategy(self) -> VPUTilingStrategy:
        return parse_enum(VPUTilingStrategy, str(self.strategy).upper(), "strategy", _STRATEGY_ALIASES)


_NETWORK_CACHE: dict[tuple[str, int, int], VpunnNetwork] = {}


def read_model_cached(path) -> VpunnNetwork:
    """`read_vpunn`, once per file version: parsed files are immutable and shared by cost models."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _NETWORK_CACHE:
        _NETWORK_CACHE[key] = read_vpunn(path)
    return _NETWORK_CACHE[key]


@dataclass(frozen=True)
class LayerCost:
    """Cost of one layer: total cycles (DPU clock), milliseconds, the rule used, and for DPU layers the strategy."""

    spec: LayerSpec
    cycles: int
    ms: float
    rule: str
    strategy: str = ""
    detail: str = ""


@dataclass(frozen=True)
class NetworkCost:
    """Per-layer costs of a network and the totals at the device clock."""

    layers: tuple[LayerCost, ...]
    model: str
    clock_mhz: float
    batch: int = 1

    @property
    def total_cycles(self) -> int:
        return sum(lay.cycles for lay in self.layers)

    @property
    def ms(self) -> float:
        return self.total_cycles / (self.clock_mhz * 1e3)

    @property
    def fps(self) -> float:
        return self.batch * 1e3 / self.ms if self.ms > 0 else float("inf")

    def table(self) -> str:
        """A plain-text per-layer table with the totals."""
        head = f"{'#':>3}  {'layer':<34} {'op':<14} {'in (NCHW)':<18} {'out (NCHW)':<18} {'rule':<18} " \
               f"{'strategy':<15} {'cycles':>10} {'ms':>9}"
        lines = [head, "-" * len(head)]
        shape = lambda s: "x".join(map(str, s))  # noqa: E731
        for i, lay in enumerate(self.layers):
            s = lay.spec
            op = s.op if s.activation == "none" else f"{s.op}+{s.activation}"
            lines.append(f"{i:>3}  {s.name[:34]:<34} {op[:14]:<14} {shape(s.in_shape):<18} {shape(s.out_shape):<18} "
                         f"{lay.rule:<18} {lay.strategy:<15} {lay.cycles:>10} {lay.ms:>9.4f}")
        lines.append("-" * len(head))
        lines.append(f"{self.model}: {len(self.layers)} layers, {self.total_cycles} cycles at {self.clock_mhz:g} MHz "
                     f"= {self.ms:.4f} ms, {self.fps:.1f} fps (batch {self.batch})")
        return "\n".join(lines)


@dataclass
class _Plan:
    """How one LayerSpec is costed: alternatives of (DPU layer, repeat) lists (the cheapest wins) + SHAVE work."""

    alternatives: list[list[tuple[DPUWorkload, int]]]
    extra_cycles: int
    rule: str


def _signature(spec: LayerSpec) -> tuple:
    """Everything that determines a layer's cost (`LayerSpec.signature` as a tuple: cheaper to build)."""
    return (spec.op, spec.in_shape, spec.out_shape, spec.kernel, spec.stride, spec.padding, spec.groups,
            spec.activation, spec.dtype)


def _pad16(c: int) -> int:
    return max(16, -(-c // 16) * 16)


class VpunnCostModel(CostModel):
    """Network latency on VPU 2.0 / 2.7 / 4.0 / NPU 5.0 from Intel's VPUNN models, in numpy (see the module docstring).

    Args:
        device: VPU_2_0, VPU_2_7, VPU_4_0 or NPU_5_0.
        dpu: the DPU model (vpu_2_x[.fast].vpunn, vpu_4_0.vpunn, vpu_5_1.vpunn).
        name: the spec recorded with results, e.g. "vpunn:VPU_2_7".
        options: `VpunnOptions` (dtype, tiles and DPUs of the layer model, tiling strategy, weights DMA, where
            activations live); those that choose files (`model_dir`, `fast`, `dma`, `blas_threads`) are the loader's.
        dma: DmaModel for the DMA terms, None for the theoretical DMA model.
    """

    def __init__(self, device: VPUDevice, dpu: DpuModel, *, name: str = "", options: VpunnOptions = VpunnOptions(),
                 dma: DmaModel | None = None):
        self.device = VPUDevice(device)
        self.config = device_config(self.device)
        tiles, dpus = _DEFAULT_TILES[self.device]
        self.n_tiles = int(options.n_tiles or tiles)
        self.n_dpu = int(options.n_dpu or dpus)
        if self.n_tiles < 1 or self.n_dpu < 1:
            raise VpunnError(f"n_tiles and n_dpu must be at least 1 (got {self.n_tiles}, {self.n_dpu})")
        if self.n_tiles > max(self.config.owt_options):  # the layer model's broadcast limit
            raise VpunnError(f"the {self.device.name} layer model supports at most {max(self.config.owt_options)} "
                             f"tile(s), not {self.n_tiles}")
        self.name = name or f"vpunn:{self.device.name}"
        self.dtype = options.dtype
        self.strategy = options.tiling_strategy
        valid = tiling_strategies(self.device)
        if self.strategy != VPUTilingStrategy.AUTO_MIN and self.strategy not in valid:
            raise VpunnError(f"strategy {self.strategy.name} is not one of {self.device.name}'s: AUTO_MIN, "
                             + ", ".join(s.name for s in valid))
        self.weights_dma = bool(options.weights_dma)
        self.activations_in_ddr = options.activations_in_ddr
        self.layer_model = LayerModel(dpu, dma)
        self._layer_cache: dict[tuple, tuple[int, str, str, str]] = {}
        self._dpu_cache: dict[DPUWorkload, tuple[int, str, str]] = {}
        self._block_cache: dict[str, float] = {}

    @property
    def clock_mhz(self) -> float:
        return float(self.config.dpu_mhz)

    def __repr__(self) -> str:
        return (f"VpunnCostModel({self.name}, dtype={self.dtype}, n_tiles={self.n_tiles}, n_dpu={self.n_dpu}, "
                f"strategy={self.strategy.name})")

    def clear_cache(self) -> None:
        """Forget every cached result (layers, blocks, tiles, workloads): the next query is cold."""
        self._layer_cache.clear()
        self._dpu_cache.clear()
        self._block_cache.clear()
        self.layer_model.clear_cache()

    # -- public API -----------------------------------------------------------------------------------------

    def layer_costs(self, layers: Sequence[LayerSpec]) -> list[LayerCost]:
        """Cost of each layer, all uncached layers in one batch."""
        keys = [_signature(spec) for spec in layers]
        todo: dict[tuple, LayerSpec] = {}
        for key, spec in zip(keys, layers):
            if key not in self._layer_cache and key not in todo:
                todo[key] = spec
        if todo:
            self._cost_specs(todo)
        scale = 1.0 / (self.clock_mhz * 1e3)
        out = []
        for key, spec in zip(keys, layers):
            cycles, rule, strategy, detail = self._layer_cache[key]
            out.append(LayerCost(spec, cycles, cycles * scale, rule, strategy, detail))
        return out

    def network_cost(self, model: nn.Module | Sequence[LayerSpec], input_shape=None) -> NetworkCost:
        """Per-layer table and totals of a torch model (input_shape (N, C, H, W)) or of extracted layers."""
        if isinstance(model, nn.Module):
            if input_shape is None:
                raise VpunnError("network_cost of a torch model needs its input shape (N, C, H, W)")
            layers = extract_layers(model, input_shape, dtype=self.dtype)
        else:
            layers = list(model)
        batch = layers[0].in_shape[0] if layers else 1
        return NetworkCost(tuple(self.layer_costs(layers)), self.name, self.clock_mhz, batch)

    def model_latency_ms(self, model: nn.Module, input_shape) -> float:
        return self.network_cost(model, input_shape).ms

    def block_latencies_ms(self, blocks: Sequence[Block]) -> np.ndarray:
        """Latency of each block; uncached blocks are extracted and their layers costed in one batch."""
        missing = {b.key: b for b in blocks if b.key not in self._block_cache}
        if missing:
            per_block = {key: b.layers(self.dtype) for key, b in missing.items()}
            costs = self.layer_costs([spec for specs in per_block.values() for spec in specs])
            pos = 0
            for key, specs in per_block.items():
                self._block_cache[key] = sum(c.ms for c in costs[pos:pos + len(specs)])
                pos += len(specs)
        return np.array([self._block_cache[b.key] for b in blocks], dtype=np.float64)

    # -- lowering -------------------------------------------------------------------------------------------

    def _bytes(self, shape, dtype: str) -> int:
        return int(np.prod(shape)) * (1 if dtype == "uint8" else 2)

    def _memory_cycles(self, n_bytes: int) -> int:
        return int(theoretical_dma_cycles(self.device, n_bytes, DMADirection.CMX2CMX))

    def _shave_plan(self, spec: LayerSpec) -> "_Plan":
        """A memory-bound op: its bytes through CMX, or through DDR when they exceed the CMX of all tiles."""
        out = self._bytes(spec.out_shape, spec.dtype)
        read = {"concat": out, "mul": self._bytes(spec.in_shape, spec.dtype) + out}.get(
            spec.op, self._bytes(spec.in_shape, spec.dtype))
        in_ddr = self.activations_in_ddr is DdrPolicy.ALWAYS or (
            self.activations_in_ddr is DdrPolicy.AUTO and read + out > self.n_tiles * self.config.cmx_bytes)
        if not in_ddr:
            return _Plan([], self._memory_cycles(read + out), "memory-bound")
        ddr = int(theoretical_dma_cycles(self.device, read, DMADirection.DDR2CMX)
                  + theoretical_dma_cycles(self.device, out, DMADirection.CMX2DDR))
        return _Plan([], ddr, "memory-bound+ddr")

    def _cin(self, c: int) -> int:
        """Input channels of a conv: kept for 1-15 from VPU 2.7 on (CM_CONV), else padded to a multiple of 16."""
        return c if self.device != VPUDevice.VPU_2_0 and 1 <= c <= 15 else _pad16(c)

    def _lower(self, spec: LayerSpec) -> _Plan:
        if spec.op not in _DPU_OPS or (spec.op == "add" and spec.in_shape != spec.out_shape):
            return self._shave_plan(spec)
        n, c_in, h_in, w_in = spec.in_shape
        _, c_out, h_out, w_out = spec.out_shape
        act = _ACTIVATIONS.get(spec.activation)
        extra, rule = 0, "dpu"
        if act is None:  # an activation the PPE does not do: a SHAVE pass over the output
            act = ActivationFunction.NONE
            extra = self._memory_cycles(2 * self._bytes(spec.out_shape, spec.dtype))
            rule = "dpu+act"
        dtype = DataType.UINT8 if spec.dtype == "uint8" else DataType.FLOAT16
        kh, kw = spec.kernel
        sh, sw = spec.stride

        def make(op, cin, cout, kernel=(kw, kh), stride=(sw, sh), padding=spec.padding):
            return dpu_layer(self.device, op, (w_in, h_in, cin), (w_out, h_out, cout), kernel=kernel, stride=stride,
                             padding=padding, dtype=dtype, activation=act)

        if spec.op in ("conv", "linear") and spec.groups == 1:
            alts = [[(make(Operation.CONVOLUTION, self._cin(c_in), _pad16(c_out)), n)]]
        elif spec.op == "dwconv":
            alts = [[(make(Operation.DW_CONVOLUTION, _pad16(c_in), _pad16(c_out)), n)]]
        elif spec.op == "conv":
            g = spec.groups
            alts = [[(make(Operation.CONVOLUTION, self._cin(c_in), _pad16(c_out)), n)],
                    [(make(Operation.CONVOLUTION, self._cin(c_in // g), _pad16(c_out // g)), n * g)]]
        elif spec.op == "add":
            c = _pad16(c_out)
            alts = [[(make(Operation.ELTWISE, c, c, (1, 1), (1, 1), (0, 0, 0, 0)), n)]]
        else:
            op = Operation.MAXPOOL if spec.op == "maxpool" else Operation.AVEPOOL
            alts = [[(make(op, _pad16(c_in), _pad16(c_out)), n)]]
        return _Plan(alts, extra, rule)

    # -- costing --------------------------------------------------------------------------------------------

    def _cost_specs(self, todo: dict[tuple, LayerSpec]) -> None:
        plans = {key: self._lower(spec) for key, spec in todo.items()}
        needed = dict.fromkeys(lay for plan in plans.values() for alt in plan.alternatives for lay, _ in alt)
        self._cost_dpu_layers([lay for lay in needed if lay not in self._dpu_cache])
        for key, plan in plans.items():
            if not plan.alternatives:
                self._layer_cache[key] = (plan.extra_cycles, plan.rule, "", "")
                continue
            best = None
            for alt in plan.alternatives:
                cycles = sum(self._dpu_cache[lay][0] * k for lay, k in alt)
                if best is None or cycles < best[0]:
                    best = (cycles, alt)
            cycles, alt = best
            dpu_rule, strategy = self._dpu_cache[alt[0][0]][1:]
            rule = plan.rule if dpu_rule == "dpu" else dpu_rule + ("+act" if plan.extra_cycles else "")
            lay = alt[0][0]
            detail = (f"{lay.operation.name} {lay.in_w}x{lay.in_h}x{lay.in_c} -> {lay.out_w}x{lay.out_h}x{lay.out_c}"
                      + (f" x{alt[0][1]}" if alt[0][1] > 1 else ""))
            self._layer_cache[key] = (cycles + plan.extra_cycles, rule, strategy, detail)

    def _requests(self, layers: Sequence[DPUWorkload], split: bool = False) -> list[LayerRequest]:
        """Layer-model calls; `split` pieces of a layer too big for CMX have their tensors in DDR ("auto")."""
        ddr = self.activations_in_ddr is DdrPolicy.ALWAYS or (split and self.activations_in_ddr is DdrPolicy.AUTO)
        return [LayerRequest(lay, self.strategy, self.n_dpu, self.n_tiles, ddr, ddr, not self.weights_dma)
                for lay in layers]

    def _cost_dpu_layers(self, layers: list[DPUWorkload]) -> None:
        """Layer model on all layers at once; CMX overflows are split and costed in further batched rounds."""
        if not layers:
            return
        results = self.layer_model.cost(self._requests(layers))
        pending: dict[DPUWorkload, tuple[int, int]] = {}
        for lay, res in zip(layers, results):
            if res.valid:
                self._dpu_cache[lay] = (res.cycles, "dpu", res.strategy.name)
            elif self._too_big(res):
                split = self._first_fit(lay)
                if split is None:
                    self._theoretical(lay, res)
                else:
                    pending[lay] = split
            else:
                self._theoretical(lay, res)
        for _ in range(_MAX_SPLIT_ROUNDS):
            if not pending:
                break
            pieces = {lay: self._pieces(lay, *split) for lay, split in pending.items()}
            flat = [p for ps in pieces.values() for p in ps]
            results = iter(self.layer_model.cost(self._requests(flat, split=True)))
            retry = {}
            for lay, ps in pieces.items():
                res = [next(results) for _ in ps]
                k, h = pending[lay]
                if all(r.valid for r in res):
                    ddr = "+ddr" if self.activations_in_ddr is not DdrPolicy.NEVER else ""
                    self._dpu_cache[lay] = (sum(r.cycles for r in res), f"dpu-split {k}x{h}{ddr}",
                                            res[0].strategy.name)
                elif any(self._too_big(r) for r in res) and h < lay.out_h:
                    retry[lay] = (k, min(lay.out_h, 2 * h))
                elif any(self._too_big(r) for r in res) and lay.out_c // (2 * k) >= 16:
                    retry[lay] = (2 * k, h)
                else:
                    self._theoretical(lay, next(r for r in res if not r.valid))
            pending = retry
        for lay in pending:
            self._theoretical(lay, None)

    @staticmethod
    def _too_big(res: LayerResult) -> bool:
        return any(r.cycles == ERROR_INPUT_TOO_BIG for r in (res.by_strategy or (res,)))

    def _theoretical(self, lay: DPUWorkload, res: LayerResult | None) -> None:
        why = res.error if res is not None else "no split fits CMX"
        mode = ExecutionMode.CUBOID_16x16 if self.device != VPUDevice.VPU_2_0 else \
            (ExecutionMode.VECTOR_FP16 if lay.in_dtype == DataType.FLOAT16 else ExecutionMode.MATRIX)
        single = int(theoretical_cycles(sanitize(workloads_to_matrix([replace(lay, execution_mode=mode)])),
                                        wrap=False)[0])
        cycles = -(-single // (self.n_tiles * self.config.dpus_per_tile))
        log.info("VPUNN layer model rejects %s %sx%sx%s -> %sx%sx%s (%s): using theoretical cycles %d",
                 lay.operation.name, lay.in_w, lay.in_h, lay.in_c, lay.out_w, lay.out_h, lay.out_c, why, cycles)
        self._dpu_cache[lay] = (cycles, "dpu-theoretical", "")

    def _first_fit(self, lay: DPUWorkload) -> tuple[int, int] | None:
        """Smallest cut (fewest channel chunks first, then fewest row slices) whose largest piece fits CMX.

        The largest piece of a cut has ceil(C_out / k) channels (rounded up to 16) and ceil(H_out / h) output
        rows read from a full window of input rows; padding does not change the CMX footprint.
        """
        cuts, k = [], 1
        while True:
            per = _pad16(-(-lay.out_c // k))
            cuts += [(k, h, per, -(-lay.out_h // h)) for h in range(1, lay.out_h + 1) if (k, h) != (1, 1)]
            if per <= 16:
                break
            k *= 2
        cut = np.array(cuts, dtype=np.int64)
        rows = np.repeat(workloads_to_matrix([lay]), len(cut), axis=0)
        same_c = lay.operation not in (Operation.CONVOLUTION, Operation.CM_CONVOLUTION)
        rows[:, F.out_c] = rows[:, F.mem_c] = cut[:, 2]
        if same_c:
            rows[:, F.in_c] = cut[:, 2]
        rows[:, F.out_h] = rows[:, F.mem_h] = cut[:, 3]
        rows[:, F.in_h] = np.minimum(lay.in_h, (cut[:, 3] - 1) * lay.s_h + lay.k_h)
        fits = np.nonzero(cmx_required(rows) <= self.config.cmx_bytes)[0]
        return (int(cut[fits[0], 0]), int(cut[fits[0], 1])) if len(fits) else None

    @staticmethod
    def _pieces(lay: DPUWorkload, k: int, h: int) -> list[DPUWorkload]:
        """The layer cut into k output-channel chunks (multiples of 16) x h output-row slices."""
        per = _pad16(-(-lay.out_c // k))
        chunks = [min(per, lay.out_c - i * per) for i in range(k) if lay.out_c - i * per > 0]
        same_c = lay.operation not in (Operation.CONVOLUTION, Operation.CM_CONVOLUTION)
        rows = []
        d = -(-lay.out_h // h)
        avail, p, done = lay.in_h + lay.pad_top, lay.pad_top, 0
        for i in range(h):
            o = min(d, lay.out_h - done)
            if o <= 0:
                break
            last = done + o == lay.out_h
            need = (o - 1) * lay.s_h + lay.k_h
            bottom = lay.pad_bottom if last else 0
            h_in = need - p
            if need > avail:
                u = min(need - avail, lay.pad_bottom)
                h_in -= u
                if not last:
                    bottom = u
            rows.append((max(1, h_in), o, p, bottom))
            avail -= o * lay.s_h
            p = max(0, p - o * lay.s_h)
            done += o
        return [replace(lay, in_h=h_in, out_h=o, pad_top=top, pad_bottom=bottom, out_c=c,
                        in_c=c if same_c else lay.in_c)
                for h_in, o, top, bottom in rows for c in chunks]


@register_cost_model("vpunn")
def load_vpunn_cost_model(arg: str, **options) -> VpunnCostModel:
    """A VpunnCostModel from a spec argument: a device of `DEVICE_MODELS` ("VPU_2_7", "VPU_2_0", "VPU_4_0",
    "NPU_5_0"), a ".fast" variant where Intel publishes one ("VPU_2_7.fast", "VPU_2_0.fast"), or a path to a DPU
    `.vpunn` file (its input interface names the device: 10 VPU 2.0, 11 VPU 2.7, 4011 VPU 4.0, 5114 NPU 5.0).
    Options: the fields of `VpunnOptions`.
    """
    opts = VpunnOptions.from_options(options)
    fast = opts.fast
    spec = arg.strip()
    name = spec.upper().replace(".FAST", ".fast")
    if name.endswith(".fast"):
        fast, name = True, name[:-len(".fast")]
    valid = ", ".join(list(DEVICE_MODELS) + [m for m in MODEL_FILES if m.endswith(".fast")])
    if name in DEVICE_MODELS:
        device, dpu_key, _ = DEVICE_MODELS[name]
        dpu_key += ".fast" if fast else ""
        if dpu_key not in MODEL_FILES:
            raise VpunnError(f"Intel publishes no .fast model for {name}; valid: {valid}")
        path = resolve_model_file(MODEL_FILES[dpu_key], opts.model_dir)
        label = f"vpunn:{dpu_key}"
    elif spec.endswith(".vpunn"):
        path = resolve_model_file(spec, opts.model_dir)
        device = None
        label = f"vpunn:{path.name}"
    else:
        raise VpunnError(f"unknown VPUNN model {arg!r}; valid: {valid} or a .vpunn file path")
    dpu = DpuModel(read_model_cached(path), blas_threads=opts.blas_threads)
    if device is None:
        if dpu.version not in _INTERFACE_DEVICES:
            raise VpunnError(f"{path.name}: input interface {dpu.version} belongs to no supported device")
        device = _INTERFACE_DEVICES[dpu.version]
    dma_key = DEVICE_MODELS[device.name][2]
    dma = DmaModel(read_model_cached(resolve_model_file(MODEL_FILES[dma_key], opts.model_dir))) \
        if opts.dma == "nn" else None
    return VpunnCostModel(device, dpu, name=label, options=opts, dma=dma)
