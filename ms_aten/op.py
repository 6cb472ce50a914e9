"""ms_aten.op: any torch dispatcher op as a MindSpore ops.Custom."""
from __future__ import annotations

import itertools
from typing import Any

from mindspore import ops

from . import _lib, fast_path
from .binding import SPEC_ATTR, Binding
from .grad import make_bprop
from .infer import MetaInfer, flatten_infer_args, graph_mode
from .schema import out_variant, resolve

_uids = itertools.count()


def unique_id() -> int:
    """A fresh `ms_aten_uid` attribute value. MindSpore's PyNative kernel cache keys on func
    and attributes; a per-object id keeps two ops from sharing a kernel they must not share."""
    return next(_uids)


class AtenOp(ops.Custom):
    """A MindSpore primitive that runs one ATen op through libms_aten.so's MsAtenCall."""

    def __init__(self, binding: Binding, spec: str, infer: MetaInfer, bprop=None):
        self.binding = binding
        self.infer = infer
        self.device_target = _lib.current_target()  # retarget() changes it
        super().__init__(_lib.kernel(self.device_target), out_shape=self._shapes,
                         out_dtype=self._dtypes, func_type="aot", bprop=bprop)
        self.add_prim_attr(SPEC_ATTR, spec)
        self.add_prim_attr("ms_aten_uid", unique_id())

    def __call__(self, *args):
        # PYNATIVE on CPU: the pyboost fast path (ms_aten/fast_path.py), about 20x cheaper per
        # call than Custom's launch. GRAPH mode never calls __call__ (the op is a primitive
        # there), so it stays on the AOT kernel.
        if self.device_target == "CPU" and not graph_mode() and fast_path.available():
            return fast_path.call(self, *args)
        return super().__call__(*args)

    def __infer__(self, *args: dict) -> dict:
        # One meta run gives shapes and dtypes together (Custom would infer them apart).
        shapes, types = flatten_infer_args(args)
        if len(shapes) != len(args) and graph_mode():  # a tuple input, and GRAPH mode
            self._check_list_dtypes(args)
        out_shapes, out_dtypes = self.infer(shapes, types)
        if len(out_shapes) == 1 and not self.binding.returns_list:
            return {"shape": out_shapes[0], "dtype": out_dtypes[0], "value": None}
        return {"shape": tuple(out_shapes), "dtype": tuple(out_dtypes), "value": None}

    def _check_list_dtypes(self, args) -> None:
        # In GRAPH mode MindSpore labels every tensor of a tuple input with the first one's
        # dtype when it hands them to the kernel; mixed dtypes would be misread.
        for arg in args:
            if isinstance(arg["dtype"], (tuple, list)) and len({str(d) for d in arg["dtype"]}) > 1:
                raise TypeError(f"ms_aten op '{self.binding.name}': in GRAPH mode the tensors of "
                                f"a list must share one dtype, got {list(map(str, arg['dtype']))}")

    def set_device(self, device_target: str) -> AtenOp:
        """Run this op (and its backward) on `device_target` whatever MindSpore's context says,
        e.g. set_device("CPU") for the CPU ATen kernel while the context is GPU."""
        retarget(self, device_target)
        retarget(self.bprop.vjp, device_target)
        return self

    def _shapes(self, *shapes):  # Custom requires these callables; __infer__ replaces them
        raise AssertionError("unreachable: AtenOp.__infer__ infers shapes")

    _dtypes = _shapes


def retarget(custom: ops.Custom, device_target: str) -> None:
    """Point an ms_aten Custom op at the bridge's kernel for `device_target`."""
    func = _lib.kernel(device_target)  # raises before anything runs if unsupported
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
    target = out_variant(binding.schema)
    # The functional call, then (csrc/kernel.h) the out= overload that writes in place.
    spec = binding.spec("call") + (f";{binding.spec('out', target)}" if target else "")
    infer = MetaInfer(binding)
    return AtenOp(binding, spec, infer, bprop=make_bprop(binding))
