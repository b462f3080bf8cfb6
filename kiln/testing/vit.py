"""ViT-B/16 (Dosovitskiy et al. 2021) in plain torch.nn with seeded random weights, the timm
layout: a 16x16 stride-16 patch convolution, a class token, learned position embeddings, and
pre-LayerNorm encoder blocks whose attention projects q, k and v with one fused Linear
(hidden -> 3 hidden: 197 tokens x 768 -> 2304 at 224x224, the awkward row count of issue 34).

Nothing is downloaded (timm and torchvision cannot be imported beside the CPU build of torch
these machines use); inputs come from kiln.testing.models.example_input.

Example:
    >>> from kiln.testing.vit import vit_b_16
    >>> m = vit_b_16(layers=1, hidden=64, heads=4, image_size=32, num_classes=10)  # doctest: +SKIP
    >>> m(torch.randn(1, 3, 32, 32)).shape                                          # doctest: +SKIP
    torch.Size([1, 10])
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["vit_b_16"]


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(ctx.transpose(1, 2).reshape(b, n, c))


class _Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, eps=1e-6)
        self.attn = _Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size=224, patch=16, hidden=768, layers=12, heads=12, mlp=3072,
                 num_classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, hidden, patch, patch)
        tokens = (image_size // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, hidden))
        self.blocks = nn.Sequential(*(_Block(hidden, heads, mlp) for _ in range(layers)))
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def vit_b_16(seed: int = 0, image_size: int = 224, hidden: int = 768, layers: int = 12,
             heads: int = 12, mlp: int | None = None, num_classes: int = 1000) -> nn.Module:
    """ViT-B/16 (12 layers, hidden 768, 12 heads, MLP 3072) with seeded random weights
    (std 0.02; LayerNorms away from identity), eval mode; smaller sizes for tests.

    Example:
        >>> m = vit_b_16(layers=2, hidden=64, heads=4, image_size=64)   # doctest: +SKIP
    """
    torch.manual_seed(seed)
    model = VisionTransformer(image_size, 16, hidden, layers, heads, mlp or 4 * hidden,
                              num_classes)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                    or name == "norm.weight":
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1 and "norm" in name:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                nn.init.normal_(p, 0.0, 0.02)
    return model.eval()
