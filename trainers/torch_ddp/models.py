"""The ResNet family in PyTorch, defined here once for every PyTorch-based trainer.

CIFAR ResNets follow He et al. 2016, section 4.2: 6n+2 layers, 16/32/64 channels, and
parameter-free "option A" shortcuts (stride-2 subsampling plus zero channel padding), which
gives the published sizes (ResNet-20 0.27M, ResNet-44 0.66M) and is easy to reproduce exactly
in every framework. ImageNet ResNets are the bottleneck v1.5 design (stride in the 3x3 conv),
as in torchvision and NVIDIA's reference, 25.6M parameters for ResNet-50.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.gpt import PRESETS
from .transformer import GPT

CIFAR_DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}
IMAGENET_LAYERS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}


class _PadShortcut(nn.Module):
    """Option A: halve the spatial size and zero-pad the new channels; no parameters."""

    def __init__(self, extra_channels: int) -> None:
        super().__init__()
        self.extra = extra_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::2, ::2]
        half = self.extra // 2
        return F.pad(x, (0, 0, 0, 0, half, self.extra - half))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = (
            _PadShortcut(cout - cin) if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage: int, classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks_per_stage):
                layers.append(_BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.down(x))


class ImageNetResNet(nn.Module):
    def __init__(self, layers: tuple[int, int, int, int], classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages: list[nn.Module] = []
        cin = 64
        for width, count, stride in zip((64, 128, 256, 512), layers, (1, 2, 2, 2)):
            for i in range(count):
                stages.append(_Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * _Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _init(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def build(name: str, classes: int) -> nn.Module:
    """A model by name; a transformer preset's width of output is its vocabulary's, not
    `classes`."""
    if name in PRESETS:
        return GPT(PRESETS[name])
    if name in CIFAR_DEPTHS:
        return _init(CifarResNet(CIFAR_DEPTHS[name], classes))
    if name in IMAGENET_LAYERS:
        return _init(ImageNetResNet(IMAGENET_LAYERS[name], classes))
    raise ValueError(f"unknown model {name!r}")


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


if __name__ == "__main__":  # python -m dlscale.trainers.torch_ddp.models: the size table
    for name, classes in [*((m, 10) for m in CIFAR_DEPTHS), *((m, 1000) for m in IMAGENET_LAYERS)]:
        print(f"{name:10s} {parameter_count(build(name, classes)) / 1e6:7.2f}M")
