"""Layer descriptors of a torch model, as an inference compiler for the VPU would see them.

`extract_layers` traces a model with torch.fx, propagates shapes, folds batch norms into the preceding
convolution and fuses activations into the layer that produces their input, so every `LayerSpec` is one
operation the device executes (a DPU convolution, an eltwise add, a SHAVE kernel, ...). Reshapes, flattens,
dropout and identities move no data on the device and produce no layer.
"""
from __future__ import annotations

import logging
import math
import operator
from dataclasses import asdict, dataclass, field

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp

logger = logging.getLogger(__name__)

__all__ = ["LayerSpec", "extract_layers", "LayerExtractionError", "LAYER_OPS", "ACTIVATIONS", "module_for_layer"]

#: operations a LayerSpec can name. conv/dwconv/linear/add/maxpool/avgpool run on the DPU; the rest are
#: SHAVE or data-movement kernels whose cost each cost model documents.
LAYER_OPS = (
    "conv", "dwconv", "linear", "add", "mul", "maxpool", "avgpool", "global_avgpool",
    "pixel_shuffle", "upsample", "concat", "act", "batchnorm", "other",
)
ACTIVATIONS = ("none", "relu", "relu6", "leaky_relu", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh")


class LayerExtractionError(ValueError):
    """The model cannot be turned into layer descriptors (not traceable, or an unsupported construct)."""


@dataclass(frozen=True)
class LayerSpec:
    """One device operation. Shapes are torch order (N, C, H, W); a linear layer is (N, C, 1, 1).

    Args:
        op: one of `LAYER_OPS`.
        in_shape / out_shape: first input and output tensor shapes.
        kernel / stride: (kh, kw) and (sh, sw); (1, 1) for ops without a window.
        padding: (top, bottom, left, right).
        groups: convolution groups (1 for a dense conv, C for a depthwise one).
        activation: activation fused into the op (one of `ACTIVATIONS`).
        dtype: "uint8" or "fp16", the inference precision.
        name: where the op comes from in the model (module path or fx node name).
        detail: for op "other" and "act", the torch target it came from.
    """

    op: str
    in_shape: tuple[int, int, int, int]
    out_shape: tuple[int, int, int, int]
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    activation: str = "none"
    dtype: str = "uint8"
    name: str = ""
    detail: str = field(default="", compare=False)

    def __post_init__(self):
        if self.op not in LAYER_OPS:
            raise ValueError(f"unknown layer op {self.op!r}; valid: {', '.join(LAYER_OPS)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; valid: {', '.join(ACTIVATIONS)}")

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the op (0 for ops without weights)."""
        n, c_out, h_out, w_out = self.out_shape
        c_in = self.in_shape[1]
        if self.op in ("conv", "dwconv", "linear"):
            return n * c_out * h_out * w_out * (c_in // self.groups) * self.kernel[0] * self.kernel[1]
        return 0

    @property
    def params(self) -> int:
        """Weights and biases after batch-norm folding."""
        c_out, c_in = self.out_shape[1], self.in_shape[1]
        if self.op in ("conv", "dwconv", "linear"):
            return c_out * (c_in // self.groups) * self.kernel[0] * self.kernel[1] + c_out
        return 0

    def signature(self) -> str:
        """A stable text key of everything that determines the op's cost (not its name)."""
        shape = lambda s: "x".join(map(str, s))
        return (f"{self.op}|in{shape(self.in_shape)}|out{shape(self.out_shape)}|k{shape(self.kernel)}"
                f"|s{shape(self.stride)}|p{shape(self.padding)}|g{self.groups}|{self.activation}|{self.dtype}")

    def to_dict(self) -> dict:
        return asdict(self)


_ACTIVATION_MODULES = {
    nn.ReLU: "relu", nn.ReLU6: "relu6", nn.LeakyReLU: "leaky_relu", nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid", nn.Sigmoid: "sigmoid", nn.SiLU: "silu", nn.GELU: "gelu", nn.Tanh: "tanh",
    nn.PReLU: "leaky_relu",  # a per-channel slope: the same post-processing step on the NPU as a leaky ReLU
}
_ACTIVATION_FUNCTIONS = {
    F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", F.leaky_relu: "leaky_relu", F.hardswish: "hardswish",
    F.hardsigmoid: "hardsigmoid", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", F.silu: "silu", F.gelu: "gelu",
    torch.tanh: "tanh", F.tanh: "tanh",
}
_ACTIVATION_METHODS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "relu_": "relu", "sigmoid_": "sigmoid"}
# ops that only reinterpret memory or are no-ops at inference
_FREE_MODULES = (nn.Identity, nn.Dropout, nn.Dropout2d, nn.Flatten, nn.Unflatten)
_FREE_FUNCTIONS = {torch.flatten, torch.reshape, F.dropout, torch.squeeze, torch.unsqueeze, getattr}
_FREE_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "contiguous", "size", "dim", "permute",
                 "transpose", "expand", "float", "to", "clone", "detach", "type_as"}
