"""An op that writes its inputs in place, as one MindSpore primitive: torch's fused optimizers
(`_fused_adam_` over all parameters, their moments and step counts at once), `_foreach_*_`
ops, `add_`.

ms_aten.op refuses such ops: they write MindSpore's buffers behind its back. A MutatingOp says
which inputs it writes (the spec's u / U tokens, csrc/op/spec.h); the C++ kernel
(csrc/op/mutate.h) writes those buffers and nothing else: an argument the schema writes that
the caller did not name (the fused optimizers' `grads`) is copied first.

For MindSpore the primitive is a memory side effect (`side_effect_mem`), so GRAPH mode keeps it
though nothing uses its one placeholder output, and each written input has a RW_WRITE
signature, as MindSpore's own Assign and Adam have, so a read of that Parameter after the op
loads the new value. Signatures are per input, and a tuple input with one did not make
MindSpore reload its Parameters: every tensor, those of a Tensor[] too, is an input of its own.
The written inputs must be Parameters in GRAPH mode (MindSpore refuses anything else there).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mindspore.ops import signature as sig

from . import constants as consts
from .binding import Binding
from .primitive import CPP_SHAPES, PLACEHOLDER, CppInferred
from .schema import full_name, is_written, schemas, split_name


def _schema(name: str):
    qualified, overload = split_name(name)
    for schema in schemas(qualified):
        if schema.overload_name == (overload or ""):
            return schema
    listed = "\n  ".join(str(s) for s in schemas(qualified))
    raise ValueError(f"op '{qualified}' has no overload '{overload or 'default'}'; name one of:"
                     f"\n  {listed}")


def _letter(name: str, written: Collection[str], unwritten: Collection[str],
            letters: str) -> str:
    """The spec token's letter for a tensor argument: read, written or unwritten
    (csrc/op/spec.h)."""
    return letters[1] if name in written else letters[2] if name in unwritten else letters[0]


class MutatingOp(CppInferred):
    """A dispatcher op that writes the call-time tensors named in `written`, in place.

    name: the exact overload ('_fused_adam_', '_fused_sgd_.tensor_lr', 'add_.Tensor').
    lengths: for every Tensor[] argument, how many tensors it takes (0: an empty list, passed
    as nothing at call time).
    written: the tensor arguments whose buffers the op updates; each must be one the schema
    writes (`Tensor(a!)`).
    unwritten: tensor arguments the schema writes but this call, by its constants, does not
    (the fused optimizers write `grads` only to unscale them by a `grad_scale`): passed as they
    are instead of copied first. The caller vouches for it.
    constants: every other argument, as for ms_aten.op.
    A call passes every tensor as an input of its own, in schema order, a Tensor[]'s members
    one after the other: `op(*params, *grads, lr)`. It returns an empty placeholder tensor.
    """

    def __init__(self, name: str, lengths: Mapping[str, int], written: Collection[str],
                 device_target: str = "CPU", unwritten: Collection[str] = (), **constants: Any):
        schema = _schema(name)
        binding = Binding.build(schema, constants)
        label = f"ms_aten mutating op '{full_name(schema)}'"
        arguments = {arg.name: arg for arg in schema.arguments}
        for arg_name in (*written, *unwritten):
            if arg_name not in arguments or not is_written(arguments[arg_name]):
                writable = [a.name for a in schema.arguments if is_written(a)]
                raise ValueError(f"{label}: it does not write an argument '{arg_name}'; it "
                                 f"writes {writable}")
        if any(not is_written(r) for r in schema.returns):
            raise TypeError(f"{label}: it returns new tensors; use the functional overload "
                            f"through ms_aten.op")
        self.lengths: dict[str, int] = {}
        signature = []  # one per call-time tensor: written ones are RW_WRITE
        tokens = ["mutate", schema.name, schema.overload_name or ".", "0"]
        n = 0  # call-time tensors so far
        for arg in schema.arguments:
            if arg.name in binding.constants:
                tokens.append(consts.encode(arg, binding.constants[arg.name]))
                continue
            kind = consts.tensor_kind(arg) if consts.is_tensor_arg(arg) else None
            if kind == "Tensor":
                count = 1
                tokens.append(f"{_letter(arg.name, written, unwritten, 'tur')}{n}")
            elif kind == "Tensor[]":
                if arg.name not in lengths:
                    raise TypeError(f"{label}: give the length of the tensor list '{arg.name}'")
                count = lengths[arg.name]
                letter = _letter(arg.name, written, unwritten, "TUR")
                tokens.append(f"{letter}[{','.join(str(n + i) for i in range(count))}]")
            elif kind is None and arg.has_default_value():
                tokens.append("D")
            else:
                raise TypeError(f"{label}: give argument '{arg.name}' ({arg.real_type}) as a "
                                f"constant")
            if kind is not None:
                access = sig.sig_rw.RW_WRITE if arg.name in written else sig.sig_rw.RW_READ
                signature += [sig.make_sig(f"{arg.name}{i}", access) for i in range(count)]
                self.lengths[arg.name] = count
                n += count
        self.n_tensors = n
        super().__init__(binding, " ".join(tokens), binding.name, False, device_target)
        # Its one output is a placeholder: __infer__ gives it, not the library's C++ hook.
        self.del_prim_attr(CPP_SHAPES)
        self.set_signatures(self._fill_signature(tuple(signature)))
        # Nothing reads its placeholder output: as a memory side effect, GRAPH mode keeps it
        # and orders it among the loads and stores of the Parameters it writes.
        self.add_prim_attr("side_effect_mem", True)

    def tell(self, shapes: Sequence[Sequence[int]], types: Sequence[Any]) -> None:
        if len(shapes) != self.n_tensors:
            given = ", ".join(f"{k}: {v}" for k, v in self.lengths.items() if v)
            raise TypeError(f"ms_aten mutating op '{self.binding.name}' takes {self.n_tensors} "
                            f"tensors ({given}), got {len(shapes)}")

    def __infer__(self, *args: dict) -> dict:
        return dict(PLACEHOLDER)
