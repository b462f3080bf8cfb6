"""kiln.tir: the loop-level IR (expressions, statements, buffers, PrimFunc) and its tools."""
from . import dtype
from .buffer import Buffer
from .expr import (EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast,
                   CmpOp, CommReducer, Div, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Let,
                   Max, Min, Mod, Mul, Not, Or, PrimExpr, ProducerLoad, Ramp, Range, Reduce,
                   Select, SizeVar, StringImm, Sub, Var)
from .function import PrimFunc
from .functor import IRMutator, IRVisitor, free_vars, post_order_visit, substitute, uses_var
from .node import Node
from .op import (IRError, all_, any_, call_llvm_intrin, cast, const, convert, if_then_else, likely, max_value,
                 min_value, select)
from .printer import to_text
from .stmt import (LOOP_KINDS, Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For,
                   IfThenElse, LetStmt, SeqStmt, Stmt, ThreadAllReduce, is_no_op, no_op)
