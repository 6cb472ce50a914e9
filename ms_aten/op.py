"""ms_aten.op: any torch dispatcher op as a MindSpore ops.Custom."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from mindspore import ops
from mindspore.common import dtype as mstype

from . import _lib, fast_path
from . import pattern as patterns
from .binding import SPEC_ATTR, Binding
from .grad import make_bprop, with_arity
from .infer import MetaInfer, flatten_infer_args, graph_mode
from .pattern import Pattern
from .schema import op_name, out_variant, resolve

_uids = itertools.count()
_UNSET = object()
# The one MindSpore output of an op that returns nothing (aten::_assert_async): MindSpore does
# not launch a Custom kernel without outputs, so it gets this empty placeholder.
PLACEHOLDER = {"shape": [0], "dtype": mstype.TensorType(mstype.bool_), "value": None}


def unique_id() -> int:
    """A fresh `ms_aten_uid` attribute value. MindSpore's PyNative kernel cache keys on func
    and attributes; a per-object id keeps two ops from sharing a kernel they must not share."""
    return next(_uids)


class AtenOp(ops.Custom):
    """A MindSpore primitive that runs one ATen op through libms_aten.so's MsAtenCall.

    Call patterns (pattern.py). The op spec (a primitive attribute, read once per kernel) and,
    in GRAPH mode, the bprop's arity depend on how a call fills the op's tensor slots: Python
    numbers, omitted trailing optionals, the lengths of two tensor lists. MindSpore hands
    __infer__ no call site, and builds every kernel from the primitive's attributes after all
    inference is done, so one op object can serve one pattern on this route: the first
    inference fixes it (setting the attribute then), and a later call with another pattern is
    a TypeError that asks for a second op object. The base pattern (every slot a tensor, one
    list of any length) is the spec ms_aten.op builds and never conflicts with itself. The
    PYNATIVE fast path (fast_path.py) keeps one kernel pair per pattern and has no such limit.
    """

    def __init__(self, binding: Binding, infer: MetaInfer):
        self.binding = binding
        self.infer = infer
        self.device_target = _lib.current_target()  # retarget() changes it
        infer.device = _torch_device(self.device_target)
        self.pattern: Any = _UNSET  # fixed by the first __infer__
        self.bprops: dict[Pattern | None, Any] = {}  # bprops carry their VJP kernel (grad.py)
        explicit = patterns.needs_explicit(binding)
        super().__init__(_lib.kernel(self.device_target), out_shape=self._shapes,
                         out_dtype=self._dtypes, func_type="aot",
                         bprop=None if explicit else self._bprop_for(None))
        if not explicit:  # else the spec comes with the first call's list lengths
            self.add_prim_attr(SPEC_ATTR, self.spec(None))
        if binding.returns_nothing:
            # Nothing uses its placeholder output: without a side effect GRAPH mode would drop
            # the op, and its check with it.
            self.add_prim_attr("side_effect_io", True)
        self.add_prim_attr("ms_aten_uid", unique_id())

    def spec(self, pattern: Pattern | None) -> str:
        """The forward spec for a call pattern: the functional call, then (csrc/kernel.h) the
        out= overload that writes in place."""
        target = out_variant(self.binding.schema)
        call = self.binding.spec("call", pattern=pattern)
        return call + (f";{self.binding.spec('out', target, pattern)}" if target else "")

    def __call__(self, *args):
        # PYNATIVE on CPU: the pyboost fast path (ms_aten/fast_path.py), about 20x cheaper per
        # call than Custom's launch. GRAPH mode never calls __call__ (the op is a primitive
        # there), so it stays on the AOT kernel.
        result: Any
        if self.device_target == "CPU" and not graph_mode() and fast_path.available():
            result = fast_path.call(self, *args)
        else:
            result = super().__call__(*args)
        if self.binding.returns_nothing:
            result.asnumpy()  # an assert raises here, as torch's does, not at a later sync
        return result

    def __infer__(self, *args: dict) -> dict:
        pattern = patterns.from_infer_args(self.binding, args)
        self._check_nones(args, pattern)
        self._fix_pattern(pattern)
        # One fake run gives shapes and dtypes together (Custom would infer them apart).
        shapes, types = flatten_infer_args(args)
        if len(shapes) != len(args) and graph_mode():  # a tuple input, and GRAPH mode
            self._check_list_dtypes(args)
        out_shapes, out_dtypes = self.infer(shapes, types, pattern)
        if self.binding.returns_nothing:
            return dict(PLACEHOLDER)
        if len(out_shapes) == 1 and not self.binding.returns_list:
            return {"shape": out_shapes[0], "dtype": out_dtypes[0], "value": None}
        return {"shape": tuple(out_shapes), "dtype": tuple(out_dtypes), "value": None}

    def _check_nones(self, args: tuple[dict, ...], pattern: Pattern | None) -> None:
        # MindSpore hands a Custom kernel a buffer of dtype "none" for a None argument, and
        # inserts a failing Cast for a tuple that starts with None: the Custom route takes
        # neither (the fast path drops Nones itself).
        for slot, arg, fill in zip(self.binding.slots, args, pattern or (), strict=False):
            if arg["dtype"] is None:
                raise TypeError(
                    f"ms_aten op '{self.binding.name}': argument '{slot.name}' is None at call "
                    f"time, which MindSpore cannot hand to a Custom kernel (GRAPH mode, or "
                    f"PYNATIVE off the CPU fast path); give it as the constant "
                    f"{slot.name}=None to ms_aten.op, or leave trailing ones out")
            if isinstance(fill, tuple):  # a Tensor?[] with None entries
                raise TypeError(
                    f"ms_aten op '{self.binding.name}': argument '{slot.name}' holds None, and "
                    f"MindSpore cannot hand a None inside a tuple to a Custom kernel (GRAPH mode, "
                    f"or PYNATIVE off the CPU fast path). Run it in PYNATIVE mode on CPU, or use "
                    f"an op without None entries (index_select for x[:, i])")

    def _fix_pattern(self, pattern: Pattern | None) -> None:
        if self.pattern is _UNSET:
            self.pattern = pattern
            if pattern is not None:
                self.add_prim_attr(SPEC_ATTR, self.spec(pattern))
            return
        if pattern != self.pattern:
            raise TypeError(
                f"ms_aten op '{self.binding.name}': this op object was first called with "
                f"{patterns.describe(self.pattern)} and now with {patterns.describe(pattern)}. "
                f"Outside the PYNATIVE fast path, one op object serves one way of filling its "
                f"tensor arguments (the kernel spec and the bprop depend on it): make another "
                f"with ms_aten.op(...) for this call")

    def get_bprop(self) -> Callable:
        # MindSpore asks for the bprop after inference: the one for the fixed pattern.
        return self._bprop_for(None if self.pattern is _UNSET else self.pattern)

    def _bprop_for(self, pattern: Pattern | None) -> Any:
        bprop: Any = self.bprops.get(pattern)
        if bprop is None:
            bprop = self.bprops[pattern] = (_zeros_bprop(self.binding, pattern)
                                            if self.binding.returns_nothing
                                            else make_bprop(self.binding, pattern))
            if getattr(bprop, "vjp", None) is not None and self.device_target != "CPU":
                retarget(bprop.vjp, self.device_target)
        return bprop

    def _check_list_dtypes(self, args) -> None:
        # In GRAPH mode MindSpore labels every tensor of a tuple input with the first one's
        # dtype when it hands them to the kernel; mixed dtypes would be misread.
        for arg in args:
            if not isinstance(arg["dtype"], (tuple, list)):
                continue
            tensor_types = {str(d) for d in arg["dtype"] if isinstance(d, mstype.TensorType)}
            if len(tensor_types) > 1:
                raise TypeError(f"ms_aten op '{self.binding.name}': in GRAPH mode the tensors of "
                                f"a list must share one dtype, got {list(map(str, arg['dtype']))}")

    def set_device(self, device_target: str) -> AtenOp:
        """Run this op (and its backward) on `device_target` whatever MindSpore's context says,
        e.g. set_device("CPU") for the CPU ATen kernel while the context is GPU."""
        retarget(self, device_target)
        for bprop in self.bprops.values():
            if getattr(bprop, "vjp", None) is not None:
                retarget(bprop.vjp, device_target)
        self.infer.device = _torch_device(device_target)
        return self

    def _shapes(self, *shapes):  # Custom requires these callables; __infer__ replaces them
        raise AssertionError("unreachable: AtenOp.__infer__ infers shapes")

    _dtypes = _shapes


def _torch_device(device_target: str) -> str:
    """The device of the fake tensors that infer shapes for a MindSpore device target (shapes
    can differ by device: CPU's native_batch_norm returns empty statistics in eval mode)."""
    return "cuda" if device_target == "GPU" else "cpu"


def _zeros_bprop(binding: Binding, pattern: Pattern | None) -> Callable:
    """The bprop of an op that returns nothing: no output depends on an input."""
    arity = len(binding.slots) if pattern is None else sum(
        fill != patterns.OMITTED for fill in pattern)
    zeros_like = ops.ZerosLike()

    def gradients(inputs: tuple, out, dout):
        grads: tuple = ()
        for x in inputs:
            grads = grads + (zeros_like(x),)
        return grads

    return with_arity(arity, gradients)


def retarget(custom: ops.Custom, device_target: str) -> None:
    """Point an ms_aten Custom op at the bridge's kernel for `device_target`."""
    func = _lib.kernel(device_target)  # raises before anything runs if unsupported
    ops.Custom.set_device(custom, device_target)
    custom.uniq_name = custom.uniq_name.replace(custom.func, func)
    custom.func = custom.func_name = func
    custom.add_prim_attr("func_name", func)
    custom.add_prim_attr("uniq_name", custom.uniq_name)
    custom.device_target = device_target


def op(name: Any, **constants: Any) -> AtenOp:
    """A MindSpore op that runs the torch dispatcher op `name`.

    name: 'leaky_relu' (aten assumed), 'aten::max.dim', 'max.default' (the overload without a
    name), 'torchvision::nms', 'myns::my_op', or torch's own op objects:
    torch.ops.aten.max.default (an OpOverload), torch.ops.aten.max (an OpOverloadPacket, whose
    overload the constants choose).
    constants: every non-tensor schema argument you want to set, by its schema name; a
    `Tensor?` argument that should be None is given as `name=None`, and a Tensor argument may be
    given a Python number (torch's wrapped number). Every other tensor argument is a call-time
    input, in schema order; a `Tensor[]` is passed as a tuple; trailing `Tensor?` inputs may be
    left out (None), and a call-time input may be a Python number.
    """
    binding = Binding.build(resolve(op_name(name), constants), constants)
    return AtenOp(binding, MetaInfer(binding))
