"""Backward of a bridged op: a second bridged kernel that runs torch autograd (csrc/grad.cpp)."""
from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any, Protocol, cast

from mindspore import ops
from mindspore.common import dtype as mstype

from . import _lib
from . import pattern as patterns
from .binding import SPEC_ATTR, Binding
from .infer import flatten_infer_args
from .pattern import Pattern


def forward_input_count(binding: Binding, n_tensors: int, pattern: Pattern | None = None) -> int:
    """How many of the VJP's n_tensors inputs are forward inputs (the rest: output grads)."""
    if pattern is not None:
        return sum(patterns.items_of(fill) for fill in pattern)
    if binding.list_position is None:
        return len(binding.slots)
    return n_tensors - len(binding.schema.returns)


class AtenVjp(ops.Custom):
    """Inputs: the forward's call-time tensors, then one gradient per forward output.
    Outputs: one gradient per forward call-time tensor, shaped and typed like it (a Python
    number's gradient is a 0-dim tensor of its number type)."""

    def __init__(self, binding: Binding, pattern: Pattern | None = None):
        self.binding = binding
        self.pattern = pattern
        super().__init__(_lib.kernel(_lib.current_target()), out_shape=self._unused,
                         out_dtype=self._unused, func_type="aot")
        self.add_prim_attr(SPEC_ATTR, binding.spec("vjp", pattern=pattern))

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        types = [t if isinstance(t, mstype.TensorType) else mstype.TensorType(t) for t in types]
        n_in = forward_input_count(self.binding, len(shapes), self.pattern)
        if n_in == 1:
            return {"shape": shapes[0], "dtype": types[0], "value": None}
        return {"shape": tuple(shapes[:n_in]), "dtype": tuple(types[:n_in]), "value": None}

    def _unused(self, *args):
        raise AssertionError("unreachable: AtenVjp.__infer__ infers shapes")


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
    """The bprop MindSpore calls as bprop(*inputs, out, dout), in both modes, for one call
    pattern (pattern.py): one parameter per call-time argument.

    It must stay within what MindSpore's GRAPH mode can compile: tuple slicing, star-args,
    loops over constant tuples.
    """
    vjp = AtenVjp(binding, pattern)
    list_at = binding.list_position
    multi_out = binding.returns_list or len(binding.schema.returns) > 1
    # Per call-time argument of an explicit pattern: -1 for a tensor or number, else how many
    # flat gradients its list gets.
    layout = None if pattern is None else tuple(
        -1 if fill in (patterns.TENSOR, patterns.NUMBER) else patterns.items_of(fill)
        for fill in pattern if fill != patterns.OMITTED)

    def gradients(inputs: tuple, out, dout):
        grads = vjp(*inputs, *dout) if multi_out else vjp(*inputs, dout)
        if not isinstance(grads, tuple):
            grads = (grads,)
        if layout is not None:
            grouped: tuple = ()
            i = 0
            for n in layout:
                if n < 0:
                    grouped = grouped + (grads[i],)
                    i = i + 1
                else:
                    grouped = grouped + (grads[i:i + n],)
                    i = i + n
            return grouped
        if list_at is None:
            return grads  # one gradient per input
        n_list = len(inputs[list_at])
        return grads[:list_at] + (grads[list_at:list_at + n_list],) + grads[list_at + n_list:]

    arity = len(binding.slots) if layout is None else len(layout)
    bprop = cast(Bprop, with_arity(arity, gradients))
    bprop.vjp = vjp  # AtenOp.set_device moves the backward kernel along with the forward
    return bprop