_ADD = {operator.add, operator.iadd, torch.add}
_MUL = {operator.mul, operator.imul, torch.mul}


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _nchw(shape) -> tuple[int, int, int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) == 4:
        return shape
    if len(shape) == 2:
        return (shape[0], shape[1], 1, 1)
    if len(shape) == 3:  # (N, tokens, C): each token a 1x1 pixel row
        return (shape[0], shape[2], shape[1], 1)
    raise LayerExtractionError(f"cannot describe a tensor of rank {len(shape)} as a feature map: {shape}")


class _Tracer(torch.fx.Tracer):
    """torch.fx tracer that keeps timm's non-traceable modules as leaves."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        from timm.layers import is_notrace_module

        return is_notrace_module(type(m)) or super().is_leaf_module(m, qualname)


def _conv_padding(conv: nn.Conv2d, in_shape, out_shape) -> tuple[int, int, int, int]:
    """Effective (top, bottom, left, right) padding, also for 'same' and for convs padding inside forward."""
    if isinstance(conv.padding, str):
        pad_h = pad_w = None
    else:
        pad_h, pad_w = _pair(conv.padding)
    (kh, kw), (sh, sw), (dh, dw) = _pair(conv.kernel_size), _pair(conv.stride), _pair(conv.dilation)
    pads = []
    for size_in, size_out, k, s, d, p in ((in_shape[2], out_shape[2], kh, sh, dh, pad_h),
                                          (in_shape[3], out_shape[3], kw, sw, dw, pad_w)):
        if p is not None and (size_in + 2 * p - d * (k - 1) - 1) // s + 1 == size_out:
            pads.append((p, p))
        else:  # 'same'-style: total padding needed for this output size, extra row at the end (TF rule)
            total = max((size_out - 1) * s + d * (k - 1) + 1 - size_in, 0)
            pads.append((total // 2, total - total // 2))
    return (pads[0][0], pads[0][1], pads[1][0], pads[1][1])


def extract_layers(model: nn.Module, input_shape, dtype: str = "uint8") -> list[LayerSpec]:
    """Describe every device operation of `model` for an input of `input_shape` (N, C, H, W).

    Batch norms directly after a conv or linear layer are folded into it; an activation whose input is the only
    use of a conv/linear/add output is fused into that op. Raises LayerExtractionError when the model cannot be
    traced with torch.fx.
    """
    if dtype not in ("uint8", "fp16"):
        raise ValueError(f"dtype must be 'uint8' or 'fp16', not {dtype!r}")
    was_training = model.training
    model.eval()
    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # fx raises many types; name the model and the reason in one line
        raise LayerExtractionError(f"{type(model).__name__} is not traceable by torch.fx: {exc}") from exc
    gm = torch.fx.GraphModule(model, graph)
    try:
        _propagate_shapes(gm, tuple(input_shape))
    except Exception as exc:
        raise LayerExtractionError(f"{type(model).__name__} does not run on input {tuple(input_shape)}: {exc}") from exc
    finally:
        model.train(was_training)
    return _LayerBuilder(gm, dtype).build()


def _propagate_shapes(gm: torch.fx.GraphModule, input_shape: tuple) -> None:
    """Shapes of every node, computed on fake tensors (no arithmetic: a 16-block EDSR at 360x640 takes a second
    instead of half a minute); ops that fake tensors do not support fall back to a real forward pass."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.no_grad():
        try:
            ShapeProp(gm, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(torch.zeros(input_shape))
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            logger.debug("fake-tensor shape propagation failed (%s); running the model for real", exc)
            ShapeProp(gm).propagate(torch.zeros(input_shape))


class _LayerBuilder:
    """One pass over the fx graph: emit layers, then fold/fuse into their producers."""

    def __init__(self, gm: torch.fx.GraphModule, dtype: str):
        self.gm, self.dtype = gm, dtype
        self.modules = dict(gm.named_modules())
        self.layers: list[dict] = []
        # fx node -> index of the layer producing its value (for BN folding and activation fusion)
        self.producer: dict[torch.fx.Node, int] = {}

    @staticmethod
    def _shape(node) -> tuple:
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            return ()
        return tuple(meta.shape)

    def _emit(self, node, **spec) -> None:
        spec.setdefault("name", node.name if node.op != "call_module" else node.target)
        spec.setdefault("out_shape", _nchw(self._shape(node)))
        self.layers.append(spec)
        self.producer[node] = len(self.layers) - 1

    def _eltwise(self, node, op: str, **spec) -> None:
        """A binary elementwise op, described by its output (broadcast) shape: it reads and writes that many
        values whichever operand is broadcast, so `x * s` and `s * x` (squeeze-excite in timm vs torchvision)
        are the same layer."""
        shape = _nchw(self._shape(node))
        self._emit(node, op=op, in_shape=shape, **spec)

    def _fusable_producer(self, node) -> int | None:
        """Index of the layer whose single-use output is `node`'s first input, if any."""
        src = node.args[0] if node.args else None
        if isinstance(src, torch.fx.Node) and src in self.producer and len(src.users) == 1:
            return self.producer[src]
        return None

    def _activation(self, node, act: str) -> None:
        idx = self._fusable_producer(node)
        if idx is not None and self.layers[idx]["op"] in ("conv", "dwconv", "linear", "add", "batchnorm") \
                and self.layers[idx].get("activation", "none") == "none":
            self.layers[idx]["activation"] = act
            self.producer[node] = idx
            return
        shape = _nchw(self._shape(node))
        self._emit(node, op="act", in_shape=shape, activation=act, detail=act)

    def _passthrough(self, node) -> None:
        src = node.args[0] if node.args else None
        if isinstance(src, torch.fx.Node) and src in self.producer and len(src.users) == 1:
            self.producer[node] = self.producer[src]

    def _input_shape(self, node, i=0):
        arg = node.args[i]
        return _nchw(self._shape(arg)) if isinstance(arg, torch.fx.Node) else None

    def build(self) -> list[LayerSpec]:
        for node in self.gm.graph.nodes:
            if node.op == "call_module":
                self._module(node, self.modules[node.target])
            elif node.op == "call_function":
                self._function(node)
            elif node.op == "call_method":
                self._method(node)
        return [LayerSpec(dtype=self.dtype, **spec) for spec in self.layers]

    def _module(self, node, m: nn.Module) -> None:
        shape = self._shape(node)
        if isinstance(m, nn.Conv2d):
            in_shape = self._input_shape(node)
            depthwise = m.groups == m.in_channels == m.out_channels and m.groups > 1
            self._emit(node, op="dwconv" if depthwise else "conv", in_shape=in_shape, kernel=_pair(m.kernel_size),
                       stride=_pair(m.stride), padding=_conv_padding(m, in_shape, shape), groups=m.groups)
        elif isinstance(m, nn.Linear):
            self._emit(node, op="linear", in_shape=self._input_shape(node))
        elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm1d)):
            idx = self._fusable_producer(node)
            if idx is not None and self.layers[idx]["op"] in ("conv", "dwconv", "linear") \
                    and self.layers[idx].get("activation", "none") == "none":
                self.producer[node] = idx  # folded into the conv's weights and bias
            else:
                self._emit(node, op="batchnorm", in_shape=self._input_shape(node))
            act = getattr(m, "act", None)  # timm's BatchNormAct2d carries its activation
            if type(act) in _ACTIVATION_MODULES:
                self.layers[self.producer[node]]["activation"] = _ACTIVATION_MODULES[type(act)]
        elif type(m) in _ACTIVATION_MODULES:
            self._activation(node, _ACTIVATION_MODULES[type(m)])
        elif isinstance(m, _FREE_MODULES):
            self._passthrough(node)
        elif isinstance(m, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)) and shape[-2:] == (1, 1):
            self._emit(node, op="global_avgpool", in_shape=self._input_shape(node), detail=type(m).__name__)
        elif isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            in_shape = self._input_shape(node)
            k, s = _pair(m.kernel_size), _pair(m.stride or m.kernel_size)
            p = _pair(m.padding)
            self._emit(node, op="maxpool" if isinstance(m, nn.MaxPool2d) else "avgpool", in_shape=in_shape,
                       kernel=k, stride=s, padding=(p[0], p[0], p[1], p[1]))
        elif isinstance(m, nn.PixelShuffle):
            self._emit(node, op="pixel_shuffle", in_shape=self._input_shape(node), detail=f"r={m.upscale_factor}")
        elif isinstance(m, nn.Upsample):
            self._emit(node, op="upsample", in_shape=self._input_shape(node), detail=str(m.mode))
        elif len(shape) in (2, 3, 4):
            self._emit(node, op="other", in_shape=self._input_shape(node) or _nchw(shape), detail=type(m).__name__)

    def _function(self, node) -> None:
        fn, shape = node.target, self._shape(node)
        tensor_args = [a for a in node.args if isinstance(a, torch.fx.Node) and self._shape(a)]
        if fn in _ADD and len(tensor_args) == 2:
            self._eltwise(node, "add")
        elif fn is F.linear:
            self._emit(node, op="linear", in_shape=self._input_shape(node))
        elif fn in _MUL and len(tensor_args) == 2:
            self._eltwise(node, "mul")
        elif fn in _ACTIVATION_FUNCTIONS:
            self._activation(node, _ACTIVATION_FUNCTIONS[fn])
        elif fn in (torch.cat, torch.concat):
            self._emit(node, op="concat", in_shape=_nchw(self._shape(node.args[0][0])))
        elif fn is F.adaptive_avg_pool2d and shape[-2:] == (1, 1) or fn is torch.mean and len(shape) in (2, 4):
            self._emit(node, op="global_avgpool", in_shape=self._input_shape(node), detail=getattr(fn, "__name__", ""))
        elif fn in (F.max_pool2d, F.avg_pool2d):
            params = dict(zip(("kernel_size", "stride", "padding"), node.args[1:4])) | dict(node.kwargs)
            k = _pair(params["kernel_size"])
            s, p = _pair(params.get("stride") or k), _pair(params.get("padding", 0))
            self._emit(node, op="maxpool" if fn is F.max_pool2d else "avgpool", in_shape=self._input_shape(node),
                       kernel=k, stride=s, padding=(p[0], p[0], p[1], p[1]))
        elif fn is F.pixel_shuffle:
            self._emit(node, op="pixel_shuffle", in_shape=self._input_shape(node), detail=f"r={node.args[1]}")
        elif fn in (F.interpolate,):
            self._emit(node, op="upsample", in_shape=self._input_shape(node), detail="interpolate")
        elif fn in _FREE_FUNCTIONS or fn is operator.getitem or not tensor_args or len(shape) not in (2, 3, 4):
            self._passthrough(node)
        elif fn in (operator.truediv, operator.sub, torch.sub, torch.div):
            self._eltwise(node, "other", detail=fn.__name__)
        else:
            self._emit(node, op="other", in_shape=_nchw(self._shape(tensor_args[0])),
                       detail=getattr(fn, "__name__", str(fn)))

    def _method(self, node) -> None:
        name, shape = node.target, self._shape(node)
        if name in _ACTIVATION_METHODS:
            self._activation(node, _ACTIVATION_METHODS[name])
        elif name in ("add", "add_") and isinstance(node.args[1], torch.fx.Node):
            self._eltwise(node, "add")
        elif name in ("mul", "mul_") and isinstance(node.args[1], torch.fx.Node):
            self._eltwise(node, "mul")
        elif name == "mean" and len(shape) in (2, 4) and math.prod(shape[2:]) == 1:
            self._emit(node, op="global_avgpool", in_shape=self._input_shape(node), detail="mean")
        elif name in _FREE_METHODS or len(shape) not in (2, 3, 4):
            self._passthrough(node)
        else:
            self._emit(node, op="other", in_shape=self._input_shape(node) or _nchw(shape), detail=name)


