"""Reference models in plain torch.nn with seeded random weights: ResNet-18, DenseNet-121,
MobileNet-V2, BERT.

Nothing is downloaded. Every constructor takes a `seed` and size knobs so tests can build small
versions quickly; the defaults are the real architectures. Models come back in eval mode with
batch-norm running statistics randomized (an identity batch norm would hide a wrong fold), in
float32 (call `.double()` for float64).

Example:
    >>> from kiln.testing.models import resnet18
    >>> model = resnet18(seed=0, num_classes=10, width=16)          # doctest: +SKIP
    >>> model(torch.randn(1, 3, 64, 64)).shape                      # doctest: +SKIP
    torch.Size([1, 10])
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["resnet18", "densenet121", "mobilenet_v2", "bert", "BertConfig", "randomize_norm_stats",
           "example_input"]


def randomize_norm_stats(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm random running mean/var and affine parameters away from identity.

    Example:
        >>> randomize_norm_stats(nn.Sequential(nn.BatchNorm2d(4)), seed=1)   # doctest: +SKIP
    """
    gen = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
    return model


def _finish(model: nn.Module, seed: int) -> nn.Module:
    randomize_norm_stats(model, seed)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# ResNet-18 (He et al. 2016), the torchvision layout and state-dict names.

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        # torchvision calls one ReLU module twice; PT2E's X86InductorQuantizer groups nodes by
        # module and rejects a group with two outputs, so the second call has its own module
        # (a ReLU holds no state: the state dict is torchvision's)
        self.relu2 = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000, width=64):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(width, layers[0], 1)
        self.layer2 = self._make_layer(width * 2, layers[1], 2)
        self.layer3 = self._make_layer(width * 4, layers[2], 2)
        self.layer4 = self._make_layer(width * 8, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride):
        layers = [BasicBlock(self.inplanes, planes, stride)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(seed: int = 0, num_classes: int = 1000, width: int = 64,
             layers=(2, 2, 2, 2)) -> nn.Module:
    """ResNet-18 with seeded random weights, eval mode; `width` 64 and `layers` (2,2,2,2) are real.

    Example:
        >>> m = resnet18(seed=0, width=8, layers=(1, 1, 1, 1), num_classes=10)  # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(ResNet(tuple(layers), num_classes, width), seed)


# ---------------------------------------------------------------------------------------------
# DenseNet-121 (Huang et al. 2017), the torchvision layout: dense blocks of BN-ReLU-1x1-BN-ReLU-3x3
# layers whose outputs are concatenated, joined by BN-ReLU-1x1-avgpool transitions.

class _DenseLayer(nn.Module):
    def __init__(self, channels: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(channels, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(x)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, layers: int, channels: int, growth: int, bn_size: int):
        super().__init__({f"denselayer{k + 1}": _DenseLayer(channels + k * growth, growth, bn_size)
                          for k in range(layers)})

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, channels: int, out_channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)


class DenseNet(nn.Module):
    def __init__(self, growth: int, blocks: tuple, init_features: int, bn_size: int,
                 num_classes: int):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(3, 2, 1))
        channels = init_features
        for k, layers in enumerate(blocks):
            self.features.add_module(f"denseblock{k + 1}",
                                     _DenseBlock(layers, channels, growth, bn_size))
            channels += layers * growth
            if k != len(blocks) - 1:
                self.features.add_module(f"transition{k + 1}",
                                         _Transition(channels, channels // 2))
                channels //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(channels))
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = torch.relu(self.features(x))
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def densenet121(seed: int = 0, num_classes: int = 1000, growth: int = 32,
                blocks=(6, 12, 24, 16), init_features: int = 64) -> nn.Module:
    """DenseNet-121 with seeded random weights, eval mode; the defaults are the real sizes.

    Example:
        >>> m = densenet121(growth=8, blocks=(2, 2), init_features=16, num_classes=10)  # doctest: +SKIP
    """
    torch.manual_seed(seed)
    return _finish(DenseNet(growth, tuple(blocks), init_features, 4, num_classes), seed)


# ---------------------------------------------------------------------------------------------
# MobileNet-V2 (Sandler et al. 2018), the torchvision layout.

def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin, cout, kernel=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand_ratio):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvBNReLU(cin, hidden, 1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes=1000, width_mult=1.0, settings=SETTINGS, dropout=0.2):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features = [ConvBNReLU(3, cin, stride=2)]
        for t, c, n, s in settings:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU(cin, self.last_channel, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout),
                                        nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(seed: int = 0, num_classes: int = 1000, width_mult: float = 1.0,
                 settings=None) -> nn.Module:
    """MobileNet-V2 with seeded random weights; `settings` is a list of (t, c, n, s) rows.

    Example:
        >>> m = mobilenet_v2(seed=0, width_mult=0.25, settings=[(1, 16, 1, 1), (6, 24, 2, 2)])
        ... # doctest: +SKIP
    """
    torch.manual_seed(seed)
    settings = MobileNetV2.SETTINGS if settings is None else tuple(tuple(s) for s in settings)
    return _finish(MobileNetV2(num_classes, width_mult, settings), seed)


# ---------------------------------------------------------------------------------------------
# BERT encoder (Devlin et al. 2019): post-LayerNorm transformer, exact (erf) GELU.

class BertConfig:
    """Sizes of a BERT encoder; the defaults are BERT-base.

    Example:
        >>> BertConfig(layers=2, hidden=64, heads=4).intermediate
        256
    """

    def __init__(self, vocab_size=30522, hidden=768, layers=12, heads=12, intermediate=None,
                 max_position=512, type_vocab_size=2, layer_norm_eps=1e-12):
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        self.vocab_size, self.hidden, self.layers, self.heads = vocab_size, hidden, layers, heads
        self.intermediate = 4 * hidden if intermediate is None else intermediate
        self.max_position, self.type_vocab_size = max_position, type_vocab_size
        self.layer_norm_eps = layer_norm_eps


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        # Every token is of segment 0, as when a model is called without token_type_ids.
        x = x + self.token_type_embeddings.weight[0]
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.hidden // cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = nn.Dropout(0.1)

    def _heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, mask_bias):
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if mask_bias is not None:
            scores = scores + mask_bias
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.shape[0], ctx.shape[1], -1)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        eps = cfg.layer_norm_eps
        self.attention = BertSelfAttention(cfg)
        self.attention_output = nn.Linear(cfg.hidden, cfg.hidden)
        self.attention_norm = nn.LayerNorm(cfg.hidden, eps=eps)
        self.intermediate = nn.Linear(cfg.hidden, cfg.intermediate)
        self.gelu = nn.GELU()    # exact (erf) form
        self.output = nn.Linear(cfg.intermediate, cfg.hidden)
        self.output_norm = nn.LayerNorm(cfg.hidden, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask_bias):
        a = self.dropout(self.attention_output(self.attention(x, mask_bias)))
        x = self.attention_norm(x + a)
        h = self.dropout(self.output(self.gelu(self.intermediate(x))))
        return self.output_norm(x + h)


class Bert(nn.Module):
    """BERT encoder: forward(input_ids (B, S) int64, attention_mask (B, S) optional) gives the
    last hidden states (B, S, H)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.layers))

    def forward(self, input_ids, attention_mask=None):
        x = self.embeddings(input_ids)
        mask_bias = None
        if attention_mask is not None:
            # 1 keeps a token, 0 masks it; a large finite negative keeps float64 exact elsewhere.
            keep = attention_mask[:, None, None, :].to(x.dtype)
            mask_bias = (1.0 - keep) * -10000.0
        for layer in self.layer:
            x = layer(x, mask_bias)
        return x


