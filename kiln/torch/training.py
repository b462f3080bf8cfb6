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

A model whose training computation differs from its inference one (dropout, batch norm with
batch statistics, anything that reads `self.training`) is not compiled in training mode yet:
such a model must be in eval mode (batch norm then normalizes by its running statistics, dropout
is the identity), as when fine-tuning with frozen statistics. Which parameters and inputs get
gradients is fixed when compiling (their requires_grad then); a later change is an error that
says to compile again.
"""
from __future__ import annotations

from collections import Counter

import torch
from torch.autograd.function import once_differentiable

from .optimize import InputError, TorchRunner

__all__ = ["KilnTrainingModule", "optimize_for_training"]


class _KilnFunction(torch.autograd.Function):
    """forward: kiln's forward function on (inputs, parameters, buffers); backward: kiln's
    backward function on (saved tensors, the same, grad_out)."""

    @staticmethod
    def forward(ctx, module, *tensors):
        out, *saved = module.forward_runner(tensors)
        if module.split.saves_output:       # the backward reads the output itself
            saved = [out, *saved]
        ctx.module = module
        ctx.save_for_backward(*saved, *tensors)
        ctx.num_saved = len(saved)
        return out

    @staticmethod
    @once_differentiable                    # kiln's backward is not itself differentiated
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
        self.forward_runner = TorchRunner(forward_lib, release=True)
        self.backward_runner = TorchRunner(backward_lib, release=True)
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
        for spec, t, wanted in zip(self.forward_runner.inputs, tensors, self.differentiated):
            why = spec.mismatch(t)
            if why is not None:
                raise InputError(f"input {spec.name!r}: {why}")
            if t.requires_grad and not wanted:
                raise InputError(f"{spec.name!r} requires grad, but it did not when the model "
                                 f"was compiled: its gradient is not computed; compile again "
                                 f"(kiln.torch.optimize(..., training=True))")
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
    example_inputs = tuple(example_inputs)
    _check_trainable(model, example_inputs)
    was_training = model.training
    model.eval()                            # the same computation: checked just above
    try:
        mod, params = from_pytorch(export_program(model, example_inputs))
    finally:
        model.train(was_training)
    main = mod["main"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    names = [p.name_hint for p in main.params]
    # an input is differentiated when its example requires grad (a model's input usually does
    # not: its gradient would be computed and thrown away at every step)
    wants_input = iter(t.requires_grad for t in example_inputs)
    differentiated = [n in trainable if n in params else next(wants_input) and
                      np.dtype(p.checked_type.dtype).kind == "f"
                      for n, p in zip(names, main.params)]
    split = split_gradient(gradient(main, wrt=[n for n, d in zip(names, differentiated) if d]))
    libs = [compile_with_log(IRModule.from_expr(f), None, target, tuning_log, opt_level)
            for f in (split.forward, split.backward)]
    state = set(dict(model.named_parameters())) | set(dict(model.named_buffers()))
    constants = {n: v for n, v in params.items() if n not in state}
    return KilnTrainingModule(model, split, *libs, names, differentiated, constants)


def _check_trainable(model, example_inputs) -> None:
    """A NotImplementedError for what kiln does not train like PyTorch yet: a computation that
    differs between training and inference (found by comparing the ops of both exports), and
    embeddings whose padding row or frequency scaling change the gradient."""
    special = sorted({name or type(model).__name__ for name, m in model.named_modules()
                      if isinstance(m, torch.nn.Embedding)
                      and (m.padding_idx is not None or m.scale_grad_by_freq)})
    if special:
        raise NotImplementedError(
            f"embedding(s) {', '.join(special)} have padding_idx or scale_grad_by_freq, whose "
            f"gradients kiln does not compute yet")
    if not model.training:
        return

    def ops(training: bool) -> Counter:
        # each call's op and constant arguments (a dropout probability, a training flag)
        model.train(training)
        program = torch.export.export(model, example_inputs)
        return Counter(f"{n.target}{_constants(n.args)}{_constants(n.kwargs)}"
                       for n in program.graph.nodes if n.op == "call_function")
    try:
        training, inference = ops(True), ops(False)     # one export of each mode
    finally:
        model.train(True)
    differ = sorted((training - inference) + (inference - training))
    if differ:
        raise NotImplementedError(
            f"{type(model).__name__} computes differently in training mode ({', '.join(differ)}: "
            f"dropout, batch statistics...), which kiln does not compile yet: call model.eval() "
            f"to train with running statistics and without dropout")


def _constants(value):
    """`value` (a node's arguments) with the graph's values replaced by "%": what is left are
    the constants the op is called with."""
    if isinstance(value, torch.fx.Node):
        return "%"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_constants(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_constants(v)}" for k, v in sorted(value.items())) + "}"
    return repr(value)
