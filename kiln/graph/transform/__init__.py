"""kiln.graph.transform: graph passes and the infrastructure that runs them.

Example:
    >>> from kiln.graph import transform as T
    >>> seq = T.Sequential([T.BindParams(params), T.SimplifyInference(), T.FoldConstant(),
    ...                     T.SimplifyExpr(), T.EliminateCommonSubexpr(),
    ...                     T.CombineParallelDense(), T.DeadCodeElimination()])  # doctest: +SKIP
    >>> with T.PassContext(opt_level=3):  # doctest: +SKIP
    ...     mod = seq(mod)
"""
import importlib

from .annotate_target import AnnotateTarget, annotate_target
from .combine_parallel import (CombineParallelBatchMatmul, CombineParallelDense,
                               combine_parallel_batch_matmul, combine_parallel_dense)
from .dead_code import DeadCodeElimination, dead_code_elimination
from .eliminate_common_subexpr import EliminateCommonSubexpr, eliminate_common_subexpr
from .fold_constant import BindParams, FoldConstant, FoldError, bind_params, fold_constant
from .infer_type import InferType, check_function, check_module
from .legalize_float16 import LegalizeFloat16, legalize_float16
from .legalize_qnn import LegalizeQnn, legalize_qnn
from .fake_quantization_to_integer import (FakeQuantizationToInteger,
                                           fake_quantization_to_integer)
from .merge_compiler_regions import MergeCompilerRegions, merge_compiler_regions
from .merge_composite import MergeComposite, merge_composite
from .partition_graph import (PartitionError, PartitionGraph, check_no_annotations,
                              partition_graph)
from .pass_infra import (FunctionPass, ModulePass, Pass, PassContext, PassInfo, PassInstrument,
                         PassTimingInstrument, PrintIR, Sequential, VerifyIR, function_pass,
                         list_pass_configs, module_pass, register_pass_config)
from .pipeline import default_passes, default_pipeline
from .rewrite import RuleRewriter, rewrite
from .simplify_expr import SimplifyExpr, simplify_expr
from .simplify_inference import SimplifyInference, simplify_inference

# Passes living in modules other engineers write (fuse_ops.py, memory_plan.py) are found here
# on first use, so this package imports while they are being written.
_OTHER_MODULES = ("fuse_ops", "memory_plan", "autodiff", "forward_backward")


def __getattr__(name):
    for module in _OTHER_MODULES:
        try:
            mod = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as err:
            if err.name == f"{__name__}.{module}":
                continue
            raise
        if hasattr(mod, name):
            value = getattr(mod, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
