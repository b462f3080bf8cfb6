"""Models whose convolutions are grouped but not depthwise, in plain torch.nn with seeded random
weights (the torchvision layouts; nothing is downloaded): ResNeXt-50 32x4d, ShuffleNet-v1
(groups 3 or 8), ShuffleNet-v2 and RegNetX-400MF.

torchvision itself cannot be imported beside the CPU build of torch these machines use (its
compiled ops are a CUDA build), so the architectures are written here from their papers and
torchvision's definitions. Each constructor takes a `seed` and size knobs so that tests build
small versions; the defaults are the real architectures. Batch-norm statistics are randomized
(kiln.testing.models.randomize_norm_stats); inputs come from kiln.testing.models.example_input.

Example:
    >>> from kiln.testing.grouped_models import resnext50_32x4d
    >>> model = resnext50_32x4d(width=8, layers=(1, 1, 1, 1))        # doctest: +SKIP
    >>> model(torch.randn(1, 3, 64, 64)).shape                       # doctest: +SKIP
    torch.Size([1, 1000])
"""
from __future__ import annotations

import torch
from torch import nn

from .models import _finish

__all__ = ["resnext50_32x4d", "shufflenet_v1", "shufflenet_v2", "regnet_x_400mf"]


def _conv_bn(cin, cout, kernel=1, stride=1, groups=1, relu=True):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


def channel_shuffle(x, groups: int):
    """ShuffleNet's channel shuffle: (N, G*K, H, W) -> view (N, G, K, H, W) -> transpose ->
    (N, K*G, H, W).

    Example:
        >>> channel_shuffle(torch.arange(6.).reshape(1, 6, 1, 1), 2).flatten().tolist()
        [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    """
    n, c, h, w = x.shape
    x = x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(n, c, h, w)


# ---------------------------------------------------------------------------------------------
# ResNeXt (Xie et al. 2017): ResNet-50's bottleneck with a grouped 3x3 of `groups` x `base`
# channels per 64 of the stage's planes.

class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride, groups, base_width):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = _conv_bn(inplanes, width)
        self.conv2 = _conv_bn(width, width, 3, stride, groups)
        self.conv3 = _conv_bn(width, planes * 4, relu=False)
        self.downsample = (_conv_bn(inplanes, planes * 4, 1, stride, relu=False)
                           if stride != 1 or inplanes != planes * 4 else None)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + identity)


class ResNeXt(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), groups=32, base_width=4, width=64,
                 num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, inplanes = [], width
        for i, n in enumerate(layers):
            planes = width * 2 ** i
            for j in range(n):
                blocks.append(_Bottleneck(inplanes, planes, 2 if i and not j else 1, groups,
                                          base_width))
                inplanes = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnext50_32x4d(seed: int = 0, num_classes: int = 1000, width: int = 64,
                    layers=(3, 4, 6, 3), groups: int = 32, base_width: int = 4) -> nn.Module:
    """ResNeXt-50 32x4d (groups 32, 4 channels per group in the first stage: 4, 8, 16, 32
    per group over the stages), seeded random weights.

    Example:
        >>> m = resnext50_32x4d(width=16, layers=(1, 1, 1, 1))     # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(ResNeXt(tuple(layers), groups, base_width, width, num_classes), seed)


# ---------------------------------------------------------------------------------------------
# ShuffleNet-v1 (Zhang et al. 2018, Fig. 2 b/c): grouped 1x1 -> shuffle -> depthwise 3x3 ->
# grouped 1x1; stride-2 units concatenate a 3x3 average pool of their input.

class _ShuffleV1Unit(nn.Module):
    def __init__(self, cin, cout, stride, groups, first_group=True):
        super().__init__()
        self.stride, self.groups = stride, groups
        out = cout - cin if stride == 2 else cout
        mid = cout // 4
        self.gconv1 = _conv_bn(cin, mid, groups=groups if first_group else 1)
        self.dwconv = _conv_bn(mid, mid, 3, stride, mid, relu=False)
        self.gconv2 = _conv_bn(mid, out, groups=groups, relu=False)

    def forward(self, x):
        y = channel_shuffle(self.gconv1(x), self.groups)
        y = self.gconv2(self.dwconv(y))
        if self.stride == 2:
            return torch.relu(torch.cat([nn.functional.avg_pool2d(x, 3, 2, 1), y], 1))
        return torch.relu(x + y)


class ShuffleNetV1(nn.Module):
    # output channels of stages 2-4 for 1, 2, 3, 4, 8 groups (the paper's Table 1)
    CHANNELS = {1: 144, 2: 200, 3: 240, 4: 272, 8: 384}

    def __init__(self, groups=3, repeats=(4, 8, 4), scale=1.0, num_classes=1000):
        super().__init__()
        stem = 24
        self.stem = nn.Sequential(_conv_bn(3, stem, 3, 2), nn.MaxPool2d(3, 2, 1))
        units, cin = [], stem
        for i, n in enumerate(repeats):
            cout = int(self.CHANNELS[groups] * scale * 2 ** i) // (4 * groups) * 4 * groups
            for j in range(n):
                units.append(_ShuffleV1Unit(cin, cout, 2 if j == 0 else 1, groups,
                                            first_group=not (i == 0 and j == 0)))
                cin = cout
        self.units = nn.Sequential(*units)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.units(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def shufflenet_v1(seed: int = 0, groups: int = 3, num_classes: int = 1000, scale: float = 1.0,
                  repeats=(4, 8, 4)) -> nn.Module:
    """ShuffleNet-v1 1x with `groups` groups in its grouped 1x1 convolutions (the first unit's
    first 1x1 ungrouped, as in the paper), seeded random weights.

    Example:
        >>> m = shufflenet_v1(groups=8, scale=0.5, repeats=(1, 1, 1))   # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(ShuffleNetV1(groups, tuple(repeats), scale, num_classes), seed)


