"""Pass infrastructure: PassContext, Sequential, module/function passes, instruments, InferType."""
import io

import numpy as np
import pytest

from kiln.graph import (Call, Function, GraphTypeError, IRModule, TensorType, call, const, get_op,
                        structural_equal, var)
from kiln.graph.transform import (FunctionPass, InferType, ModulePass, PassContext, PassInfo,
                                  PassInstrument, PassTimingInstrument, PrintIR, Sequential,
                                  SimplifyExpr, VerifyIR, check_function, function_pass,
                                  module_pass, register_pass_config)


def _mod():
    x = var("x", (2, 3))
    return IRModule.from_expr(Function([x], call("nn.relu", call("add", x, const(np.float32(0))))))


def _recorder(log, name, level):
    def fn(mod):
        log.append(name)
        return mod
    return ModulePass(fn, opt_level=level, name=name)


def test_sequential_respects_opt_level_disabled_and_required():
    log = []
    seq = Sequential([_recorder(log, "A", 0), _recorder(log, "B", 2), _recorder(log, "C", 3)])
    with PassContext(opt_level=2):
        seq(_mod())
    assert log == ["A", "B"]
    log.clear()
    with PassContext(opt_level=3, disabled_pass=["B"]):
        seq(_mod())
    assert log == ["A", "C"]
    log.clear()
    with PassContext(opt_level=0, required_pass=["C"]):
        seq(_mod())
    assert log == ["A", "C"]


def test_direct_call_always_runs_and_context_nesting():
    log = []
    p = _recorder(log, "High", 4)
    with PassContext(opt_level=0):
        p(_mod())
        with PassContext(opt_level=3) as inner:
            assert PassContext.current() is inner
        assert PassContext.current().opt_level == 0
    assert log == ["High"]


def test_decorators_and_function_pass_skip_primitive():
    seen = []

    @function_pass(opt_level=1, name="Collect")
    def collect(func, mod, ctx):
        seen.append((func, ctx.opt_level))
        return func

    @module_pass
    def bare(mod):
        return mod

    assert collect.info == PassInfo("Collect", 1) and bare.name == "bare" and bare.opt_level == 0
    x = var("x", (2,))
    prim = Function([x], call("exp", x), attrs={"Primitive": 1})
    main = Function([x], call("exp", x))
    with PassContext(opt_level=2):
        collect(IRModule({"main": main, "fused": prim}))
    assert seen == [(main, 2)]


def test_pass_errors_name_the_pass():
    bad = ModulePass(lambda mod: None, name="ReturnsNothing")
    with pytest.raises(TypeError, match="pass ReturnsNothing returned NoneType"):
        bad(_mod())
    with pytest.raises(TypeError, match="pass ReturnsNothing takes an IRModule"):
        bad(Function([], const(1.0)))
    fp = FunctionPass(lambda f: 3, name="Three")
    with pytest.raises(TypeError, match="function pass Three returned int for @main"):
        fp(_mod())

    def boom(mod):
        raise ValueError("broken")
    with pytest.raises(ValueError, match="broken") as info:
        ModulePass(boom, name="Boom")(_mod())
    assert any("Boom" in note for note in info.value.__notes__)
    with pytest.raises(TypeError, match="Sequential takes passes"):
        Sequential([lambda m: m])


def test_config_keys_are_declared_and_typed():
    register_pass_config("TestInfra.depth", 3, int, "test key")
    assert PassContext().get_config("TestInfra.depth") == 3
    assert PassContext(config={"TestInfra.depth": 5}).get_config("TestInfra.depth") == 5
    assert PassContext(config={"FoldConstant.max_growth": 2}).get_config(
        "FoldConstant.max_growth") == 2.0
    with pytest.raises(KeyError, match="unknown pass config key 'TestInfra.dpeth'"):
        PassContext(config={"TestInfra.dpeth": 1})
    with pytest.raises(TypeError, match="'TestInfra.depth' must be int"):
        PassContext(config={"TestInfra.depth": "deep"})
    with pytest.raises(ValueError, match="opt_level"):
        PassContext(opt_level=-1)


def test_print_ir_before_and_after_named_pass():
    out = io.StringIO()
    with PassContext(instruments=[PrintIR(["SimplifyExpr"], before=True, after=True, file=out)]):
        Sequential([InferType(), SimplifyExpr()])(_mod())
    text = out.getvalue()
    assert text.count("# IR before SimplifyExpr") == 1 and text.count("# IR after SimplifyExpr") == 1
    assert "InferType" not in text
    before, after = text.split("# IR after SimplifyExpr")
    assert "add(" in before and "add(" not in after and "nn.relu(%x)" in after


def test_timing_instrument_reports_nested_passes():
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        Sequential([InferType(), SimplifyExpr()], name="Outer")(_mod())
    names = [r[0] for r in timing.records]
    assert names == ["InferType", "SimplifyExpr", "Outer"]
    assert [r[2] for r in timing.records] == [1, 1, 0]
    assert all(r[1] >= 0 for r in timing.records)
    lines = timing.report().splitlines()
    assert lines[0].startswith("Outer: ") and lines[1].startswith("  InferType: ")
    assert lines[2].startswith("  SimplifyExpr: ") and lines[0].endswith(" ms")
    assert timing.totals()["Outer"] >= timing.totals()["InferType"]


def test_instrument_hooks_and_should_run():
    events = []

    class Spy(PassInstrument):
        def enter_pass_ctx(self):
            events.append("enter")

        def exit_pass_ctx(self):
            events.append("exit")

        def should_run(self, mod, info):
            return info.name != "SimplifyExpr"

        def run_before_pass(self, mod, info):
            events.append(f"before {info.name}")

        def run_after_pass(self, mod, info):
            events.append(f"after {info.name}")

    mod = _mod()
    with PassContext(instruments=[Spy()]):
        out = Sequential([InferType(), SimplifyExpr()], name="S")(mod)
        with PassContext.current().derive(opt_level=3):   # shares instruments: no re-enter
            pass
    assert out["main"] is mod["main"]                         # SimplifyExpr was vetoed
    assert events == ["enter", "before S", "before InferType", "after InferType", "after S",
                      "exit"]


def test_infer_type_accepts_good_modules_and_rejects_bad_nodes():
    mod = _mod()
    assert InferType()(mod) is mod
    x = var("x", (2, 3))
    # a node recorded with a wrong type (construction trusts an explicit checked_type)
    bad = Call(get_op("nn.relu"), [x], {}, checked_type=TensorType((3, 2), "float32"))
    with pytest.raises(GraphTypeError, match=r"@main: call of nn.relu is recorded as "
                                             r"Tensor\[\(3, 2\), float32\] but its inputs give"):
        InferType()(IRModule.from_expr(Function([x], bad)))
    y = var("y", (2, 3))
    with pytest.raises(GraphTypeError, match=r"free variable %y"):
        check_function(Function([x], call("add", x, y)))
    with pytest.raises(GraphTypeError, match="after pass Sneaky"):
        with PassContext(instruments=[VerifyIR()]):
            ModulePass(lambda m: IRModule.from_expr(Function([x], bad)), name="Sneaky")(mod)


def test_passes_keep_the_module_well_formed():
    mod = _mod()
    with PassContext(opt_level=3, instruments=[VerifyIR()]):
        from kiln.graph.transform import default_pipeline
        out = default_pipeline()(mod)
    assert structural_equal(out["main"], Function([v := var("x", (2, 3))], call("nn.relu", v)))
