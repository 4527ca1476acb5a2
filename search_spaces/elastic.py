"""Weight-sharing ("elastic") operations: one max-size weight, sliced to the active sub-shape (Once-for-All).

Each op takes the active sub-shape as a forward argument or reads it from its input; none holds hidden state
that children push into each other. `export_*` copies the active slice into a plain torch module.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ElasticConv2d", "ElasticBatchNorm2d", "ElasticLinear", "centre_crop_kernel", "make_divisible",
           "synchronised_batch_norm"]


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
        stride: the default stride (a forward call or an export may give another: a conv shared by blocks that
            place their stride differently). Padding is always `kernel_size // 2` of the active kernel ("same" for
            odd kernels).
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

    def forward(self, x: torch.Tensor, out_channels: int | None = None, kernel_size: int | None = None,
                stride: int | None = None):
        in_channels = x.shape[1]
        out_channels = in_channels if self.depthwise else (out_channels or self.out_channels)
        kernel_size = kernel_size or self.max_kernel
        weight = self.active_weight(in_channels, out_channels, kernel_size)
        bias = self.bias[:out_channels] if self.bias is not None else None
        return F.conv2d(x, weight, bias, stride or self.stride, kernel_size // 2, 1,
                        in_channels if self.depthwise else 1)

    @torch.no_grad()
    def export(self, in_channels: int, out_channels: int, kernel_size: int, stride: int | None = None) -> nn.Conv2d:
        out_channels = in_channels if self.depthwise else out_channels
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride or self.stride, kernel_size // 2,
                         groups=in_channels if self.depthwise else 1, bias=self.bias is not None)
        conv.weight.copy_(self.active_weight(in_channels, out_channels, kernel_size))
        if self.bias is not None:
            conv.bias.copy_(self.bias[:out_channels])
        return conv


class ElasticBatchNorm2d(nn.BatchNorm2d):
    """Batch norm over the first C channels of its statistics, C taken from the input (OFA's DynamicBatchNorm2d).

    Running statistics are updated in place through slices, so every subnet trains its own channels' share.
    With `synchronise` set (by a trainer whose processes each hold a share of one batch), training-mode
    statistics are those of the whole batch (`synchronised_batch_norm`).
    """

    synchronise = False

    @classmethod
    def sharing(cls, bn: nn.BatchNorm2d) -> "ElasticBatchNorm2d":
        """A stand-in for `bn` on its own parameters and statistics (the same tensors, not copies)."""
        new = cls(bn.num_features, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
                  track_running_stats=bn.track_running_stats)
        for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
            setattr(new, name, getattr(bn, name))
        return new.train(bn.training)

    def _momentum(self) -> float:
        """The update weight of this step's statistics; counts the step (as nn.BatchNorm2d does)."""
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as nn.BatchNorm2d does
                momentum = 1.0 / float(self.num_batches_tracked)
        return momentum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        if self.synchronise and self.training:
            return synchronised_batch_norm(x, self, self._momentum())
        if c == self.num_features:
            return super().forward(x)
        momentum = self._momentum()
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


def synchronised_batch_norm(x: torch.Tensor, bn: ElasticBatchNorm2d, momentum: float) -> torch.Tensor:
    """Training-mode batch norm of `x`, one process's share of a batch, with the statistics of the whole batch.

    Per channel, the sum and the sum of squares (with the sample count) are summed over the processes by
    `torch.distributed.nn.functional.all_reduce`, whose backward sums the incoming gradients in turn: autograd
    then gives each process its share of the exact gradient of the whole batch's loss. Running statistics take
    the whole batch's mean and unbiased variance, identically in every process. Computed in float32.
    """
    from torch.distributed.nn.functional import all_reduce

    c = x.shape[1]
    xf = x.float()
    local = torch.cat([xf.sum((0, 2, 3)), (xf * xf).sum((0, 2, 3)), xf.new_full((1,), float(x.numel() // c))])
    with warnings.catch_warnings():  # torch 2.14 deprecates it for functional collectives, which lack its autograd
        warnings.filterwarnings("ignore", "torch.distributed.nn.functional.all_reduce is deprecated", FutureWarning)
        total = all_reduce(local)
    count = total[-1]
    mean = total[:c] / count
    var = (total[c:2 * c] / count - mean * mean).clamp_min(0.0)
    if bn.track_running_stats:
        with torch.no_grad():
            bn.running_mean[:c].mul_(1 - momentum).add_(mean.detach(), alpha=momentum)
            unbiased = var.detach() * (count / (count - 1).clamp_min(1.0))
            bn.running_var[:c].mul_(1 - momentum).add_(unbiased, alpha=momentum)
    shape = (1, c, 1, 1)
    y = (xf - mean.view(shape)) * torch.rsqrt(var + bn.eps).view(shape)
    if bn.affine:
        y = y * bn.weight[:c].view(shape) + bn.bias[:c].view(shape)
    return y.to(x.dtype)
