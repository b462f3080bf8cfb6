"""kiln.torch.optimize(..., training=True): a PyTorch model whose forward and backward both run
in kiln, inside PyTorch's autograd.

The model's graph is differentiated by kiln (kiln.graph.transform.gradient) with respect to its
floating-point inputs and its parameters, and split into a forward that also returns what the
backward needs (a minimum cut: matmul and convolution outputs, ReLU masks) and a backward
(kiln.graph.transform.split_gradient); both are compiled once. A torch.autograd.Function runs
the forward, keeps the saved tensors for the backward, and hands PyTorch one gradient per input
and parameter. The parameters stay the model's own nn.Parameters (the module holds the model),
so any PyTorch optimizer updates them; every call reads their current values, and tensors cross
into kiln without copies (DLPack).

Layers whose training behaviour differs from inference (dropout, batch norm with batch
statistics) are not compiled in training mode yet: such a model must be in eval mode (batch norm
then normalizes by its running statistics, dropout is the identity), as it would be when
fine-tuning with frozen statistics.
"""
from __future__ import annotations

import torch

from .optimize import InputError, TorchRunner

__all__ = ["KilnTrainingModule", "optimize_for_training"]

# Modules that behave differently in training: their training form is not compiled yet.
_MODE_DEPENDENT = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)


class _KilnFunction(torch.autograd.Function):
    """forward: kiln's forward function on (inputs, parameters, buffers); backward: kiln's
    backward function on (saved tensors, the same, grad_out)."""

    @staticmethod
    def forward(ctx, module, *tensors):
        out, *saved = module.forward_runner(tensors)
        ctx.module = module
        ctx.save_for_backward(*saved, *tensors)
        ctx.num_saved = len(saved)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        stored = ctx.saved_tensors
        saved, tensors = stored[:ctx.num_saved], stored[ctx.num_saved:]
        grads = ctx.module.backward_runner([*saved, *tensors, grad_out.contiguous()])
        # one gradient per differentiated input, None for the others (indices, buffers)
        out, it = [None], iter(grads)
        for wanted in ctx.module.differentiated:
            out.append(next(it) if wanted else None)
        return tuple(out)


class KilnTrainingModule(torch.nn.Module):
    """An nn.Module running `model`'s forward and backward in kiln (see the module docstring).
    Its parameters are `model`'s; call it on inputs of the compiled shapes and dtypes.

    Example:
        >>> fast = kiln.torch.optimize(model, (x,), training=True)   # doctest: +SKIP
        >>> loss = F.cross_entropy(fast(x), labels); loss.backward()  # doctest: +SKIP
    """

    def __init__(self, model, split, forward_lib, backward_lib, names, differentiated,
                 constants):
        super().__init__()
        self.model = model                  # registers its parameters as ours
        self.split = split
        self.forward_runner = TorchRunner(forward_lib)
        self.backward_runner = TorchRunner(backward_lib)
        self._names = names                 # main's parameter names: inputs, then weights
        self.differentiated = differentiated
        # the model's tensors by name (read at each call: an optimizer updates them), and
        # constants torch.export lifted out of the code
        self._state = {n: torch.from_numpy(c.copy()) for n, c in constants.items()}
        self._state.update(model.named_parameters())
        self._state.update(model.named_buffers())
        self.num_inputs = sum(1 for n in names if n not in self._state)

    def forward(self, *inputs):
        if len(inputs) != self.num_inputs:
            raise InputError(f"{type(self.model).__name__} was compiled for {self.num_inputs} "
                             f"input(s), got {len(inputs)}")
        queue = list(inputs)
        tensors = [self._state[n] if n in self._state else queue.pop(0) for n in self._names]
        for spec, t in zip(self.forward_runner.inputs, tensors):
            why = spec.mismatch(t)
            if why is not None:
                raise InputError(f"input {spec.name!r}: {why}")
        return _KilnFunction.apply(self, *tensors)

    def extra_repr(self) -> str:
        return (f"forward and backward compiled by kiln; the forward saves "
                f"{self.split.saved_bytes} bytes in {len(self.split.saved)} tensors for the "
                f"backward (of {self.split.read_bytes} the backward reads), recomputing "
                f"{len(self.split.recomputed)} cheap ops")


def optimize_for_training(model, example_inputs, *, target="llvm", tuning_log=None,
                          opt_level=None):
    """Compile `model`'s forward and backward for the shapes and dtypes of `example_inputs`;
    returns a KilnTrainingModule (see kiln.torch.optimize).

    Example:
        >>> fast = optimize_for_training(model, (torch.randn(8, 3, 32, 32),))  # doctest: +SKIP
    """
    import numpy as np

    from kiln.driver.compile import compile_with_log
    from kiln.frontend.pytorch import export_program, from_pytorch
    from kiln.graph.module import IRModule
    from kiln.graph.transform import gradient, split_gradient

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if model.training:
        dependent = sorted({type(m).__name__ for m in model.modules()
                            if isinstance(m, _MODE_DEPENDENT)})
        if dependent:
            raise NotImplementedError(
                f"{type(model).__name__} has {', '.join(dependent)}, whose training form "
                f"(dropout masks, batch statistics) kiln does not compile yet: call model.eval() "
                f"to train with running statistics and without dropout")
    was_training = model.training
    model.eval()                            # the same computation: checked just above
    try:
        mod, params = from_pytorch(export_program(model, tuple(example_inputs)))
    finally:
        model.train(was_training)
    main = mod["main"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    names = [p.name_hint for p in main.params]
    differentiated = [(n in trainable) or (n not in params and
                                           np.dtype(p.checked_type.dtype).kind == "f")
                      for n, p in zip(names, main.params)]
    split = split_gradient(gradient(main, wrt=[n for n, d in zip(names, differentiated) if d]))
    libs = [compile_with_log(IRModule.from_expr(f), None, target, tuning_log, opt_level)
            for f in (split.forward, split.backward)]
    state = set(dict(model.named_parameters())) | set(dict(model.named_buffers()))
    constants = {n: v for n, v in params.items() if n not in state}
    return KilnTrainingModule(model, split, *libs, names, differentiated, constants)
