"""Op names to dispatcher schemas: parsing, overload resolution and the out= variant."""
from __future__ import annotations

import difflib
from functools import cache, lru_cache
from typing import Any

import torch

from .constants import ConstantError, check_constant, is_tensor_arg

Schema = torch._C.FunctionSchema


def op_name(op: Any) -> str:
    """The name ms_aten.op reads from a string, or from torch's own op objects:
    torch.ops.aten.max.default -> 'aten::max.default', torch.ops.aten.max -> 'aten::max'."""
    if isinstance(op, torch._ops.OpOverload):
        return f"{op._schema.name}.{op._overloadname}"
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name
    if isinstance(op, str) and op:
        return op
    raise ValueError(f"an op name must be a non-empty string, a torch OpOverload "
                     f"(torch.ops.aten.max.default) or OpOverloadPacket (torch.ops.aten.max), "
                     f"got {op!r}")


def split_name(name: str) -> tuple[str, str | None]:
    """'leaky_relu' -> ('aten::leaky_relu', None); 'aten::max.dim' -> ('aten::max', 'dim');
    'max.default' -> ('aten::max', ''): torch's name for the overload without a name."""
    qualified = name if "::" in name else f"aten::{name}"
    namespace, _, rest = qualified.partition("::")
    base, dot, overload = rest.partition(".")
    if dot and overload == "default":
        overload = ""
    return f"{namespace}::{base}", (overload if dot else None)


def full_name(schema: Schema) -> str:
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _in_dispatcher(schema: Schema) -> bool:
    # The JIT registry also lists interpreter-only overloads (aten::add.int) that the
    # dispatcher, and so the C++ bridge, cannot call.
    try:
        torch._C._dispatch_find_schema_or_throw(schema.name, schema.overload_name)
    except RuntimeError:
        return False
    return True


def is_written(arg: torch._C.Argument) -> bool:
    """Whether a schema argument (or return) is one the op writes: `Tensor(a!)`, `Tensor(a!)[]`."""
    return arg.alias_info is not None and arg.alias_info.is_write


def _mutates(schema: Schema) -> bool:
    return any(is_written(arg) for arg in schema.arguments)


@cache
def schemas(qualified: str) -> tuple[Schema, ...]:
    """Every dispatcher overload of an op, out= and in-place ones included."""
    found = tuple(s for s in torch._C._jit_get_schemas_for_operator(qualified) if _in_dispatcher(s))
    if not found:
        raise ValueError(f"unknown op '{qualified}'{_suggest(qualified)}")
    return found


@lru_cache(maxsize=1)
def _all_names() -> tuple[str, ...]:
    return tuple(sorted({s.name for s in torch._C._jit_get_all_schemas()}))


def _suggest(qualified: str) -> str:
    close = difflib.get_close_matches(qualified, _all_names(), n=3, cutoff=0.75)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _returns_tensors(schema: Schema) -> bool:
    """Only tensors, or nothing at all (aten::_assert_async: MindSpore gets a placeholder)."""
    return all(str(r.type) in ("Tensor", "List[Tensor]") for r in schema.returns)


def _wrapped(schema: Schema, constants: dict) -> int:
    """How many constants are numbers given for Tensor arguments (wrapped as torch wraps them)."""
    return sum(1 for a in schema.arguments if a.name in constants and is_tensor_arg(a)
               and constants[a.name] is not None)


def _fit(schema: Schema, constants: dict) -> str | None:
    """Why `constants` cannot call `schema`, or None if they can."""
    names = {arg.name for arg in schema.arguments}
    unknown = sorted(set(constants) - names)
    if unknown:
        return f"no argument named {', '.join(unknown)}"
    for arg in schema.arguments:
        if arg.name in constants:
            try:
                check_constant(arg, constants[arg.name])
            except ConstantError as error:
                return str(error)
        elif not is_tensor_arg(arg) and not arg.has_default_value():
            return f"missing constant '{arg.name}' ({arg.real_type})"
    return None


