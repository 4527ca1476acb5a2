"""Zoo networks: the published models a user would deploy instead of a searched one, built for the task's input.

Classification: any model `timm.create_model` or `torchvision.models.get_model` knows, by name, with its keyword
arguments, freshly initialised (no pretrained weights: nothing downloads), with the task's classes and input
channels (timm's `in_chans`; for torchvision the first convolution is rebuilt for the task's channels). Inputs up to
`SMALL_INPUT` px a side get the stride policy of the reference networks (`nas.baselines.reference_networks`): a total
stride of 8 instead of 32, by removing the network's first downsampling steps in the order it runs them. Each
step is found by running the network once on a probe input and grouping every strided convolution and pooling
layer by the resolution it reads; the first groups' convolutions get stride 1 and their pooling layers become
identities (ResNet's max-pool goes, as in the CIFAR ResNets of He et al., 2016). For torchvision's MobileNetV2 that
is the stem and the first 24-channel stage, exactly the reference network's adaptation; for ResNet the stem
convolution keeps its 7x7 kernel at stride 1.

Super-resolution: the fast published networks, built here (timm has none), on the task's RGB input
(`SR_NETWORKS`):

* `fsrcnn`: FSRCNN (Dong et al., ECCV 2016), d=56, s=12, m=4, PReLU: 5x5 feature extraction, 1x1 shrinking, m 3x3
  mapping layers, 1x1 expanding; its 9x9 stride-s deconvolution in sub-pixel form (a conv of kernel ceil(9/s)
  to s^2 x 3 channels, then pixel shuffle: the same function class, Shi et al. 2016, and the form an NPU runs).
* `espcn`: ESPCN (Shi et al., CVPR 2016): 5x5 conv to 64, 3x3 to 32 (tanh), 3x3 to s^2 x 3, pixel shuffle.

Keyword arguments of an SR network are its sizes (`fsrcnn`: d, s, m; `espcn`: c1, c2).
"""
from __future__ import annotations

import difflib
import functools
import json
import math

import torch
import torch.nn as nn

from hw_cost import Block

__all__ = ["SOURCES", "SMALL_INPUT", "SR_NETWORKS", "ZooError", "zoo_network", "zoo_block", "describe_zoo",
           "resolve_source"]

#: where a classification zoo model comes from; "auto": timm when it knows the name, else torchvision
SOURCES = ("auto", "timm", "torchvision")
#: inputs whose larger side is at most this many pixels get total stride 8 (as `nas.baselines.reference_networks`)
SMALL_INPUT = 64
#: the total stride a small input keeps
SMALL_INPUT_STRIDE = 8
#: side of the probe image that finds a network's downsampling steps (5 halvings leave 2x2)
_PROBE = 64


class ZooError(ValueError):
    """A zoo entry that cannot be built: unknown model, a keyword argument it does not take, an input it cannot
    run on. The message is one line naming the field."""