class _Add(nn.Module):
    def forward(self, x):
        return x + x.flip(1)  # two distinct operands of the same shape


class _Mul(nn.Module):
    def forward(self, x):
        return x * x.flip(1)


class _GlobalAvgPool(nn.Module):
    def forward(self, x):
        return x.mean((2, 3), keepdim=True)


_ACTS = {"none": nn.Identity, "relu": nn.ReLU, "relu6": nn.ReLU6, "leaky_relu": nn.LeakyReLU, "hardswish": nn.Hardswish,
         "hardsigmoid": nn.Hardsigmoid, "sigmoid": nn.Sigmoid, "silu": nn.SiLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def module_for_layer(layer: LayerSpec) -> nn.Module:
    """A module that performs `layer` (random weights): lets a latency table measure any network layer by layer."""
    n, c_in, h, w = layer.in_shape
    c_out = layer.out_shape[1]
    act = _ACTS[layer.activation]()
    if layer.op in ("conv", "dwconv"):
        pt, pb, pl, pr = layer.padding
        conv = nn.Conv2d(c_in, c_out, layer.kernel, layer.stride, groups=layer.groups, bias=True)
        pad = nn.ZeroPad2d((pl, pr, pt, pb)) if any(layer.padding) else nn.Identity()
        return nn.Sequential(pad, conv, act)
    if layer.op == "linear":
        return nn.Sequential(nn.Flatten(), nn.Linear(c_in, c_out), act)
    if layer.op == "add":
        return nn.Sequential(_Add(), act)
    if layer.op == "mul":
        return _Mul()
    if layer.op in ("maxpool", "avgpool"):
        pool = nn.MaxPool2d if layer.op == "maxpool" else nn.AvgPool2d
        return pool(layer.kernel, layer.stride, (layer.padding[0], layer.padding[2]))
    if layer.op == "global_avgpool":
        return _GlobalAvgPool()
    if layer.op == "pixel_shuffle":
        return nn.PixelShuffle(int(round((c_in / c_out) ** 0.5)))
    if layer.op == "upsample":
        return nn.Upsample(size=layer.out_shape[2:], mode="nearest")
    if layer.op == "batchnorm":
        return nn.Sequential(nn.BatchNorm2d(c_in), act)
    if layer.op == "act":
        return act
    raise LayerExtractionError(f"cannot build a module to measure layer {layer.name!r} (op {layer.op}, {layer.detail})")