def resolve(name: str, constants: dict) -> Schema:
    """The functional overload `name` means, given the constants passed to ms_aten.op."""
    qualified, overload = split_name(name)
    all_schemas = schemas(qualified)
    if overload is not None:
        matching = [s for s in all_schemas if s.overload_name == overload]
        if not matching:
            listed = "\n  ".join(str(s) for s in all_schemas)
            raise ValueError(f"op '{qualified}' has no overload '{overload}'; it has:\n  {listed}")
        candidates = matching
    else:
        candidates = [s for s in all_schemas if _uncallable(s) is None]
    if not candidates:
        listed = "\n  ".join(f"{s}   <- {_uncallable(s)}" for s in all_schemas)
        raise TypeError(f"ms_aten.op('{name}'): no overload of {qualified} can become a MindSpore "
                        f"op:\n  {listed}")
    if len(candidates) == 1:
        schema = candidates[0]
        _check_callable(schema)
        why = _fit(schema, constants)
        if why is not None:
            raise TypeError(f"ms_aten.op('{name}'): {why}\n  schema: {schema}")
        return schema
    fits = [s for s in candidates if _fit(s, constants) is None]
    if len(fits) > 1:
        # A number goes to a Scalar argument rather than into a Tensor one: add(other=2.0) is
        # add.Scalar, though add.Tensor would take it as a wrapped number.
        fewest = min(_wrapped(s, constants) for s in fits)
        fits = [s for s in fits if _wrapped(s, constants) == fewest]
    if len(fits) > 1:
        # Prefer the overload that leaves the fewest arguments to their defaults:
        # add(other=2.0) picks add.Scalar, max(dim=1) picks max.dim.
        def defaulted(s: Schema) -> int:
            return sum(1 for a in s.arguments if a.name not in constants and a.has_default_value())
        least = min(map(defaulted, fits))
        fits = [s for s in fits if defaulted(s) == least]
    if len(fits) > 1 and len({_tensor_count(s, constants) for s in fits}) == 1:
        # Same call-time tensors either way (conv2d vs conv2d.padding): the default overload.
        fits = [s for s in fits if not s.overload_name] or fits
    if len(fits) == 1:
        return fits[0]
    listed = "\n  ".join(f"{s}" + ("" if s in fits else f"   <- {_fit(s, constants)}")
                         for s in candidates)
    given = ", ".join(f"{k}={v!r}" for k, v in constants.items()) or "no constants"
    problem = "is ambiguous" if fits else "matches no overload"
    example = (fits or candidates)[0]  # the overload without a name is torch's '.default'
    raise TypeError(f"ms_aten.op('{name}') with {given} {problem}; name the overload (e.g. "
                    f"'{example.name}.{example.overload_name or 'default'}'). "
                    f"Candidates:\n  {listed}")


def _tensor_count(schema: Schema, constants: dict) -> int:
    return sum(1 for a in schema.arguments if is_tensor_arg(a) and a.name not in constants)


def _uncallable(schema: Schema) -> str | None:
    """Why no MindSpore op can run `schema`, or None."""
    if _mutates(schema):
        return ("in-place and out= overloads write their inputs, which MindSpore owns; use the "
                "functional overload")
    if not _returns_tensors(schema):
        return (f"it returns {', '.join(str(r.type) for r in schema.returns)}; only ops "
                f"returning tensors (or nothing) can become MindSpore ops")
    return None


def _check_callable(schema: Schema) -> None:
    why = _uncallable(schema)
    if why is not None:
        raise TypeError(f"ms_aten.op('{full_name(schema)}'): {why}\n  schema: {schema}")


def _signature(args) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in args]


def out_variant(schema: Schema) -> Schema | None:
    """The overload that writes the same results into out= tensors, if the op has one."""
    if any(str(r.type) != "Tensor" for r in schema.returns):
        return None
    wanted = _signature(schema.arguments)
    for candidate in schemas(schema.name):
        outs = [a for a in candidate.arguments if a.is_out]
        rest = [a for a in candidate.arguments if not a.is_out]
        if (outs and len(outs) == len(schema.returns) and _signature(rest) == wanted
                and all(str(a.type) == "Tensor" for a in outs)):
            return candidate
    return None


def _has_cpu_kernel(schema: Schema) -> bool:
    """Whether the overload has a CPU kernel of its own (not only a composite one)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(full_name(schema), "CPU")


def inplace_variant(schema: Schema) -> Schema | None:
    """The in-place overload (relu_ for relu) that computes the functional `schema` into its
    first argument, where that beats the out= overload: one Tensor returned, an out= overload
    that is only the composite wrapper (functional, then a copy: relu.out allocates its result),
    and an in-place overload with a kernel of its own (csrc/launch/kernel.h runs it on the
    output)."""
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
        return None
    out = out_variant(schema)
    if out is not None and _has_cpu_kernel(out):
        return None
    try:
        candidates = schemas(schema.name + "_")
    except ValueError:
        return None
    for candidate in candidates:
        first = candidate.arguments[0] if candidate.arguments else None
        if (candidate.overload_name == schema.overload_name and first is not None
                and is_written(first)
                and _signature(candidate.arguments) == _signature(schema.arguments)
                and _has_cpu_kernel(candidate)):
            return candidate
    return None


# Kernels that give an op's output shapes without its data: a Meta kernel (torch.library's
# register_fake registers one), or a composite, which runs on meta tensors op by op.
_SHAPE_KEYS = ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
               "CompositeExplicitAutogradNonFunctional")


def missing_meta_kernel(schema: Schema) -> str | None:
    """Why an op from outside torch (a compiled extension, a torch.library op) cannot give its
    output shapes before it runs: it has no Meta kernel or fake implementation; else None.
    torch's own ops are not judged here (their Python meta functions and decompositions serve
    too)."""
    name = full_name(schema)
    namespace, _, base = name.partition("::")
    if namespace in ("aten", "prim", "prims") or not schema.returns or any(
            torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in _SHAPE_KEYS):
        return None
    return (f"op '{name}' has no Meta kernel or fake implementation, so its output shapes "
            f"cannot be known before it runs (MindSpore infers them ahead of the launch; "
            f"torch.export traces on fake tensors). Register one: in C++, "
            f"TORCH_LIBRARY_IMPL({namespace}, Meta, m) {{ m.impl(\"{base}\", my_meta_kernel); }}; "
            f"or in Python, @torch.library.register_fake(\"{name}\")")
