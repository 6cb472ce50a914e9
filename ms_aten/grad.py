"""Backward of a bridged op: a second bridged kernel that runs torch autograd (csrc/grad.cpp)."""
from __future__ import annotations

import linecache
from typing import Callable

from mindspore import ops

from . import _lib
from .binding import Binding
from .infer import CppInferred


class AtenVjp(CppInferred):
    """Inputs: the forward's call-time tensors, then one gradient per forward output.
    Outputs: one gradient per forward call-time tensor, shaped and typed like it (the
    library's C++ inference, csrc/infer.cpp, says so; so does MindSpore with unknown sizes)."""

    def __init__(self, binding: Binding):
        multi_output = binding.list_position is not None or len(binding.slots) != 1
        super().__init__(binding, binding.spec("vjp"), f"{binding.name} (backward)",
                         multi_output, _lib.current_target())

    def check_count(self, shapes) -> None:
        """Any count: the forward's inputs, then its outputs' gradients."""


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
    namespace = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (fixed template)
    # MindSpore resolves a bprop's free variables from its closure, not from globals.
    return namespace["make"](gradients)


def make_bprop(binding: Binding) -> Callable:
    """The bprop MindSpore calls as bprop(*inputs, out, dout), in both modes.

    It must stay within what MindSpore's GRAPH mode can compile: tuple slicing, star-args.
    """
    vjp = AtenVjp(binding)
    n_slots = len(binding.slots)
    list_at = binding.list_position
    multi_out = binding.returns_list or len(binding.schema.returns) > 1

    def gradients(inputs: tuple, out, dout):
        grads = vjp(*inputs, *dout) if multi_out else vjp(*inputs, dout)
        if not isinstance(grads, tuple):
            grads = (grads,)
        if list_at is None:
            return grads  # one gradient per input
        n_list = len(inputs[list_at])
        return grads[:list_at] + (grads[list_at:list_at + n_list],) + grads[list_at + n_list:]

    bprop = with_arity(len(binding.slots), gradients)
    bprop.vjp = vjp  # AtenOp.set_device moves the backward kernel along with the forward
    return bprop
