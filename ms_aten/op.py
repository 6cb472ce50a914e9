"""ms_aten.op: any torch dispatcher op as a MindSpore ops.Custom."""
from __future__ import annotations

from typing import Any

from mindspore import ops

from . import _lib, fast_path
from .binding import Binding
from .grad import make_bprop
from .infer import (
    CppInferred,
    MetaInfer,
    graph_mode,
    unique_id,  # noqa: F401 (function.py imports it from here)
)
from .schema import inplace_variant, out_variant, resolve


class AtenOp(CppInferred):
    """A MindSpore primitive that runs one ATen op through libms_aten.so's MsAtenCall; its
    outputs are inferred by the library's C++ hooks (ms_aten/infer.py)."""

    def __init__(self, binding: Binding, spec: str, infer: MetaInfer, bprop=None):
        self.infer = infer  # Python's own inference (the fast path sizes its outputs with it)
        multi_output = binding.returns_list or len(binding.schema.returns) > 1
        super().__init__(binding, spec, binding.name, multi_output, _lib.current_target(),
                         bprop=bprop)

    def __call__(self, *args):
        # PYNATIVE on CPU: the pyboost fast path (ms_aten/fast_path.py), about 20x cheaper per
        # call than Custom's launch. GRAPH mode never calls __call__ (the op is a primitive
        # there), so it stays on the AOT kernel.
        if self.device_target == "CPU" and not graph_mode() and fast_path.available():
            return fast_path.call(self, *args)
        return super().__call__(*args)

    def set_device(self, device_target: str) -> AtenOp:
        """Run this op (and its backward) on `device_target` whatever MindSpore's context says,
        e.g. set_device("CPU") for the CPU ATen kernel while the context is GPU."""
        retarget(self, device_target)
        retarget(self.bprop.vjp, device_target)
        return self


def retarget(custom: ops.Custom, device_target: str) -> None:
    """Point an ms_aten Custom op at the bridge's kernel for `device_target`."""
    # raises before anything runs if unsupported
    func = _lib.kernel(device_target, custom.multi_output)
    ops.Custom.set_device(custom, device_target)
    custom.uniq_name = custom.uniq_name.replace(custom.func, func)
    custom.func = custom.func_name = func
    custom.add_prim_attr("func_name", func)
    custom.add_prim_attr("uniq_name", custom.uniq_name)
    custom.device_target = device_target


def op(name: str, **constants: Any) -> AtenOp:
    """A MindSpore op that runs the torch dispatcher op `name`.

    name: 'leaky_relu' (aten assumed), 'aten::max.dim', 'torchvision::nms', 'myns::my_op'.
    constants: every non-tensor schema argument you want to set, by its schema name; a
    `Tensor?` argument that should be None is given as `name=None`. Every other tensor
    argument is a call-time input, in schema order; a `Tensor[]` is passed as a tuple.
    """
    binding = Binding.build(resolve(name, constants), constants)
    # The functional call, then (csrc/kernel.h) the overload that writes MindSpore's output:
    # the in-place one where out= is only a composite wrapper, else out=.
    spec = binding.spec("call")
    if (inplace := inplace_variant(binding.schema)) is not None:
        spec += f";{binding.spec('inplace', inplace)}"
    elif (target := out_variant(binding.schema)) is not None:
        spec += f";{binding.spec('out', target)}"
    infer = MetaInfer(binding)
    return AtenOp(binding, spec, infer, bprop=make_bprop(binding))
