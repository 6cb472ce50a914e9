"""Backward of a bridged op, of any order: bridged kernels that run torch autograd (csrc/op/grad.h).

The forward op's bprop calls the order-1 VJP kernel; each VJP kernel's bprop calls the next
order's, built when MindSpore first asks for it (ms.grad of ms.grad), so gradients of gradients
(gradient penalties, Hessian-vector products) work in both modes.

Call structure. MindSpore hands a bprop the primitive's arguments as they were passed: a
Tensor[] argument is one tuple. The order-k VJP is called with its own arguments (those of the
order-(k-1) function), then the cotangents of that function's outputs grouped as the
order-(k-2) function's arguments are (a tuple for a tuple), so every bprop has a fixed number of
parameters. The kernels see the same tensors flattened (csrc/op/grad.h has the counts).
"""
from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any, Protocol, cast

from mindspore import ops
from mindspore.common import dtype as mstype

from ..native import library
from . import pattern as patterns
from .binding import Binding
from .infer import flatten_infer_args
from .pattern import Pattern
from .primitive import CppInferred, graph_mode


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _regroup(flat: tuple, like: tuple) -> tuple:
    """flat (one tensor per tensor in `like`) grouped as `like` is: a tuple (or list) of n in
    `like` gets a tuple of the next n tensors. Written for MindSpore's GRAPH-mode compiler."""
    grouped: tuple = ()
    i = 0
    for arg in like:
        if isinstance(arg, (tuple, list)):
            grouped = grouped + (flat[i:i + len(arg)],)
            i = i + len(arg)
        else:
            grouped = grouped + (flat[i],)
            i = i + 1
    return grouped


def _expands_dout(binding: Binding) -> bool:
    """Whether the forward's dout is passed on one tensor per output (a fixed number of outputs
    of mixed dtypes), rather than as one argument: one tensor, or a Tensor[] return's tuple,
    whose tensors share a dtype as a GRAPH-mode tuple input must."""
    return len(binding.schema.returns) > 1 and not binding.returns_list


def _arity(binding: Binding, order: int, pattern: Pattern | None = None) -> int:
    """How many arguments the order-`order` function takes (0: the forward op, called with
    the call pattern's arguments: pattern.py)."""
    n_args = len(binding.slots) if pattern is None else sum(
        fill != patterns.OMITTED for fill in pattern)
    before, current = (len(binding.schema.returns) if _expands_dout(binding) else 1, n_args)
    for _ in range(order):
        before, current = current, current + before
    return current


def _output_count(binding: Binding, order: int, pattern: Pattern | None = None) -> int | None:
    """How many gradients the order-`order` VJP returns: m(order-1) of csrc/op/grad.h, or None
    where it varies with the call (a Tensor[] argument of the base call pattern, or a Tensor[]
    return past order 1). A call pattern (pattern.py) fixes the forward's input count."""
    (a_prev, b_prev), (a, b) = (0, 1), (1, 0)  # m(-1) = outputs, m(0) = inputs of the forward
    for _ in range(order):
        (a_prev, b_prev), (a, b) = (a, b), (a + a_prev, b + b_prev)
    if pattern is None and binding.list_position is not None:
        return None
    if binding.returns_list and b_prev:
        return None
    n_in = (len(binding.slots) if pattern is None
            else sum(patterns.items_of(fill) for fill in pattern))
    return a_prev * n_in + b_prev * len(binding.schema.returns)


class AtenVjp(CppInferred):
    """The order-`order` VJP of a bridged op. Inputs: the order-(order-1) function's inputs
    (order 1: the forward's call-time tensors), then one gradient per its output. Outputs: one
    gradient per order-(order-1) input, shaped and typed like it (so says the library's C++
    shape inference, csrc/op/infer.cpp, for unknown sizes too). `pattern`: the forward's call
    pattern (pattern.py); for one other than the base, the shapes come from __infer__ here,
    as the forward's do (op.py), and a Python number's gradient is a 0-dim tensor."""

    bprop: Bprop | None  # set by ops.Custom.__init__; get_bprop builds it

    def __init__(self, binding: Binding, order: int = 1, device_target: str | None = None,
                 pattern: Pattern | None = None):
        self.order = order
        self.pattern = pattern
        target = device_target or library.current_target()  # retarget() changes it
        name = f"{binding.name} (backward{'' if order == 1 else f' of order {order}'})"
        kind = "vjp" if order == 1 else f"vjp{order}"
        super().__init__(binding, binding.spec(kind, pattern=pattern), name,
                         _output_count(binding, order, pattern) != 1, target)
        if pattern is not None:
            self.del_prim_attr("cpp_infer_shape")
        if target != library.current_target():
            ops.Custom.set_device(self, target)

    def check_count(self, shapes) -> None:
        """Any count: the kernel checks it against the op (csrc/op/spec.h)."""

    def tell(self, shapes, types) -> None:
        if self.pattern is None:  # else MindSpore never asks the library's hook
            super().tell(shapes, types)

    def __infer__(self, *args: dict) -> dict:
        if self.pattern is None:
            return super().__infer__(*args)
        shapes, types = flatten_infer_args(args)
        types = [t if isinstance(t, mstype.TensorType) else mstype.TensorType(t) for t in types]
        n_out = _output_count(self.binding, self.order, self.pattern)
        assert n_out is not None  # a pattern fixes the counts
        if not self.multi_output:
            return {"shape": shapes[0], "dtype": types[0], "value": None}
        return {"shape": tuple(shapes[:n_out]), "dtype": tuple(types[:n_out]), "value": None}

    def get_bprop(self) -> Callable:
        """This VJP's own bprop, the next order's VJP: built the first time MindSpore asks."""
        if self.bprop is None:
            if self.binding.list_position is not None and not graph_mode():
                # PYNATIVE reaches this Custom route only without the fast-path module; there
                # MindSpore 2.10 fails on a bprop that returns a Tensor[]'s gradients as a
                # nested tuple once it records it for a higher order (a ValueError of its own).
                raise RuntimeError(
                    f"ms_aten: {self.binding.name}: gradients of order {self.order + 1} of ops "
                    f"with a Tensor[] input need GRAPH mode or the PYNATIVE fast path (build it "
                    f"with `python -m ms_aten.native.pyboost`)")
            self.bprop = _vjp_bprop(self)
        elif self.bprop.vjp.device_target != self.device_target:
            self.bprop.vjp.retarget(self.device_target)
        return self.bprop



