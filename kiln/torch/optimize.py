"""kiln.torch.optimize: a PyTorch model compiled by kiln, called like the model, on torch tensors.

Tensors cross the boundary without copies: an input's memory is handed to the kernels that read
it, and each output is a fresh torch tensor the kernels write into (both through DLPack, bound
with GraphExecutor.set_input_zero_copy / set_output_zero_copy).

Example:
    >>> fast = kiln.torch.optimize(model.eval(), (torch.randn(1, 3, 224, 224),))  # doctest: +SKIP
    >>> y = fast(torch.randn(1, 3, 224, 224))                                      # doctest: +SKIP
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import torch

from kiln.runtime import GraphExecutor, from_dlpack
from kiln.runtime.symbolic_executor import SymbolicGraphExecutor
from kiln.runtime.describe import byte_text, tensor_text

__all__ = ["optimize", "KilnModule", "TorchRunner", "TorchTensorSpec",
           "InputError"]

_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64,
                 "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                 "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}


class InputError(ValueError):
    """A call of a kiln-compiled module with inputs it was not compiled for.

    Example:
        >>> fast(torch.randn(2, 3, 32, 32))   # doctest: +SKIP
        InputError: input 'x': expected float32[1x3x32x32], got float32[2x3x32x32]
    """


def _torch_type_text(shape, dtype) -> str:
    return tensor_text(str(dtype).removeprefix("torch."), tuple(shape))


class TorchTensorSpec:
    """Name, shape and torch dtype of one input or output of a compiled model (the runtime's
    kiln.runtime.model.TensorSpec, with its dtype as torch's).

    Example:
        >>> str(TorchTensorSpec("x", (1, 3), torch.float32))
        'float32[1x3]'
    """

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name, shape, dtype):
        # a symbolic size (a model compiled over dynamic dimensions) stays its name
        static = all(isinstance(d, int) for d in shape)
        self.name, self.shape, self.dtype = name, torch.Size(shape) if static else \
            tuple(shape), dtype

    @classmethod
    def of(cls, spec) -> "TorchTensorSpec":
        """The torch view of a runtime TensorSpec (lib.input_specs() / output_specs()).

        Example:
            >>> str(TorchTensorSpec.of(TensorSpec("x", (2,), "int64")))   # doctest: +SKIP
            'int64[2]'
        """
        return cls(spec.name, spec.shape, _TORCH_DTYPES[spec.dtype])

    def __str__(self):
        return _torch_type_text(self.shape, self.dtype)

    def mismatch(self, t) -> str | None:
        """Why tensor t cannot be this input, or None when it can.

        Example:
            >>> TorchTensorSpec("x", (2,), torch.float32).mismatch(torch.zeros(3))
            'expected float32[2], got float32[3]'
        """
        if not isinstance(t, torch.Tensor):
            return f"expected a torch.Tensor {self}, got {type(t).__name__}"
        if t.device.type != "cpu":
            return f"is on {t.device}; kiln runs on the CPU (pass t.cpu())"
        if t.dtype != self.dtype or len(t.shape) != len(self.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(self.shape, t.shape)):
            # (symbolic sizes: the executor checks them against each other and their ranges)
            return f"expected {self}, got {_torch_type_text(t.shape, t.dtype)}"
        return None


# ---------------------------------------------------------------------------------------------
# torch tensors in, torch tensors out.

def _as_kiln(t: torch.Tensor):
    if t.requires_grad:
        t = t.detach()          # a view: DLPack refuses tensors that require grad
    if not t.is_contiguous():
        t = t.contiguous()      # the one copy: kernels read row-major memory
    return from_dlpack(t)


class TorchRunner:
    """Runs a compiled model (kiln.compile's result or a loaded library) on torch tensors:
    inputs in the model's input order, a list of new output tensors back, no copies.

    Example:
        >>> run = TorchRunner(kiln.compile(mod, params=params))   # doctest: +SKIP
        >>> (y,) = run([x])                                       # doctest: +SKIP
    """

    def __init__(self, lib, release: bool = False, recycle=()):
        self.lib = lib
        # release: the executor lets go of the call's tensors when the call returns (a
        # training step's saved activations must not outlive it); otherwise it keeps the last
        # call's bindings until the next call
        self.release = release
        self.executor = GraphExecutor(lib)
        self.inputs = [TorchTensorSpec.of(s) for s in lib.input_specs()]
        self.outputs = [TorchTensorSpec.of(s) for s in lib.output_specs()]
        self._lock = threading.Lock()     # the executor's bindings are per call
        # outputs whose tensors are reused once nothing else holds them (see _output)
        self._recycle = frozenset(recycle) if hasattr(torch._C, "_storage_Use_Count") \
            else frozenset()
        self._kept: dict = {}

    def _output(self, k: int) -> torch.Tensor:
        """A tensor for output k: for a recycled output, the last call's when nothing but this
        runner holds it any more (no tensor, view or autograd record), else a new one. A new
        tensor's pages are faulted in as kiln first writes them, which costs ~0.25 ms per MiB
        (a BERT-base training step's 500 MiB of saved activations: ~130 ms of each step)."""
        kept = self._kept.get(k)
        # Python holders (a saved-tensors hook keeping the tensor object itself: the dict
        # entry, `kept` and getrefcount's argument are 3), C++ ones (autograd's records, other
        # tensors, views), then the storage's (its tensor and the probe's wrapper)
        if kept is not None and sys.getrefcount(kept) == 3 and kept._use_count() == 1 and \
                torch._C._storage_Use_Count(kept.untyped_storage()._cdata) == 2:
            return kept
        spec = self.outputs[k]
        t = torch.empty(spec.shape, dtype=spec.dtype)
        if k in self._recycle:
            self._kept[k] = t
        return t

    def __call__(self, tensors) -> list:
        with self._lock:
            ex = self.executor
            for spec, t in zip(self.inputs, tensors):
                ex.set_input_zero_copy(spec.name, _as_kiln(t))
            symbolic = isinstance(ex, SymbolicGraphExecutor)
            if symbolic:
                # the inputs' sizes say those of the outputs: bind them, then allocate
                ex = ex.bind()
                outs = [torch.empty(s.shape, dtype=_TORCH_DTYPES[s.dtype])
                        for s in ex.lib.output_specs()]
            else:
                outs = [self._output(k) for k in range(len(self.outputs))]
            for i, out in enumerate(outs):
                ex.set_output_zero_copy(i, from_dlpack(out))
            try:
                ex.run()
            finally:
                # (a symbolic library's executors are cached and shared: they keep no binding
                # to this call's tensors, inputs included)
                if symbolic:
                    self.executor.release_zero_copy()
                elif self.release:
                    ex.release_zero_copy()
        return outs


class KilnModule(torch.nn.Module):
    """An nn.Module (eval, inference only) that runs a kiln-compiled model on torch tensors.

    Inputs go by position or by name; each is checked against the compiled shape and dtype.
    Outputs come back in the structure the original model returned.

    Example:
        >>> fast = KilnModule(kiln.compile(mod, params=params))   # doctest: +SKIP
        >>> fast(x).shape                                         # doctest: +SKIP
        torch.Size([1, 10])
    """

    def __init__(self, lib, out_spec=None, source: str = "model"):
        super().__init__()
        self.runner = TorchRunner(lib)
        self.lib = lib
        self.source = source
        self._out_spec = out_spec
        self.train(False)

    @property
    def input_specs(self) -> list:
        return list(self.runner.inputs)

    @property
    def output_specs(self) -> list:
        return list(self.runner.outputs)

    def forward(self, *args, **kwargs):
        tensors = self._bind(args, kwargs)
        outs = self.runner(tensors)
        if self._out_spec is not None and self._out_spec.num_leaves == len(outs):
            return torch.utils._pytree.tree_unflatten(outs, self._out_spec)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _bind(self, args, kwargs) -> list:
        specs = self.runner.inputs
        names = [s.name for s in specs]
        if len(args) > len(specs):
            raise InputError(f"{self.source} takes {len(specs)} input(s) ({', '.join(names)}), "
                             f"got {len(args)}")
        given = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names:
                raise InputError(f"{self.source} has no input named {name!r}; its inputs are "
                                 f"{names}")
            if name in given:
                raise InputError(f"input {name!r} given both by position and by name")
            given[name] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise InputError(f"{self.source}: missing input(s) {missing} (inputs: {names})")
        grad = torch.is_grad_enabled()
        for spec in specs:
            t = given[spec.name]
            why = spec.mismatch(t)
            if why is not None:
                raise InputError(f"input {spec.name!r}: {why}")
            if grad and t.requires_grad:
                raise InputError(f"input {spec.name!r} requires grad, but kiln modules run "
                                 f"inference only (no autograd): pass it detached or call "
                                 f"under torch.no_grad()")
        return [given[n] for n in names]

    def extra_repr(self) -> str:
        g, params = self.lib.graph, self.lib.params
        target = getattr(self.lib, "target", None)
        ins = ", ".join(f"{s.name}: {s}" for s in self.runner.inputs)
        outs = ", ".join(str(s) for s in self.runner.outputs)
        nbytes = sum(np.asarray(a).nbytes for a in params.values())
        where = f" for {target}" if target is not None else ""
        return (f"{self.source} compiled by kiln{where}: ({ins}) -> ({outs}); "
                f"{len(g['kernels'])} kernel calls, {len(params)} constants "
                f"({byte_text(nbytes)})")


def optimize(model, example_inputs, *, target="llvm", tuning_log=None, opt_level=None,
             training=False, dynamic_shapes=None):
    """Compile a PyTorch model (eval mode) with kiln for the shapes and dtypes of
    `example_inputs` (a tensor or a tuple of them); returns a KilnModule that takes and returns
    torch tensors without copying them. Weights are read once, at compile time.

    With training=True, the forward and the backward both run in kiln inside PyTorch's autograd,
    the weights are the model's parameters, read at every call, and the model may be in
    training mode: dropout and batch norm then compute as in PyTorch (kiln.torch.training).
    `dynamic_shapes` (torch.export's Dims, inference only) compiles once for every size in
    the Dims' ranges (docs/dynamic_shapes.md).

    Example:
        >>> fast = kiln.torch.optimize(model.eval(), (torch.randn(1, 3, 32, 32),))  # doctest: +SKIP
        >>> torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)     # doctest: +SKIP
    """
    from kiln.driver.compile import compile_with_log
    from kiln.frontend.pytorch import export_program, from_pytorch

    if training:
        if dynamic_shapes is not None:
            raise ValueError("dynamic_shapes: training compiles one shape (leave it out)")
        from .training import optimize_for_training
        return optimize_for_training(model, example_inputs, target=target,
                                     tuning_log=tuning_log, opt_level=opt_level)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    program = export_program(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    mod, params = from_pytorch(program, dynamic_shapes=dynamic_shapes)     # (Dims' names)
    lib = compile_with_log(mod, params, target, tuning_log, opt_level)
    out_spec = getattr(getattr(program, "call_spec", None), "out_spec", None)
    return KilnModule(lib, out_spec=out_spec, source=type(model).__name__)
