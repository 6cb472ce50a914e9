"""ms_aten.op: any torch dispatcher op as a MindSpore ops.Custom."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from mindspore import ops

from ..native import library, pyboost
from . import fast_path
from . import pattern as patterns
from .binding import SPEC_ATTR, Binding
from .bounded import ValueDependentOp
from .fake_infer import FakeInfer
from .grad import make_bprop, with_arity
from .infer import (
    Shape,
    ShapeInferenceError,
    ValueDependentError,
    flatten_infer_args,
    infer_outputs,
)
from .pattern import Pattern
from .primitive import CPP_SHAPES, PLACEHOLDER, SITE_ATTR, CppInferred
from .schema import inplace_variant, missing_meta_kernel, op_name, out_variant, resolve

_UNSET = object()


class AtenOp(CppInferred):
    """A MindSpore primitive that runs one ATen op through libms_aten.so's MsAtenCall.

    Shapes. MindSpore infers a call's outputs through the library's C++ hooks (infer.py), in
    GRAPH mode with unknown sizes too. Where those cannot serve, this object's `cpp_infer_shape`
    attribute is dropped for the call, and MindSpore takes __infer__'s result from a run on torch
    fake tensors (fake_infer.py): calls with Python numbers (the C++ hook sees no numbers),
    ops that return nothing, and static-shape calls whose fake run disagrees with the library's
    meta run on a shape or a dtype (CPU's native_batch_norm returns empty saved statistics in
    eval mode, its meta function says [C]; CPU's native_layer_norm keeps float16 statistics,
    its meta function says float32) or that the library cannot size (ops without a meta kernel,
    geqrf).
    MindSpore reads the attribute at each inference, right after __check__.

    Call patterns (pattern.py). The op spec (a primitive attribute, read once per kernel) and,
    in GRAPH mode, the bprop's arity depend on how a call fills the op's tensor slots: Python
    numbers, omitted trailing optionals, the lengths of two tensor lists. MindSpore hands
    inference no call site, and builds every kernel from the primitive's attributes after all
    inference is done, so one op object can serve one pattern on this route: the first
    inference fixes it (setting the attribute then), and a later call with another pattern is
    a TypeError that asks for a second op object. The base pattern (every slot a tensor, one
    list of any length) is the spec ms_aten.op builds and never conflicts with itself. The
    PYNATIVE fast path (fast_path.py) keeps one kernel pair per pattern and has no such limit.
    """

    def __init__(self, binding: Binding, infer: FakeInfer):
        self.infer = infer  # the fast path sizes its outputs with it; see the class docstring
        self.pattern: Any = _UNSET  # fixed by the first inference
        self.bprops: dict[Pattern | None, Any] = {}  # bprops carry their VJP kernel (grad.py)
        self.binding = binding
        self.device_target = library.current_target()  # retarget() changes it
        explicit = patterns.needs_explicit(binding)  # its spec comes with the first call
        multi_output = binding.returns_list or len(binding.schema.returns) > 1
        super().__init__(binding, "" if explicit else self.spec(None), binding.name,
                         multi_output, self.device_target,
                         bprop=None if explicit else self._bprop_for(None))
        infer.device = _torch_device(self.device_target)
        if binding.returns_nothing:
            # Nothing uses its placeholder output: without a side effect GRAPH mode would drop
            # the op, and its check with it.
            self.add_prim_attr("side_effect_io", True)

    def spec(self, pattern: Pattern | None) -> str:
        """The forward spec for a call pattern: the functional call, then (csrc/launch/kernel.h) the
        overload that writes MindSpore's output: the in-place one where out= is only a
        composite wrapper, else out=."""
        binding = self.binding
        spec = binding.spec("call", pattern=pattern)
        if (inplace := inplace_variant(binding.schema)) is not None:
            return spec + f";{binding.spec('inplace', inplace, pattern)}"
        if (target := out_variant(binding.schema)) is not None:
            return spec + f";{binding.spec('out', target, pattern)}"
        return spec

    def __call__(self, *args):
        # A call from Python on CPU, in either mode: the pyboost fast path (ops/fast_path.py),
        # about 14x cheaper per call than Custom's launch (9 against 127 us, a 64-element
        # leaky_relu). A graph MindSpore compiles never calls __call__ (the op is a primitive
        # there, on the AOT kernel); GRAPH mode calls it for an op called outside any graph,
        # which MindSpore runs at once, as PYNATIVE does.
        result: Any
        if self.device_target == "CPU" and pyboost.available():
            result = fast_path.call(self, *args)
        else:  # Custom's route (no fast path here): MindSpore infers this call next
            pattern = patterns.from_call(self.binding, args)
            self._fix_pattern(pattern)
            flat = fast_path.flatten(args)
            try:
                shapes, types = [list(x.shape) for x in flat], [x.dtype for x in flat]
            except AttributeError:
                kinds = ", ".join(type(x).__name__ for x in flat)
                raise TypeError(f"ms_aten op '{self.binding.name}' takes MindSpore Tensors (a "
                                f"tuple of them for a Tensor[]) or Python numbers, got "
                                f"{kinds}") from None
            self.tell(shapes, types)
            result = ops.Custom.__call__(self, *args)
        if self.binding.returns_nothing:
            result.asnumpy()  # an assert raises here, as torch's does, not at a later sync
        return result

    def call_inputs(self, args: Sequence[dict]) -> tuple[list[Shape], list[Any]]:
        pattern = patterns.from_infer_args(self.binding, args)
        self._check_nones(args, pattern)
        self._fix_pattern(pattern)
        return super().call_inputs(args)

    def check_count(self, shapes: Sequence[Sequence[int]]) -> None:
        # from_infer_args and from_call check the count against the pattern.
        if self.pattern is _UNSET or self.pattern is None:
            super().check_count(shapes)

    def tell(self, shapes: Sequence[Sequence[int]], types: Sequence[Any]) -> None:
        """Choose this call's shape inference (see the class docstring), and tell the library
        about the call when its C++ hook is the one MindSpore will ask."""
        pattern = None if self.pattern is _UNSET else self.pattern
        static = all(d >= 0 for shape in shapes for d in shape)
        python = pattern is not None or self.binding.returns_nothing
        if python and not static:
            raise ShapeInferenceError(
                f"ms_aten op '{self.binding.name}': unknown input sizes {list(map(list, shapes))} "
                f"with {patterns.describe(pattern)}; MindSpore's C++ shape hook sees only "
                f"tensors, so unknown sizes need a tensor in every slot")
        fake = None
        if static:
            try:
                fake = self.infer(shapes, types, pattern)
            except (ValueDependentError, TypeError):
                raise
            except Exception:
                if python:
                    raise
        if not python:
            self.check_count(shapes)
            try:
                library = infer_outputs(self.attrs[SPEC_ATTR], shapes, types,
                                        self.attrs[SITE_ATTR])
            except ShapeInferenceError:  # no meta kernel (geqrf): the fake run sized it
                if fake is None:
                    raise
                library = None
            python = fake is not None and (library is None or (
                [list(s) for s in fake[0]], list(fake[1])) != (library[0], library[1]))
        if python:
            if CPP_SHAPES in self.attrs:
                self.del_prim_attr(CPP_SHAPES)
        else:
            self.add_prim_attr(CPP_SHAPES, True)

    def __infer__(self, *args: dict) -> dict:
        if CPP_SHAPES in self.attrs:  # shapes from the C++ hook; dtypes from the library here
            return super().__infer__(*args)
        pattern = patterns.from_infer_args(self.binding, args)
        shapes, types = flatten_infer_args(args)
        out_shapes, out_dtypes = self.infer(shapes, types, pattern)
        if self.binding.returns_nothing:
            return dict(PLACEHOLDER)
        if self.multi_output:
            return {"shape": tuple(out_shapes), "dtype": tuple(out_dtypes), "value": None}
        return {"shape": out_shapes[0], "dtype": out_dtypes[0], "value": None}

    def _check_nones(self, args: Sequence[dict], pattern: Pattern | None) -> None:
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
                bprop.vjp.retarget(self.device_target)
        return bprop

    def set_device(self, device_target: str) -> AtenOp:
        """Run this op (and its backward) on `device_target` whatever MindSpore's context says,
        e.g. set_device("CPU") for the CPU ATen kernel while the context is GPU."""
        self.retarget(device_target)
        for bprop in self.bprops.values():
            if getattr(bprop, "vjp", None) is not None:
                bprop.vjp.retarget(device_target)
        self.infer.device = _torch_device(device_target)
        return self


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


def op(name: Any, **constants: Any) -> AtenOp | ValueDependentOp:
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

    An op whose output shape can depend on input values (torch tags it dynamic_output_shape:
    nonzero, unique, masked_select, index) comes as a ValueDependentOp, a Cell that runs it in
    GRAPH mode too (bounded.py); every other op is an AtenOp, an ops.Custom.
    """
    binding = Binding.build(resolve(op_name(name), constants), constants)
    if (why := missing_meta_kernel(binding.schema)) is not None:
        raise ShapeInferenceError(f"ms_aten.op: {why}")  # no route could size its outputs
    aten = AtenOp(binding, FakeInfer(binding))
    if torch.Tag.dynamic_output_shape in aten.infer.overload.tags:
        return ValueDependentOp(aten)  # GRAPH mode pads its outputs (bounded.py)
    return aten