# ---------------------------------------------------------------------------------------------
# ShuffleNet-v2 (Ma et al. 2018), torchvision's layout: channel split, 1x1 - depthwise 3x3 -
# 1x1 on one half, concat, shuffle with 2 groups.

class _ShuffleV2Unit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_conv_bn(cin, cin, 3, stride, cin, relu=False),
                                         _conv_bn(cin, half))
        self.branch2 = nn.Sequential(_conv_bn(cin if stride > 1 else half, half),
                                     _conv_bn(half, half, 3, stride, half, relu=False),
                                     _conv_bn(half, half))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(4, 8, 4), channels=(24, 116, 232, 464, 1024),
                 num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, channels[0], 3, 2), nn.MaxPool2d(3, 2, 1))
        units, cin = [], channels[0]
        for n, cout in zip(repeats, channels[1:4]):
            for j in range(n):
                units.append(_ShuffleV2Unit(cin, cout, 2 if j == 0 else 1))
                cin = cout
        self.units = nn.Sequential(*units)
        self.conv5 = _conv_bn(cin, channels[4])
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x):
        x = self.conv5(self.units(self.stem(x)))
        return self.fc(x.mean([2, 3]))


def shufflenet_v2(seed: int = 0, num_classes: int = 1000, repeats=(4, 8, 4),
                  channels=(24, 116, 232, 464, 1024)) -> nn.Module:
    """ShuffleNet-v2 1.0x (torchvision's shufflenet_v2_x1_0 layout), seeded random weights.

    Example:
        >>> m = shufflenet_v2(repeats=(1, 1, 1), channels=(8, 16, 32, 64, 128))  # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(ShuffleNetV2(tuple(repeats), tuple(channels), num_classes), seed)


# ---------------------------------------------------------------------------------------------
# RegNetX (Radosavovic et al. 2020), torchvision's layout: ResNet bottlenecks with a grouped
# 3x3 of a fixed group width, bottleneck ratio 1.

class _XBlock(nn.Module):
    def __init__(self, cin, cout, stride, group_width):
        super().__init__()
        self.a = _conv_bn(cin, cout)
        self.b = _conv_bn(cout, cout, 3, stride, cout // group_width)
        self.c = _conv_bn(cout, cout, relu=False)
        self.proj = (_conv_bn(cin, cout, 1, stride, relu=False)
                     if stride != 1 or cin != cout else None)

    def forward(self, x):
        shortcut = x if self.proj is None else self.proj(x)
        return torch.relu(shortcut + self.c(self.b(self.a(x))))


class RegNetX(nn.Module):
    def __init__(self, depths=(1, 2, 7, 12), widths=(32, 64, 160, 400), group_width=16,
                 stem=32, num_classes=1000):
        super().__init__()
        self.stem = _conv_bn(3, stem, 3, 2)
        blocks, cin = [], stem
        for depth, width in zip(depths, widths):
            for j in range(depth):
                blocks.append(_XBlock(cin, width, 2 if j == 0 else 1, group_width))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def regnet_x_400mf(seed: int = 0, num_classes: int = 1000, depths=(1, 2, 7, 12),
                   widths=(32, 64, 160, 400), group_width: int = 16) -> nn.Module:
    """RegNetX-400MF (torchvision's regnet_x_400mf: depths 1, 2, 7, 12, widths 32, 64, 160,
    400, group width 16), seeded random weights.

    Example:
        >>> m = regnet_x_400mf(depths=(1, 1, 1, 1), widths=(16, 32, 64, 128),
        ...                    group_width=8)                          # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(RegNetX(tuple(depths), tuple(widths), group_width, 32, num_classes), seed)
