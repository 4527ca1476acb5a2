"""Static building blocks shared by the classification families: conv-BN-activation, the classifier head,
stage configs and weight initialisation."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

__all__ = ["StageConfig", "ConvBnAct", "ClassifierHead", "StemBlocksHead", "init_weights"]


@dataclass
class StageConfig:
    """One stage: output width, stride of its first block, and the depths searched."""

    width: int = 32
    stride: int = 1
    depths: list[int] = field(default_factory=lambda: [2, 3, 4])


class ConvBnAct(nn.Sequential):
    """Conv + batch norm + optional activation, padding k // 2."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1, groups: int = 1,
                 act_layer: type[nn.Module] | None = nn.ReLU6):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, kernel_size // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out_channels),
            act_layer() if act_layer is not None else nn.Identity())


class ClassifierHead(nn.Module):
    """Optional 1x1 conv, global average pooling, dropout, linear classifier."""

    def __init__(self, in_channels: int, head_width: int, num_classes: int, *, dropout: float,
                 act_layer: type[nn.Module]):
        super().__init__()
        self.conv = ConvBnAct(in_channels, head_width, 1, act_layer=act_layer) if head_width else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(head_width or in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.conv(x).mean((2, 3))))


class StemBlocksHead(nn.Module):
    """A standalone classification network: stem, a sequence of blocks, head."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], head: nn.Module):
        super().__init__()
        self.stem, self.blocks, self.head = stem, nn.Sequential(*blocks), head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def init_weights(m: nn.Module) -> None:
    """Kaiming-normal convs (fan out), small-normal linear layers with zero bias (use with `Module.apply`)."""
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    elif isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0, 0.01)
        nn.init.zeros_(m.bias)
