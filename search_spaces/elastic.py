"""Weight-sharing ("elastic") operations: one max-size weight, sliced to the active sub-shape (Once-for-All).

Each op takes the active sub-shape as a forward argument or reads it from its input; none holds hidden state
that children push into each other. `export_*` copies the active slice into a plain torch module.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ElasticConv2d", "ElasticBatchNorm2d", "ElasticLinear", "centre_crop_kernel", "make_divisible"]


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round to the nearest multiple of `divisor`, never more than 10% down (the MobileNet rule)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * value else new


def centre_crop_kernel(weight: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """The centred `kernel_size` x `kernel_size` window of a (out, in, K, K) weight."""
    full = weight.shape[-1]
    start = (full - kernel_size) // 2
    return weight[..., start:start + kernel_size, start:start + kernel_size]


class ElasticConv2d(nn.Module):
    """A conv whose output channels, input channels (from its input) and kernel size (centre crop) can shrink.

    Args:
        in_channels / out_channels / kernel_size: the largest shape; weights have this size.
        stride: fixed stride. Padding is always `kernel_size // 2` of the active kernel ("same" for odd kernels).
        depthwise: one filter per channel (groups = active channels); out_channels must equal in_channels.
        bias: add a bias (sliced like the output channels).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1,
                 depthwise: bool = False, bias: bool = False):
        super().__init__()
        if depthwise and in_channels != out_channels:
            raise ValueError("a depthwise conv needs in_channels == out_channels")
        self.in_channels, self.out_channels, self.max_kernel = in_channels, out_channels, kernel_size
        self.stride, self.depthwise = stride, depthwise
        self.weight = nn.Parameter(torch.empty(out_channels, 1 if depthwise else in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        nn.init.kaiming_normal_(self.weight, mode="fan_out", nonlinearity="relu")

    def active_weight(self, in_channels: int, out_channels: int, kernel_size: int) -> torch.Tensor:
        if kernel_size > self.max_kernel or out_channels > self.out_channels or in_channels > self.in_channels:
            raise ValueError(f"active shape ({in_channels}->{out_channels}, k{kernel_size}) exceeds "
                             f"({self.in_channels}->{self.out_channels}, k{self.max_kernel})")
        w = self.weight[:in_channels if self.depthwise else out_channels]
        if not self.depthwise:
            w = w[:, :in_channels]
        return centre_crop_kernel(w, kernel_size) if kernel_size != self.max_kernel else w

    def forward(self, x: torch.Tensor, out_channels: int | None = None, kernel_size: int | None = None):
        in_channels = x.shape[1]
        out_channels = in_channels if self.depthwise else (out_channels or self.out_channels)
        kernel_size = kernel_size or self.max_kernel
        weight = self.active_weight(in_channels, out_channels, kernel_size)
        bias = self.bias[:out_channels] if self.bias is not None else None
        return F.conv2d(x, weight, bias, self.stride, kernel_size // 2, 1, in_channels if self.depthwise else 1)

    @torch.no_grad()
    def export(self, in_channels: int, out_channels: int, kernel_size: int) -> nn.Conv2d:
        out_channels = in_channels if self.depthwise else out_channels
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, self.stride, kernel_size // 2,
                         groups=in_channels if self.depthwise else 1, bias=self.bias is not None)
        conv.weight.copy_(self.active_weight(in_channels, out_channels, kernel_size))
        if self.bias is not None:
            conv.bias.copy_(self.bias[:out_channels])
        return conv


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """Batch norm over the first C channels of its statistics, C taken from the input (OFA's DynamicBatchNorm2d).

    Running statistics are updated in place through slices, so every subnet trains its own channels' share.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        if c == self.num_features:
            return super().forward(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as nn.BatchNorm2d does
                momentum = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or not self.track_running_stats
        return F.batch_norm(x, self.running_mean[:c], self.running_var[:c], self.weight[:c], self.bias[:c],
                            use_batch_stats, momentum, self.eps)

    @torch.no_grad()
    def export(self, channels: int) -> nn.BatchNorm2d:
        bn = nn.BatchNorm2d(channels, eps=self.eps, momentum=self.momentum)
        bn.weight.copy_(self.weight[:channels])
        bn.bias.copy_(self.bias[:channels])
        bn.running_mean.copy_(self.running_mean[:channels])
        bn.running_var.copy_(self.running_var[:channels])
        bn.num_batches_tracked.copy_(self.num_batches_tracked)
        return bn


class ElasticLinear(nn.Linear):
    """A linear layer whose input features shrink with its input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight[:, :x.shape[-1]], self.bias)

    @torch.no_grad()
    def export(self, in_features: int) -> nn.Linear:
        linear = nn.Linear(in_features, self.out_features, bias=self.bias is not None)
        linear.weight.copy_(self.weight[:, :in_features])
        if self.bias is not None:
            linear.bias.copy_(self.bias)
        return linear
