"""Reference networks of the classification baselines: torchvision's MobileNetV2 and ResNet-18 / 34 / 50, adapted
to the task's input.

Built from torchvision's own definitions (`torchvision.models`, `weights=None`, torchvision's initialisation) with
the task's number of classes and input channels (the first convolution takes 1 channel for grayscale data).
Inputs up to `SMALL_INPUT` px a side (Fashion-MNIST 28x28, CIFAR 32x32) get a total stride of 8 instead of 32, so
the last feature map is 4x4 at 28 or 32 px instead of 1x1:

* MobileNetV2 (any width multiplier, e.g. 0.35 / 0.5 / 0.75 / 1.0 / 1.4): the stem convolution at stride 1
  (torchvision: 2) and the first 24-channel stage at stride 1 (torchvision: 2); every other layer as torchvision
  builds it. Feature maps at 28x28: stem 28, stages 28 / 28 / 14 / 7 / 7 / 4 / 4 (the usual CIFAR MobileNetV2).
* ResNet-18 / 34 / 50: a 3x3 stride-1 stem convolution (torchvision: 7x7 stride 2) and no max-pool (the CIFAR
  ResNets of He et al., 2016); layer1..layer4 at 28 / 14 / 7 / 4 for 28x28.

Larger inputs get torchvision's networks unchanged but for the input channels.
"""
from __future__ import annotations

import torch.nn as nn

from hw_cost import Block

__all__ = ["NETWORKS", "SMALL_INPUT", "check_reference", "reference_network", "reference_block",
           "describe_reference"]

#: the networks a reference baseline can name
NETWORKS = ("mobilenet_v2", "resnet18", "resnet34", "resnet50")
#: inputs whose larger side is at most this many pixels get the small-input adaptation
SMALL_INPUT = 64


def check_reference(network: str, width) -> None:
    """ValueError naming the field ('network: ...', 'width: ...') when `network` / `width` cannot be built."""
    if network not in NETWORKS:
        raise ValueError(f"network: unknown {network!r}; valid: {', '.join(NETWORKS)}")
    if width is None:
        return
    if network != "mobilenet_v2":
        raise ValueError(f"width: applies to mobilenet_v2 only, not to {network}")
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 0 < width <= 4:
        raise ValueError(f"width: expected a width multiplier in (0, 4] (e.g. 0.35, 1.0, 1.4), got {width!r}")


def _small(input_shape) -> bool:
    return max(input_shape[1:]) <= SMALL_INPUT


def _conv(in_channels: int, out_channels: int, kernel: int, stride: int) -> nn.Conv2d:
    """A bias-free convolution initialised as torchvision initialises its networks' convolutions."""
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel // 2, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


def _mobilenet_v2(input_shape, num_classes: int, width: float) -> nn.Module:
    from torchvision.models import MobileNetV2

    small = _small(input_shape)
    # torchvision's (expansion, channels, blocks, stride) per stage, the 24-channel stage at stride 1 when small
    setting = [[1, 16, 1, 1], [6, 24, 2, 1 if small else 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
               [6, 160, 3, 2], [6, 320, 1, 1]]
    net = MobileNetV2(num_classes=num_classes, width_mult=width, inverted_residual_setting=setting)
    stem = net.features[0][0]
    net.features[0][0] = _conv(input_shape[0], stem.out_channels, 3, 1 if small else 2)
    return net


def _resnet(network: str, input_shape, num_classes: int) -> nn.Module:
    import torchvision

    net = getattr(torchvision.models, network)(weights=None, num_classes=num_classes)
    if _small(input_shape):
        net.conv1 = _conv(input_shape[0], net.conv1.out_channels, 3, 1)
        net.maxpool = nn.Identity()
    elif input_shape[0] != 3:
        net.conv1 = _conv(input_shape[0], net.conv1.out_channels, 7, 2)
    return net


def reference_network(network: str, input_shape, num_classes: int, width: float | None = None) -> nn.Module:
    """A freshly initialised reference network for inputs of `input_shape` (C, H, W); `width` is MobileNetV2's
    multiplier (default 1.0). Seed torch first for reproducible weights."""
    check_reference(network, width)
    if network == "mobilenet_v2":
        return _mobilenet_v2(input_shape, num_classes, 1.0 if width is None else float(width))
    return _resnet(network, input_shape, num_classes)


def reference_block(network: str, input_shape, num_classes: int, width: float | None = None) -> Block:
    """The whole network as one cost-model block at batch 1 (VPUNN costs it layer by layer)."""
    shape = "x".join(map(str, input_shape))
    multiplier = "" if width is None else f"|w{float(width):g}"
    return Block(key=f"reference|{network}{multiplier}|in{shape}|cls{num_classes}", input_shape=(1, *input_shape),
                 build=lambda: reference_network(network, input_shape, num_classes, width))


def describe_reference(network: str, input_shape, width: float | None = None) -> str:
    """The network and its adaptation in words, for baselines.csv's note."""
    name = f"torchvision {network}" + ("" if width is None else f" width {float(width):g}")
    if not _small(input_shape):
        return name
    if network == "mobilenet_v2":
        return f"{name}, stem and first 24-channel stage at stride 1 (total stride 8)"
    return f"{name}, 3x3 stride-1 stem and no max-pool (total stride 8)"
