"""VDLA as a target of graph partitioning (TVM's "bring your own codegen" flow): the
"vdla.qconv2d" composite pattern; partition_for_vdla, which runs merge_composite ->
annotate_target -> merge_compiler_regions -> partition_graph; and vdla_tasks, the tuning
tasks of a partitioned module. (The codegen and runtime are in external.py.)

What VDLA runs: conv2d(int8 data, int8 constant weights -> int32), right_shift by a constant,
clip to [-128, 127] or [0, 127], cast to int8 — groups 1, no dilation, a square kernel with
equal strides and equal padding on every side, input and output channels multiples of
VDLA's 16-channel block, and a tiling that fits VDLA's buffers. Anything else stays with kiln
on the CPU (ResNet-18's stem, with 3 input channels, for one).

Example:
    >>> lib = kiln.compile(partition_for_vdla(mod, params))          # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ...codegen.external import bind_constants_of
from ...graph.expr import Call, Constant, Function
from ...graph.module import IRModule
from ...graph.pattern import is_constant, is_op, wildcard
from ...graph.transform.annotate_target import annotate_target
from ...graph.transform.fold_constant import bind_params
from ...graph.transform.merge_compiler_regions import merge_compiler_regions
from ...graph.transform.merge_composite import merge_composite
from ...graph.transform.partition_graph import partition_graph
from ...graph.visitor import post_order
from .conv2d import default_tiling
from .external import COMPOSITE, qconv_of
from .isa import VDLAConfig

COMPILER = "vdla"


def _qconv2d_pattern():
    conv = is_op("nn.conv2d")(wildcard(), is_constant())
    return is_op("cast")(is_op("clip")(is_op("right_shift")(conv, is_constant())))


def _same(values) -> bool:
    return len(set(int(v) for v in values)) == 1


def runs_on_vdla(cast) -> bool:
    """Whether the matched chain rooted at `cast` is a convolution VDLA runs (the module
    docstring's conditions).

    Example:
        >>> runs_on_vdla(call)                                       # doctest: +SKIP
        True
    """
    clip = cast.args[0]
    shift = clip.args[0]
    conv = shift.args[0]
    data, weight = conv.args
    a = conv.attrs
    shape = tuple(data.checked_type.shape)
    config = VDLAConfig()
    if isinstance(data, Constant) or not all(isinstance(d, int) for d in shape):
        return False            # VDLA's functions take their data; shapes must be known
    if cast.attrs.dtype != "int8" or data.checked_type.dtype != "int8" or \
            weight.checked_type.dtype != "int8" or conv.checked_type.dtype != "int32":
        return False
    if a.groups != 1 or tuple(a.dilation) != (1, 1) or a.data_layout != "NCHW" or \
            not _same(a.strides) or not _same(a.padding) or len(shape) != 4:
        return False
    o, c, kh, kw = weight.data.shape
    if kh != kw or c % config.block_in or o % config.block_out:
        return False
    s = shift.args[1]
    if not (isinstance(s, Constant) and s.data.size == 1 and s.data.dtype == np.int32
            and 0 <= int(s.data) < 32):
        return False
    if float(clip.attrs.a_max) != 127.0 or float(clip.attrs.a_min) not in (-128.0, 0.0):
        return False
    try:
        default_tiling(c, shape[2], shape[3], o, kh, int(a.strides[0]), int(a.padding[0]),
                       1, config)
    except ValueError:
        return False            # no tile of this convolution fits VDLA's buffers
    return True


def pattern_table() -> list:
    """VDLA's composite patterns, for merge_composite.

    Example:
        >>> [name for name, *_ in pattern_table()]
        ['vdla.qconv2d']
    """
    return [(COMPOSITE, _qconv2d_pattern(), runs_on_vdla)]


def partition_for_vdla(mod, params=None) -> IRModule:
    """`mod` with the convolutions VDLA runs partitioned into "vdla" regions (global
    functions compiled by VDLA's external codegen when kiln.compile meets them); params, if
    given, are bound first (VDLA needs its weights as constants).

    Example:
        >>> lib = kiln.compile(partition_for_vdla(mod, params))      # doctest: +SKIP
    """
    from ...driver.stages import check_param_names
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if params:
        check_param_names(mod["main"], params)
        mod = mod.with_function("main", bind_params(mod["main"], params))
    mod = merge_composite(mod, pattern_table())
    mod = annotate_target(mod, [COMPILER])
    mod = merge_compiler_regions(mod)
    return partition_graph(mod, bind_constants=bind_constants_of)


def vdla_tasks(mod: IRModule) -> list:
    """The tuning tasks (template conv2d_int8.vdla, target "vdla") of the convolutions in a
    module's VDLA regions: what VDLA's codegen asks the dispatch context for when kiln.compile
    meets them. Tune them, then compile under autotvm.apply_history_best(log).

    Example:
        >>> for task in vdla_tasks(partition_for_vdla(mod)):                 # doctest: +SKIP
        ...     autotvm.XGBTuner(task).tune(64, log_file="vdla.jsonl")
    """
    from ...autotvm.task import Task
    from ...autotvm.templates.vdla import CONV2D_INT8_VDLA_TEMPLATE
    tasks = {}
    for _, func in mod.items():
        if func.attrs.get("Compiler") != COMPILER:
            continue
        for node in post_order(func.body, enter_functions=False):
            if isinstance(node, Call) and isinstance(node.op, Function) and \
                    node.op.attrs.get("Composite") == COMPOSITE:
                task = Task(CONV2D_INT8_VDLA_TEMPLATE, qconv_of(node.op)[0].template_args,
                            "vdla")
                tasks.setdefault(task.key, task)
    return list(tasks.values())
