"""The ops.Custom base of every bridged op primitive (the forward, its VJP kernels, the padded
value-dependent call): its kernel, its spec attribute, its call site, and its shape inference.

MindSpore's C++ shape hook gets input shapes but neither their number nor their dtypes, which
a meta run needs. CppInferred ops therefore tell the library about each call right before
MindSpore infers it: `__check__`, which GRAPH compilation calls before every inference, and
`__call__` on PYNATIVE's Custom route. At run time (a graph with unknown sizes infers shapes
before each launch) the library falls back on what it was told at compile time.

Dtypes stay with Python's `__infer__`, which MindSpore calls at compile time only: its C++
type hook returns a bare TypeId, which MindSpore makes a scalar, not a 0-dim tensor, for a
rank-0 output (sum). `__infer__` asks the library too, and finds its result cached.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import mindspore as ms
from mindspore import context, ops
from mindspore.common import dtype as mstype
from mindspore.ops.primitive import prim_type

from ..native import library
from . import pattern as patterns
from .binding import SPEC_ATTR, Binding
from .infer import Shape, flatten_infer_args, infer_outputs

SITE_ATTR = "ms_aten_uid"  # the library's name for a call site (csrc/op/infer.h)
CPP_SHAPES = "cpp_infer_shape"  # the attribute by which MindSpore asks the C++ shape hook
# The one MindSpore output of an op that returns nothing (aten::_assert_async) or only writes its
# inputs: MindSpore does not launch a Custom kernel without outputs, so it gets this placeholder.
PLACEHOLDER = {"shape": [0], "dtype": mstype.TensorType(mstype.bool_), "value": None}
_uids = itertools.count()


def unique_id() -> int:
    """A fresh `ms_aten_uid` attribute value. MindSpore's PyNative kernel cache keys on func
    and attributes; a per-object id keeps two ops from sharing a kernel they must not share,
    and names the op object's call site for the library's inference (csrc/op/infer.h)."""
    return next(_uids)


class CppInferred(ops.Custom):
    """An ops.Custom over libms_aten.so whose outputs MindSpore infers through the library's
    C++ hooks (out_shape and out_dtype None), in GRAPH mode with unknown sizes too."""

    func: str  # ops.Custom's: the kernel, "<library>:<entry point>"
    uniq_name: str

    def __init__(self, binding: Binding, spec: str, name: str, multi_output: bool,
                 device_target: str, bprop=None):
        self.binding = binding
        self.device_target = device_target  # retarget() changes it
        # out_shape None: MindSpore calls the library's C++ shape hook; a callable out_dtype
        # keeps the dtypes with __infer__ (see the module's docstring).
        super().__init__(library.kernel(device_target, multi_output), out_shape=None,
                         out_dtype=self._unused, func_type="aot", bprop=bprop)
        self.add_prim_attr(SPEC_ATTR, spec)
        # A fresh id per object: MindSpore's PyNative kernel cache keys on func and attributes,
        # and the library keys what it was told about a call on it (csrc/op/infer.h).
        self.add_prim_attr(SITE_ATTR, unique_id())
        # MindSpore picks the C++ hooks' return types by this flag (csrc/boundary/extra_abi0.cpp).
        self.multi_output = multi_output
        self.add_prim_attr("multi_output", multi_output)
        # MindSpore's C++ inference reads it (and fails without it); its errors show it.
        self.add_prim_attr("reg_op_name", name)
        # GRAPH compilation then calls __check__ before each C++ inference.
        self.set_prim_type(prim_type.py_infer_check)

    def __check__(self, *args: dict) -> None:
        self.tell(*self.call_inputs(args))

    def call_inputs(self, args: Sequence[dict]) -> tuple[list[Shape], list[Any]]:
        """The flat input shapes and dtypes of a call MindSpore compiles; checks them."""
        shapes, types = flatten_infer_args(args)
        if len(shapes) != len(args):  # a tuple input
            self._check_list_dtypes(args)
        return shapes, types

    def __infer__(self, *args: dict) -> dict:
        shapes, types = flatten_infer_args(args)
        out_shapes, out_types = infer_outputs(self.attrs[SPEC_ATTR], shapes, types,
                                              self.attrs[SITE_ATTR])
        if self.multi_output:
            return {"shape": tuple(out_shapes), "dtype": tuple(out_types), "value": None}
        return {"shape": out_shapes[0], "dtype": out_types[0], "value": None}

    def _unused(self, *args):
        raise AssertionError("unreachable: CppInferred.__infer__ infers dtypes")

    def __call__(self, *args):
        # PYNATIVE's Custom route (GRAPH mode compiles the op instead): MindSpore infers this
        # call through the C++ hooks next.
        flat = flat_tensors(args)
        try:
            shapes, types = [list(x.shape) for x in flat], [x.dtype for x in flat]
        except AttributeError:
            kinds = ", ".join(type(x).__name__ for x in flat)
            raise TypeError(f"ms_aten op '{self.binding.name}' takes MindSpore Tensors (a tuple "
                            f"of them for a Tensor[]), got {kinds}") from None
        self.tell(shapes, types)
        return super().__call__(*args)

    def tell(self, shapes: Sequence[Sequence[int]], types: Sequence[Any]) -> None:
        """Tell the library what this object is called with, right before MindSpore infers the
        call; Python's exceptions for a wrong tensor count or a shape ATen refuses."""
        self.check_count(shapes)
        infer_outputs(self.attrs[SPEC_ATTR], shapes, types, self.attrs[SITE_ATTR])

    def check_count(self, shapes: Sequence[Sequence[int]]) -> None:
        """TypeError unless `shapes` fits the op's tensor arguments (all of them tensors)."""
        patterns.group(self.binding, None, shapes)

    def retarget(self, device_target: str) -> None:
        """Point this primitive at the bridge's kernel for `device_target`; RuntimeError, before
        anything runs, if this build cannot serve it."""
        func = library.kernel(device_target, self.multi_output)
        ops.Custom.set_device(self, device_target)
        self.uniq_name = self.uniq_name.replace(self.func, func)
        self.func = self.func_name = func
        self.add_prim_attr("func_name", func)
        self.add_prim_attr("uniq_name", self.uniq_name)
        self.device_target = device_target

    def _check_list_dtypes(self, args) -> None:
        # In GRAPH mode MindSpore labels every tensor of a tuple input with the first one's
        # dtype when it hands them to the kernel; mixed dtypes would be misread.
        for arg in args:
            if not isinstance(arg["dtype"], (tuple, list)):
                continue
            if len({str(d) for d in arg["dtype"] if isinstance(d, mstype.TensorType)}) > 1:
                raise TypeError(f"ms_aten op '{self.binding.name}': in GRAPH mode the tensors of "
                                f"a list must share one dtype, got {list(map(str, arg['dtype']))}")


def flat_tensors(args: Sequence[Any]) -> list[Any]:
    """Call-time arguments with tuple (tensor-list) arguments expanded."""
    flat: list[Any] = []
    for arg in args:
        if isinstance(arg, (tuple, list)):
            flat.extend(arg)
        else:
            flat.append(arg)
    return flat


def graph_mode() -> bool:
    # context._get_mode reads the same setting as ms.get_context("mode") in ~1 µs instead of
    # ~30 µs; it runs on every PYNATIVE call.
    return context._get_mode() == ms.GRAPH_MODE