def bert(seed: int = 0, layers: int = 12, hidden: int = 768, heads: int = 12,
         intermediate: int | None = None, vocab_size: int = 30522,
         max_position: int = 512) -> nn.Module:
    """A BERT encoder with seeded random weights (std 0.02 as in BERT's initializer), eval mode.

    Example:
        >>> m = bert(seed=0, layers=2, hidden=64, heads=4, vocab_size=100)   # doctest: +SKIP
        >>> m(torch.randint(0, 100, (1, 16))).shape                          # doctest: +SKIP
        torch.Size([1, 16, 64])
    """
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size, hidden, layers, heads, intermediate, max_position)
    model = Bert(cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.bias, 0.0, 0.02)
            if isinstance(m, nn.LayerNorm):
                # Away from (1, 0) so a dropped gamma or beta shows up in the comparison.
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
    return model.eval()


def example_input(model: nn.Module, batch: int = 1, image_size: int = 224, seq_len: int = 128,
                  seed: int = 0, dtype=None) -> tuple:
    """Seeded example inputs for one of these models, as a tuple for torch.export.

    Images are (batch, 3, image_size, image_size); BERT gets input_ids (batch, seq_len) int64.

    Example:
        >>> (x,) = example_input(resnet18(width=8), image_size=32)   # doctest: +SKIP
    """
    gen = torch.Generator().manual_seed(seed)
    if isinstance(model, Bert):
        vocab = model.config.vocab_size
        return (torch.randint(0, vocab, (batch, seq_len), generator=gen),)
    dtype = dtype or next(model.parameters()).dtype
    return (torch.randn(batch, 3, image_size, image_size, generator=gen, dtype=dtype),)