def with_arity(arity: int, gradients: Callable) -> Callable:
    """bprop(x0, ..., x{arity-1}, out, dout) -> gradients((x0, ...), out, dout).

    GRAPH mode compiles a bprop from its source and needs exactly one parameter per input,
    so the signature is generated for each arity; its source goes into linecache, where
    inspect (and so MindSpore's parser) finds it.
    """
    inputs = [f"x{i}" for i in range(arity)]
    packed = f"({', '.join(inputs)}{',' if arity == 1 else ''})"  # a tuple, (x0,) or () too
    source = (f"def make(gradients):\n"
              f"    def bprop({', '.join([*inputs, 'out', 'dout'])}):\n"
              f"        return gradients({packed}, out, dout)\n"
              f"    return bprop\n")
    filename = f"<ms_aten bprop/{arity}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (fixed template)
    # MindSpore resolves a bprop's free variables from its closure, not from globals.
    return namespace["make"](gradients)


class Bprop(Protocol):
    """A bprop that carries its VJP kernel (AtenOp.set_device moves it with the forward)."""

    vjp: AtenVjp

    def __call__(self, *args: Any) -> Any: ...


def make_bprop(binding: Binding, pattern: Pattern | None = None) -> Bprop:
    """The forward op's bprop, which MindSpore calls as bprop(*inputs, out, dout), in both
    modes.

    It, and _vjp_bprop's, must stay within what MindSpore's GRAPH mode can compile: tuple
    slicing, star-args, loops over tuples.
    """
    vjp = AtenVjp(binding, pattern=pattern)
    expand_dout = _expands_dout(binding)

    def gradients(inputs: tuple, out, dout):
        cotangents = dout if expand_dout else (dout,)
        return _regroup(_as_tuple(vjp(*inputs, *cotangents)), inputs)

    bprop = cast(Bprop, with_arity(_arity(binding, 0, pattern), gradients))
    bprop.vjp = vjp  # AtenOp.set_device moves the backward kernel along with the forward
    return bprop


def make_padded_bprop(binding: Binding, cut: Callable) -> Bprop:
    """The bprop of a bounded call (bounded.py), whose outputs are the op's results padded to
    an upper bound, then their shapes: each cotangent is cut to its result's shape
    (`cut(padded, shape)`), and the op's ordinary VJP takes it from there."""
    vjp = AtenVjp(binding)
    n = len(binding.schema.returns)

    def gradients(inputs: tuple, out, dout):
        cotangents: tuple = ()
        for i in range(n):
            cotangents = cotangents + (cut(dout[i], out[n + i]),)
        return _regroup(_as_tuple(vjp(*inputs, *cotangents)), inputs)

    bprop = cast(Bprop, with_arity(len(binding.slots), gradients))
    bprop.vjp = vjp
    return bprop


def _vjp_bprop(vjp: AtenVjp) -> Bprop:
    """The bprop of an order-k VJP: the order-(k+1) VJP, called with the order-k one's arguments
    and the cotangents of its outputs, grouped as the order-(k-1) function's arguments."""
    next_vjp = AtenVjp(vjp.binding, vjp.order + 1, vjp.device_target, vjp.pattern)
    n_like = _arity(vjp.binding, vjp.order - 1, vjp.pattern)

    def gradients(inputs: tuple, out, dout):
        cotangents = _regroup(_as_tuple(dout), inputs[:n_like])
        return _regroup(_as_tuple(next_vjp(*inputs, *cotangents)), inputs)

    bprop = cast(Bprop, with_arity(_arity(vjp.binding, vjp.order, vjp.pattern), gradients))
    bprop.vjp = next_vjp
    return bprop
