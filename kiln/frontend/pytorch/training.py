"""What a model computes in training mode, imported: its random inputs and its buffer updates.

A training-mode forward differs from an inference one in two ways kiln models explicitly.
Dropout draws a random mask: the import makes each mask a parameter of main (`DropoutMask`),
which the caller fills from PyTorch's own generator in the order eager PyTorch draws them (so
the masks, and the results, are PyTorch's). Batch norm normalizes by the batch's statistics and
updates its running statistics: torch.export records the new values as outputs that mutate
buffers, and main returns them after the model's output (`TrainingImport.mutations`).

    imported = import_for_training(model.train(), (x,))
    imported.mod["main"]       # main(*inputs, *masks, *weights) -> (output, *new buffer values)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DropoutMask", "RandomInputs", "TrainingImport"]


@dataclass(frozen=True)
class DropoutMask:
    """A parameter of main holding a dropout mask: 0 where an element is dropped, 1 / (1 - p)
    where it is kept, of the dropped tensor's shape and dtype (what eager CPU dropout multiplies
    by: bernoulli(1 - p) divided by 1 - p)."""

    name: str
    shape: tuple
    dtype: str
    p: float
    strides: tuple | None = None    # the dropped tensor's in eager (None: contiguous)

    def draw(self, generator=None) -> torch.Tensor:
        """The mask as eager PyTorch draws it from `generator` (default: the global one), in
        the dropped tensor's memory order (eager's empty_like; a channels-last tensor's mask
        is filled in that order), returned contiguous.

        Example:
            >>> DropoutMask("m", (2, 3), "float32", 0.5).draw().shape
            torch.Size([2, 3])
        """
        dtype = getattr(torch, self.dtype)
        noise = torch.empty(self.shape, dtype=dtype) if self.strides is None else \
            torch.empty_strided(self.shape, self.strides, dtype=dtype)
        noise.bernoulli_(1 - self.p, generator=generator).div_(1 - self.p)
        return noise.contiguous()


@dataclass(frozen=True)
class TrainingImport:
    """A training-mode import: main(*inputs, *masks, *weights) returns the model's
    `num_outputs` outputs, then the new value of each of its parameters named in `mutations`
    (buffers, or inputs the model updates in place), as a tuple when there are several values;
    `params` holds the weights' values, `masks` describes main's mask parameters in the order
    eager PyTorch draws them."""

    mod: object
    params: dict
    masks: tuple
    mutations: tuple
    num_outputs: int = 1


class RandomInputs:
    """The masks a training-mode import adds to main, in the order the graph (and eager
    PyTorch) draws them. Converters call dropout_mask; the importer makes the masks
    parameters of main."""

    def __init__(self, namer):
        self._namer = namer
        self.masks: list = []
        self.vars: list = []

    def dropout_mask(self, like, p: float, strides=None):
        """A new mask parameter for a dropout of `like` with probability p (0 < p < 1);
        `strides`: those of the tensor eager drops (None: contiguous)."""
        from ...graph import var
        ty = like.checked_type
        mask = DropoutMask(self._namer("dropout_mask"), tuple(int(d) for d in ty.shape),
                           ty.dtype, float(p), None if strides is None else tuple(strides))
        self.masks.append(mask)
        self.vars.append(var(mask.name, mask.shape, mask.dtype))
        return self.vars[-1]
