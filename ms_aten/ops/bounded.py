"""Value-dependent ops in GRAPH mode: outputs padded to an upper bound, then cut by Slice.

nonzero, unique, masked_select and x[mask] size their outputs by their input values. MindSpore
sizes a Custom kernel's outputs before it runs; its own kernels, Slice among them, may size
theirs after. So for an op torch tags `dynamic_output_shape`, ms_aten.op returns a Cell
(`ValueDependentOp`) that, in GRAPH mode,
- asks torch's fake tensors, with a ShapeEnv, for each output's shape at compile time: a size
  that depends on values is a symbol with an upper bound (nonzero's row count: the input's
  numel; unique_dim's: the input's size along `dim`);
- runs the op in a Custom kernel (`PaddedOp`, csrc/op/bounded.h) whose outputs are padded to those
  bounds, each result in its output's leading corner, followed by one int64 output per result
  holding the result's shape;
- cuts every result out of its output with Slice, so the Cell returns torch's exact shapes
  (dynamic shapes to MindSpore). Outputs whose shapes torch's fake kernel gives as static are
  cut too: those kernels are not always right (unique_consecutive's inverse with a `dim`), and
  a result that does not fit its bound fails at launch, naming the op.
A call that does not depend on values (index with integer indices) goes to the op itself, and
so does one torch cannot bound (bincount: its size is its largest value), which then fails at
compile time, naming the op (fake_infer.value_dependent_message). In PYNATIVE mode every call
goes to the op, which runs value-dependent calls once their inputs are computed
(value_dependent.py).

Gradients: Slice's bprop pads the cotangent back to the bound; PaddedOp's bprop cuts it to the
result's shape and calls the op's ordinary VJP kernel (grad.make_padded_bprop).
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops.primitive import PrimitiveWithInfer, _primexpr

from .binding import Binding
from .fake_infer import FakeInfer
from .grad import make_padded_bprop
from .infer import ValueDependentError, flatten_infer_args
from .primitive import CppInferred, unique_id


class BridgedOp(Protocol):
    """What a ValueDependentOp needs of the op it wraps (op.py's AtenOp, which builds it)."""

    binding: Binding
    infer: FakeInfer
    device_target: str
    multi_output: bool

    def __call__(self, *args: Any) -> Any: ...

    def set_device(self, device_target: str) -> Any: ...

# The FakeInfer of each ValueDependentOp, by key: the compile-time decision (_padded_outputs)
# takes constants only, so it finds the op's inference through this table.
_INFERS: weakref.WeakValueDictionary[int, FakeInfer] = weakref.WeakValueDictionary()


class PaddedOp(CppInferred):
    """The op's call into outputs padded to their bounds, then one int64 shape per output."""

    def __init__(self, op: BridgedOp):
        self.infer = op.infer
        binding = op.binding
        super().__init__(binding, binding.spec("bounded"), f"{binding.name} (padded)", True,
                         op.device_target, bprop=make_padded_bprop(binding, cut))
        self.del_prim_attr("cpp_infer_shape")  # shapes from __infer__, not the C++ hook

    def tell(self, shapes: Sequence[Sequence[int]], types: Sequence[Any]) -> None:
        self.check_count(shapes)
        self.infer.bounds(shapes, types)

    def __infer__(self, *args: dict) -> dict:
        shapes, types = self.infer.bounds(*flatten_infer_args(args))
        shape_type = mstype.TensorType(mstype.int64)
        return {"shape": tuple(shapes + [[len(s)] for s in shapes]),
                "dtype": tuple(types + [shape_type] * len(shapes)), "value": None}


def cut(padded: Tensor, shape: Tensor) -> Tensor:
    """The result in the leading corner of `padded`, whose shape the tensor `shape` holds."""
    # MindSpore's CPU Slice and Reshape have no bfloat16 kernels; float32 holds it exactly.
    narrow = padded.dtype == mstype.bfloat16
    wide = padded.astype(mstype.float32) if narrow else padded
    if padded.size == 0:  # MindSpore's CPU Slice fails on zero-size inputs; no data to move
        result = ops.reshape(wide, shape)
    else:
        result = _SLICE(wide, ops.zeros_like(shape), shape)
    return result.astype(mstype.bfloat16) if narrow else result


_SLICE = ops.Slice()


@_primexpr
def _padded_outputs(key: int, signature: tuple) -> int:
    """At compile time: how many outputs the padded call of the op `key` has, for a call whose
    output shapes depend on its input values and have bounds; 0 to call the op itself."""
    infer = _INFERS[key]
    items = [item for entry in signature for item in entry]
    if len(signature) != len(infer.binding.slots) or None in items:
        return 0  # a number, None or an unknown size: the op decides (and says why)
    shapes, types = [list(item[0]) for item in items], [item[1] for item in items]
    try:
        infer(shapes, types)
        return 0  # its shapes are known ahead: the op itself
    except ValueDependentError:
        pass
    except Exception:  # noqa: BLE001  (the op raises it again, at its own inference)
        return 0
    try:
        return len(infer.bounds(shapes, types)[0])
    except Exception:  # noqa: BLE001  (as above)
        return 0


class _InGraph(PrimitiveWithInfer):
    """True in a graph MindSpore compiles (GRAPH mode, ms.jit), False when run eagerly: as for
    _primexpr's constant primitives, MindSpore takes the value from __infer__ when compiling
    and calls the primitive otherwise."""

    def __init__(self):
        super().__init__("ms_aten_in_graph")
        self.set_const_prim(True)
        self.add_prim_attr("constexpr_prim", True)

    def __infer__(self) -> dict:
        return {"dtype": None, "shape": None, "value": True}

    def __call__(self) -> bool:
        return False


_IN_GRAPH = _InGraph()


def _describe(value):
    """(shape, dtype) of a tensor of known sizes, None for anything else: _padded_outputs must
    get constants, or MindSpore compiles it instead of running it."""
    if isinstance(value, Tensor):
        if ops.is_sequence_shape_unknown(value.shape) or ops.is_sequence_value_unknown(
                value.shape):
            return None
        return (value.shape, value.dtype)
    return None


def _signature(args: tuple) -> tuple:
    """One entry per argument: the (shape, dtype) of each of its tensors (one for a tensor)."""
    signature: tuple = ()
    for arg in args:
        if isinstance(arg, tuple):
            members: tuple = ()
            for member in arg:
                members = members + (_describe(member),)
            signature = signature + (members,)
        else:
            signature = signature + ((_describe(arg),),)
    return signature


class ValueDependentOp(nn.Cell):
    """What ms_aten.op returns for an op torch tags `dynamic_output_shape` (see the module's
    docstring): the op itself in PYNATIVE mode, padded and cut in GRAPH mode."""

    def __init__(self, op: BridgedOp):
        super().__init__()
        self.op = op
        self.padded = PaddedOp(op)
        self.single = not op.multi_output
        # Never reused (an object's id is): MindSpore keeps _padded_outputs' results by its
        # arguments.
        self.key = unique_id()
        _INFERS[self.key] = op.infer

    @property
    def binding(self) -> Binding:
        return self.op.binding

    def construct(self, *args):
        if not _IN_GRAPH():
            return self.op(*args)
        n = _padded_outputs(self.key, _signature(args))
        if n == 0:
            return self.op(*args)
        padded = self.padded(*args)
        outputs: tuple = ()
        for i in range(n):
            outputs = outputs + (cut(padded[i], padded[n + i]),)
        if self.single:
            return outputs[0]
        return outputs

    def set_device(self, device_target: str) -> ValueDependentOp:
        """AtenOp.set_device, for both kernels."""
        self.op.set_device(device_target)
        self.padded.retarget(device_target)
        self.padded.bprop.vjp.retarget(device_target)
        return self
