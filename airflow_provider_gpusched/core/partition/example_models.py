"""Small PyTorch models written as a sequence of layers, for the pipeline profiler and runtime
(``gpusched profile NAME``, docs/partition.md). A pipeline stage runs a run of consecutive layers, so a model
to partition is an ``nn.Sequential``: these are.

* ``mlp``: 784 -> 4 x 512 -> 10, each hidden layer Linear + ReLU (input shape ``784``).
* ``convnet``: four conv blocks and a classifier for 3x32x32 images (input shape ``3,32,32``).
* ``tiny-vit``: a ViT (patch embedding, 6 transformer encoder blocks of width 192, classifier head) for
  3x64x64 images (input shape ``3,64,64``), the shape of ViT-Base at a fraction of its size.

Each takes ``seed`` so that every stage of a pipeline builds the same weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _torch() -> tuple[Any, Any]:
    """PyTorch and its ``nn``, imported on first use (the package works without PyTorch)."""
    import torch
    from torch import nn

    return torch, nn


def mlp(seed: int = 0) -> Any:
    torch, nn = _torch()
    torch.manual_seed(seed)
    layers, width = [], 784
    for _ in range(4):
        layers.append(nn.Sequential(nn.Linear(width, 512), nn.ReLU()))
        width = 512
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def convnet(seed: int = 0) -> Any:
    torch, nn = _torch()
    torch.manual_seed(seed)
    blocks, channels = [], 3
    for out in (32, 64, 128, 256):
        blocks.append(
            nn.Sequential(nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(), nn.MaxPool2d(2))
        )
        channels = out
    blocks.append(nn.Sequential(nn.Flatten(), nn.Linear(256 * 2 * 2, 10)))
    return nn.Sequential(*blocks)


def tiny_vit(seed: int = 0, image: int = 64, patch: int = 8, width: int = 192, depth: int = 6, heads: int = 3) -> Any:
    torch, nn = _torch()
    torch.manual_seed(seed)
    # PyTorch is imported here, on first use, so mypy sees nn.Module as Any: subclassing it is what a model does
    module: Any = nn.Module

    class PatchEmbedding(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Conv2d(3, width, patch, stride=patch)
            self.position = nn.Parameter(torch.zeros(1, (image // patch) ** 2, width))
            nn.init.trunc_normal_(self.position, std=0.02)

        def forward(self, x: Any) -> Any:
            return self.proj(x).flatten(2).transpose(1, 2) + self.position

    class Head(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.fc = nn.Linear(width, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(self.norm(x).mean(dim=1))

    blocks = [
        nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        for _ in range(depth)
    ]
    return nn.Sequential(PatchEmbedding(), *blocks, Head())


#: name -> (builder, the input shape of one sample)
BUILTIN: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    "mlp": (mlp, (784,)),
    "convnet": (convnet, (3, 32, 32)),
    "tiny-vit": (tiny_vit, (3, 64, 64)),
}
