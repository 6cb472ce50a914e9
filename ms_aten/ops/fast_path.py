"""The PYNATIVE fast path: an AtenOp call through a MindSpore CustomOpBuilder (pyboost) module.

ops.Custom(func_type="aot") costs ~120 us per PYNATIVE call; the pyboost module
(ms_aten/native/pyboost.py loads it) runs the same libms_aten.so kernel through MindSpore's
PyNative pipeline in a fraction of that, gradients included (MindSpore's C++ autograd Function,
with the op's VJP kernel as backward). GRAPH mode stays on Custom: a CustomOpBuilder op reaches
GRAPH mode only through an op_def YAML and a kernel in MindSpore's CustomKernelFactory, which
MindSpore 2.10 has on Ascend alone; on the CPU such a graph fails kernel selection
("Unsupported op [Custom_<name>] on CPU").
"""
from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol

import mindspore as ms
from mindspore import Tensor

from ..native import dtypes, pyboost
from . import pattern as patterns
from . import value_dependent
from .binding import Binding
from .fake_infer import FakeInfer
from .infer import ValueDependentError
from .pattern import Pattern


class RoutedOp(Protocol):
    """What the fast path needs of an op (op.py's AtenOp routes its PYNATIVE calls here)."""

    binding: Binding
    infer: FakeInfer

    def spec(self, pattern: Pattern | None) -> str: ...

STATE_ATTR = "_ms_aten_fast_path"


class _OpState:
    """Per-op fast-path state: forward and VJP kernels per call pattern (pattern.py), and one
    Outputs per input signature."""

    def __init__(self, module: ModuleType, op: RoutedOp) -> None:
        binding = op.binding
        # Calls that are all tensors, one per slot, skip computing their pattern.
        self.plain = (binding.list_position is None and not patterns.needs_explicit(binding))
        self.n_slots = len(binding.slots)
        self.kernels: dict[Pattern | None, tuple[Any, Any]] = {}
        # Signature -> Outputs, or VALUE_DEPENDENT; a signature holds id(dtype) (see call), and
        # dtypes_seen keeps those dtype objects alive so that no id is ever reused for another
        # dtype.
        self.outputs: dict[tuple, Any] = {}
        self.dtypes_seen: set = set()
        self.module = module
        self.op = op

    @property
    def forward(self) -> Any:
        """The forward kernel of the base pattern (every slot a tensor)."""
        return self.kernels_for(None)[0]

    def kernels_for(self, pattern: Pattern | None) -> tuple[Any, Any]:
        """(forward, VJP) kernels for a call pattern."""
        pair = self.kernels.get(pattern)
        if pair is None:
            binding = self.op.binding
            pair = self.kernels[pattern] = (
                self.module.Kernel(self.op.spec(pattern), binding.name),
                # The same spec AtenVjp (grad.py) carries, without building that primitive.
                self.module.Kernel(binding.spec("vjp", pattern=pattern),
                                   f"{binding.name} (backward)"))
        return pair

    def outputs_for(self, flat: Sequence[Tensor], key: tuple, pattern: Pattern | None):
        """The Outputs for `flat` (signature `key`), from op.infer; cached under `key`."""
        types = [x.dtype for x in flat]
        self.dtypes_seen.update(types)
        try:
            shapes, out_types = self.op.infer([list(x.shape) for x in flat], types, pattern)
        except ValueDependentError:
            self.outputs[key] = VALUE_DEPENDENT
            return VALUE_DEPENDENT
        if self.op.binding.returns_nothing:
            shapes, out_types = [[0]], [ms.bool_]  # MindSpore's placeholder output (op.py)
        names = [dtypes.spec_name(dtypes.to_torch(t)) for t in out_types]
        single = len(shapes) == 1 and not self.op.binding.returns_list
        outputs = self.module.Outputs(shapes, names, single)
        self.outputs[key] = outputs
        return outputs


VALUE_DEPENDENT = object()  # an Outputs entry: the op runs on its inputs' values (value_dependent)


def flatten(args: Sequence[Any]) -> list[Any]:
    """Call-time arguments as the kernel takes them: lists expanded, None (also inside a list)
    dropped, Python numbers as 0-dim tensors."""
    flat: list[Any] = []
    for arg in args:
        if isinstance(arg, (tuple, list)):
            flat.extend(x for x in arg if x is not None)
        elif patterns.is_number(arg):  # a 0-dim tensor the kernel's w<j> token wraps again
            flat.append(Tensor(arg, patterns.number_dtype(arg)))
        elif arg is not None:
            flat.append(arg)
    return flat


def _state(op: RoutedOp) -> _OpState:
    state = getattr(op, STATE_ATTR, None)
    if state is None:
        state = _OpState(pyboost.module(), op)
        setattr(op, STATE_ATTR, state)  # kernels live as long as the op (and its pending calls)
    return state


@pyboost.clears_executor_on_error
def call(op: RoutedOp, *args: Any) -> Tensor | tuple[Tensor, ...]:
    """op(*args) in PYNATIVE mode through the fast path: a Tensor, or a tuple of Tensors.

    op: an ms_aten.AtenOp; args: its call-time tensors, a Tensor[] argument as a tuple (as for
    op(*args)), Python numbers where torch takes them, trailing optional tensors left out.
    Gradients flow through ms.grad / value_and_grad. Kernel errors surface as a RuntimeError
    naming the op, at the call, or at the next sync point when the launch was asynchronous.
    """
    state = _state(op)
    pattern: Pattern | None = None
    flat: Sequence[Any] = args
    key: tuple
    try:
        if not (state.plain and len(args) == state.n_slots):
            raise AttributeError  # lists, numbers or omitted optionals: compute the pattern
        # Hashing a MindSpore dtype costs ~1 us, its id almost nothing (see dtypes_seen).
        key = tuple([(x.shape, id(x.dtype)) for x in flat])
    except AttributeError:
        pattern = patterns.from_call(op.binding, args)
        flat = flatten(args)
        try:
            key = (pattern, *[(x.shape, id(x.dtype)) for x in flat])
        except AttributeError:
            kinds = ", ".join(type(x).__name__ for x in flat)
            raise TypeError(f"ms_aten op '{op.binding.name}' takes MindSpore Tensors (a tuple of "
                            f"them for a Tensor[]) or Python numbers, got {kinds}") from None
    outputs = state.outputs.get(key)
    if outputs is None:
        outputs = state.outputs_for(flat, key, pattern)
    forward, vjp = state.kernels_for(pattern)
    if outputs is VALUE_DEPENDENT:
        return value_dependent.run(state.module, op.infer, vjp, flat, pattern)
    return state.module.run(forward, vjp, flat, outputs)