# ------------------------------------------------------------------------------------------ super-resolution
class Fsrcnn(nn.Module):
    """FSRCNN (Dong, Loy & Tang, "Accelerating the Super-Resolution Convolutional Neural Network", ECCV 2016),
    with the last deconvolution in its sub-pixel form (see the module docstring).

    Args:
        scale: upscaling factor.
        channels: input and output channels (3 for RGB).
        d / s / m: feature, shrunk and mapping-layer counts of the paper (56, 12, 4).
    """

    def __init__(self, *, scale: int, channels: int = 3, d: int = 56, s: int = 12, m: int = 4):
        super().__init__()
        layers = [nn.Conv2d(channels, d, 5, padding=2), nn.PReLU(d), nn.Conv2d(d, s, 1), nn.PReLU(s)]
        for _ in range(m):
            layers += [nn.Conv2d(s, s, 3, padding=1), nn.PReLU(s)]
        layers += [nn.Conv2d(s, d, 1), nn.PReLU(d)]
        kernel = math.ceil(9 / scale) | 1  # odd, so the sub-pixel conv keeps the frame's size
        self.body = nn.Sequential(*layers)
        self.upsample = nn.Sequential(nn.Conv2d(d, channels * scale ** 2, kernel, padding=kernel // 2),
                                      nn.PixelShuffle(scale))
        for conv in (c for c in self.modules() if isinstance(c, nn.Conv2d)):
            nn.init.kaiming_normal_(conv.weight, a=0.25, nonlinearity="leaky_relu")  # He init for PReLU(0.25)
            nn.init.zeros_(conv.bias)
        nn.init.normal_(self.upsample[0].weight, std=0.001)  # the paper's deconvolution init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.upsample(self.body(x))


class Espcn(nn.Module):
    """ESPCN (Shi et al., "Real-Time Single Image and Video Super-Resolution Using an Efficient Sub-Pixel
    Convolutional Neural Network", CVPR 2016) on RGB.

    Args:
        scale: upscaling factor.
        channels: input and output channels.
        c1 / c2: widths of the first two layers (64, 32).
    """

    def __init__(self, *, scale: int, channels: int = 3, c1: int = 64, c2: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, c1, 5, padding=2), nn.Tanh(), nn.Conv2d(c1, c2, 3, padding=1),
                                  nn.Tanh(), nn.Conv2d(c2, channels * scale ** 2, 3, padding=1), nn.PixelShuffle(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


#: the super-resolution networks a zoo entry can name
SR_NETWORKS = {"fsrcnn": Fsrcnn, "espcn": Espcn}
_SR_PAPERS = {"fsrcnn": "FSRCNN (Dong et al., ECCV 2016; sub-pixel output)", "espcn": "ESPCN (Shi et al., CVPR 2016)"}


# ------------------------------------------------------------------------------------------ classification
@functools.lru_cache(maxsize=1)
def _torchvision_models() -> frozenset[str]:
    import torchvision

    return frozenset(torchvision.models.list_models(module=torchvision.models))


def resolve_source(model: str, source: str = "auto") -> str:
    """"timm" or "torchvision": where `model` is built from; ZooError naming close names when neither knows it."""
    import timm

    if source not in SOURCES:
        raise ZooError(f"source: unknown {source!r}; valid: {', '.join(SOURCES)}")
    known = {"timm": timm.is_model(model), "torchvision": model in _torchvision_models()}
    if source != "auto":
        if not known[source]:
            raise ZooError(f"model: {source} has no model {model!r}{_close_names(model, source)}")
        return source
    if known["timm"]:
        return "timm"
    if known["torchvision"]:
        return "torchvision"
    raise ZooError(f"model: neither timm nor torchvision has a model {model!r}{_close_names(model, 'auto')}")


def _close_names(model: str, source: str) -> str:
    import timm

    names = []
    if source in ("auto", "timm"):
        names += timm.list_models()
    if source in ("auto", "torchvision"):
        names += sorted(_torchvision_models())
    close = difflib.get_close_matches(model, names, n=4, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _create(model: str, source: str, kwargs: dict, in_chans: int, num_classes: int) -> nn.Module:
    """The network as its library builds it for `num_classes` (timm also for `in_chans`); ZooError for a
    keyword argument the model does not take or a value it refuses."""
    try:
        if source == "timm":
            import timm

            return timm.create_model(model, pretrained=False, num_classes=num_classes, in_chans=in_chans, **kwargs)
        import torchvision

        return torchvision.models.get_model(model, weights=None, num_classes=num_classes, **kwargs)
    except (TypeError, ValueError, AssertionError, KeyError, RuntimeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ZooError(f"kwargs: {source} cannot build {model} with {json.dumps(kwargs, sort_keys=True)}: "
                       f"{first}") from None


def _parent_and_name(net: nn.Module, path: str) -> tuple[nn.Module, str]:
    parent, _, name = path.rpartition(".")
    return (net.get_submodule(parent) if parent else net), name


def _adapt_input_channels(net: nn.Module, in_chans: int) -> None:
    """torchvision builds 3-channel inputs: the first convolution (in module order) rebuilt for `in_chans`."""
    path, conv = next(((p, m) for p, m in net.named_modules() if isinstance(m, nn.Conv2d)), (None, None))
    if conv is None or conv.in_channels == in_chans:
        return
    if conv.in_channels != 3 or conv.groups != 1:
        raise ZooError(f"model: its first convolution takes {conv.in_channels} channels in {conv.groups} groups; "
                       f"cannot adapt it to {in_chans} input channels")
    new = nn.Conv2d(in_chans, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, conv.dilation,
                    bias=conv.bias is not None, padding_mode=conv.padding_mode)
    nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")  # torchvision's conv init
    if new.bias is not None:
        nn.init.zeros_(new.bias)
    parent, name = _parent_and_name(net, path)
    setattr(parent, name, new)


def _downsampling_steps(net: nn.Module, in_chans: int) -> list[list[tuple[str, nn.Module]]]:
    """The strided convolutions and pooling layers of `net`, grouped by the resolution they read on a probe
    input, in the order the network runs them: one group per downsampling step."""
    strided = (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)
    seen: dict[int, list[tuple[str, nn.Module]]] = {}
    hooks = []

    def record(path):
        def hook(module, inputs, output):
            stride = module.stride if isinstance(module.stride, (tuple, list)) else (module.stride,)
            if max(stride) > 1 and inputs and isinstance(inputs[0], torch.Tensor):
                seen.setdefault(inputs[0].shape[-1], []).append((path, module))
        return hook

    for path, module in net.named_modules():
        if isinstance(module, strided):
            hooks.append(module.register_forward_hook(record(path)))
    was_training = net.training
    try:
        with torch.no_grad():
            net.eval()(torch.zeros(1, in_chans, _PROBE, _PROBE))
    except Exception as exc:  # a model that cannot run on the probe: name it in one line
        raise ZooError(f"model: does not run on a {in_chans}x{_PROBE}x{_PROBE} input: "
                       f"{(str(exc).splitlines() or [''])[0][:160]}") from None
    finally:
        for hook in hooks:
            hook.remove()
        net.train(was_training)
    return [seen[size] for size in sorted(seen, reverse=True)]


def _to_small_input_stride(net: nn.Module, in_chans: int) -> int:
    """Remove the first downsampling steps until the total stride is `SMALL_INPUT_STRIDE`; returns how many."""
    steps = _downsampling_steps(net, in_chans)
    factors = [max(_pair(group[0][1].stride)) for group in steps]
    removed, total = 0, math.prod(factors)
    while total > SMALL_INPUT_STRIDE and removed < len(steps):
        total //= factors[removed]
        for path, module in steps[removed]:
            if isinstance(module, nn.Conv2d):
                module.stride = (1, 1)
            else:
                parent, name = _parent_and_name(net, path)
                setattr(parent, name, nn.Identity())
        removed += 1
    return removed


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def _small(input_shape) -> bool:
    return max(input_shape[1:]) <= SMALL_INPUT


def zoo_network(model: str, input_shape, num_outputs: int, *, source: str = "auto", kwargs: dict | None = None,
                scale: int | None = None) -> nn.Module:
    """A freshly initialised zoo network for inputs of `input_shape` (C, H, W): a classifier of `num_outputs`
    classes, or, with `scale`, a super-resolution network (`SR_NETWORKS`). Seed torch first for reproducible
    weights. ZooError (one line) when it cannot be built."""
    kwargs = dict(kwargs or {})
    if scale is not None:
        if model not in SR_NETWORKS:
            raise ZooError(f"model: unknown super-resolution network {model!r}; valid: {', '.join(SR_NETWORKS)}")
        try:
            return SR_NETWORKS[model](scale=scale, channels=input_shape[0], **kwargs)
        except TypeError as exc:
            raise ZooError(f"kwargs: {model} does not take {json.dumps(kwargs, sort_keys=True)} ({exc})") from None
    return _classifier(model, resolve_source(model, source), kwargs, input_shape, num_outputs)[0]


def _classifier(model: str, source: str, kwargs: dict, input_shape, num_outputs: int) -> tuple[nn.Module, int]:
    """The adapted classifier and the number of downsampling steps it lost to the small-input policy."""
    net = _create(model, source, kwargs, input_shape[0], num_outputs)
    if source == "torchvision":
        _adapt_input_channels(net, input_shape[0])
    return net, _to_small_input_stride(net, input_shape[0]) if _small(input_shape) else 0


def zoo_block(model: str, input_shape, num_outputs: int, *, source: str = "auto", kwargs: dict | None = None,
              scale: int | None = None) -> Block:
    """The whole network as one cost-model block at batch 1 (VPUNN costs it layer by layer), in the form it is
    deployed in: timm's re-parameterisable networks (MobileOne, RepViT, FastViT, ...) with their training-time
    branches fused (`timm.utils.reparameterize_model`; it leaves other networks as they are)."""
    kwargs = dict(kwargs or {})
    where = "sr" if scale is not None else resolve_source(model, source)

    def deployed() -> nn.Module:
        from timm.utils.model import reparameterize_model

        return reparameterize_model(zoo_network(model, input_shape, num_outputs, source=source, kwargs=kwargs,
                                                scale=scale).eval())

    key = (f"zoo|{where}:{model}|{json.dumps(kwargs, sort_keys=True, separators=(',', ':'))}"
           f"|in{'x'.join(map(str, input_shape))}|out{num_outputs}" + (f"|x{scale}" if scale is not None else ""))
    return Block(key=key, input_shape=(1, *input_shape), build=deployed)


def describe_zoo(model: str, input_shape, *, source: str = "auto", kwargs: dict | None = None,
                 scale: int | None = None) -> str:
    """The network and its adaptation in words, for baselines.csv's note."""
    args = "" if not kwargs else " " + json.dumps(kwargs, sort_keys=True)
    if scale is not None:
        return f"{_SR_PAPERS[model]}{args}, x{scale}, built in vpunas"
    source = resolve_source(model, source)
    name = f"{source} {model}{args}, {input_shape[0]} input channels"
    if not _small(input_shape):
        return name
    removed = _classifier(model, source, dict(kwargs or {}), input_shape, 2)[1]
    return f"{name}, its first {removed} downsampling steps at stride 1 (total stride {SMALL_INPUT_STRIDE})"
