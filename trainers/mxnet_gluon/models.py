"""The ResNet family in MXNet Gluon, layer for layer torch_ddp/models.py (option-A shortcuts
for CIFAR, bottleneck v1.5 for ImageNet), so the parameter counts match every framework's.
NCHW, MXNet's native layout."""

from __future__ import annotations

from mxnet import gluon, init
from mxnet.gluon import nn

CIFAR_DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9, "resnet110": 18}
IMAGENET_LAYERS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Conv2D:
    return nn.Conv2D(
        cout,
        kernel,
        stride,
        kernel // 2,
        use_bias=False,
        in_channels=cin,
        weight_initializer=init.MSRAPrelu("out", 0.0),
    )  # He normal, fan_out


def _bn(channels: int) -> nn.BatchNorm:
    # PyTorch's BatchNorm2d: momentum 0.1 (MXNet counts it the other way), eps 1e-5
    return nn.BatchNorm(momentum=0.9, epsilon=1e-5, in_channels=channels)


class _BasicBlock(nn.HybridBlock):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(cin, cout, 3, stride), _bn(cout)
        self.conv2, self.bn2 = _conv(cout, cout, 3), _bn(cout)
        self.extra = cout - cin if stride != 1 or cin != cout else 0

    def hybrid_forward(self, F, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.extra:  # option A: subsample, zero-pad the new channels; no parameters
            x = F.slice(x, begin=(None,) * 4, end=(None,) * 4, step=(1, 1, 2, 2))
            half = self.extra // 2
            x = F.concat(
                F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=half)),
                x,
                F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=self.extra - half)),
                dim=1,
            )
        return F.relu(out + x)


class CifarResNet(nn.HybridBlock):
    def __init__(self, blocks_per_stage: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.HybridSequential()
        self.stem.add(_conv(3, 16, 3), _bn(16), nn.Activation("relu"))
        self.layers = nn.HybridSequential()
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks_per_stage):
                self.layers.add(_BasicBlock(cin, cout, stride if i == 0 else 1))
                cin = cout
        self.fc = nn.Dense(classes, in_units=64)

    def hybrid_forward(self, F, x):
        x = self.layers(self.stem(x))
        return self.fc(F.flatten(F.mean(x, axis=(2, 3), keepdims=True)))


class _Bottleneck(nn.HybridBlock):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.body = nn.HybridSequential()
        self.body.add(
            _conv(cin, width, 1),
            _bn(width),
            nn.Activation("relu"),
            _conv(width, width, 3, stride),
            _bn(width),
            nn.Activation("relu"),
            _conv(width, cout, 1),
            _bn(cout),
        )
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.HybridSequential()
            self.down.add(nn.Conv2D(cout, 1, stride, use_bias=False, in_channels=cin), _bn(cout))

    def hybrid_forward(self, F, x):
        return F.relu(self.body(x) + (self.down(x) if self.down is not None else x))


class ImageNetResNet(nn.HybridBlock):
    def __init__(self, blocks: tuple[int, int, int, int], classes: int) -> None:
        super().__init__()
        self.stem = nn.HybridSequential()
        self.stem.add(_conv(3, 64, 7, 2), _bn(64), nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
        self.stages = nn.HybridSequential()
        cin = 64
        for width, count, stride in zip((64, 128, 256, 512), blocks, (1, 2, 2, 2)):
            for i in range(count):
                self.stages.add(_Bottleneck(cin, width, stride if i == 0 else 1))
                cin = width * 4
        self.fc = nn.Dense(classes, in_units=cin)

    def hybrid_forward(self, F, x):
        x = self.stages(self.stem(x))
        return self.fc(F.flatten(F.mean(x, axis=(2, 3), keepdims=True)))


def build(name: str, classes: int) -> gluon.HybridBlock:
    if name in CIFAR_DEPTHS:
        net = CifarResNet(CIFAR_DEPTHS[name], classes)
    elif name in IMAGENET_LAYERS:
        net = ImageNetResNet(IMAGENET_LAYERS[name], classes)
    else:
        raise ValueError(f"unknown model {name!r}")
    net.initialize()
    return net


def parameter_count(net: gluon.HybridBlock) -> int:
    return int(sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null"))
