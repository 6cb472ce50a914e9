"""Symbolic sizes of a program captured with dynamic shapes (csrc/program/scalars.h).

torch.export gives each dynamic input dim a sympy symbol (s0, s1, ...), with a range, and writes
every size computed from them as an expression (s0*8, (s1 - 1)//2 + 1). A program reads the
symbols from its inputs' sizes at launch, checks their ranges, and computes its outputs' shapes
from the same expressions, as scalar lines (`z`) of its value table, before any op runs.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import sympy
import torch

# Python callables torch.export leaves between SymInts, by the scalar function that computes
# them (csrc/program/scalars.h): operator's arithmetic and comparisons, torch's sym_* helpers.
SCALAR_FUNCTIONS: dict[Callable, str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.floordiv: "floordiv",
    operator.mod: "mod", operator.truediv: "truediv", operator.pow: "pow", operator.neg: "neg",
    operator.abs: "abs", operator.eq: "eq", operator.ne: "ne", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge", operator.and_: "and",
    operator.or_: "or", torch.sym_max: "max", torch.sym_min: "min", torch.sym_not: "not",
    torch.sym_float: "float", torch.sym_int: "int", torch.sym_ite: "ite", math.ceil: "ceil",
    math.floor: "floor",
}
# Dispatcher ops that read a tensor's layout: computed in C++ too, as scalar functions.
SIZE_OPS: dict[torch._ops.OpOverload, str] = {
    torch.ops.aten.sym_size.int: "size", torch.ops.aten.sym_numel.default: "numel",
    torch.ops.aten.sym_stride.int: "stride",
    torch.ops.aten.sym_storage_offset.default: "storage_offset",
}


def scalar_function(target: object) -> str | None:
    """The scalar function (csrc/program/scalars.h) that computes a graph node with this
    target, or None for an op the program calls."""
    if isinstance(target, torch._ops.OpOverload):
        return SIZE_OPS.get(target)
    return SCALAR_FUNCTIONS.get(target) if callable(target) else None


# sympy's (and torch.utils._sympy's) functions in shape expressions, by the scalar function
# that computes them; n-ary ones (Add, Mul, Max, Min) fold left.
_EXPRESSIONS = {
    "Add": "add", "Mul": "mul", "FloorDiv": "floordiv", "CleanDiv": "floordiv", "Mod": "mod",
    "PythonMod": "mod", "Max": "max", "Min": "min", "Pow": "pow", "PowByNatural": "pow",
    "IntTrueDiv": "truediv", "FloatTrueDiv": "truediv", "CeilToInt": "ceil",
    "FloorToInt": "floor", "TruncToInt": "int", "ToFloat": "float",
}


class UnboundSize(ValueError):
    """An expression reads a symbol no input size gives (a size that depends on values)."""


def scalar_token(value: object) -> str:
    """A constant operand of a scalar line."""
    if isinstance(value, bool):
        return f"b{int(value)}"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"f{value!r}"
    raise TypeError(f"not a scalar: {value!r}")


def _constant(expr: sympy.Expr) -> int | float | bool | None:
    """The value of a constant expression, else None."""
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Float:
        return float(expr)
    return None


@dataclass
class InputDim:
    """Where a symbol's size comes from: input `index`'s dim `dim`, for messages."""

    index: int
    name: str
    dim: int
    dim_name: str | None

    def describe(self) -> str:
        named = f" ({self.dim_name})" if self.dim_name else ""
        return f"input {self.index} ('{self.name}') dim {self.dim}{named}"


class Sizes:
    """Writes a program's scalar lines: the symbols bound to input sizes, their checks, and
    sympy expressions over them. `new_value` numbers a value, `emit` appends a line."""

    def __init__(self, new_value: Callable[[], int], emit: Callable[[str], None]) -> None:
        self.new_value = new_value
        self.emit = emit
        self.symbols: dict[sympy.Symbol, int] = {}
        self.sources: dict[sympy.Symbol, InputDim] = {}
        self._tokens: dict[sympy.Expr, str] = {}

    def line(self, fn: str, *operands: str) -> str:
        """A new scalar value `fn(operands)`; its operand token."""
        vid = self.new_value()
        self.emit(" ".join(["z", str(vid), fn, *operands]))
        return f"z{vid}"

    def token(self, expr: object) -> str:
        """The operand token for an int, or a sympy expression over bound symbols; UnboundSize
        names the first symbol no input gives, ValueError an expression it cannot compute."""
        if isinstance(expr, torch.SymInt | torch.SymFloat | torch.SymBool):
            expr = expr.node.expr
        if not isinstance(expr, sympy.Basic):
            return scalar_token(expr)
        constant = _constant(expr)
        if constant is not None:
            return scalar_token(constant)
        if expr in self._tokens:
            return self._tokens[expr]
        if isinstance(expr, sympy.Symbol):
            if expr not in self.symbols:
                raise UnboundSize(str(expr))
            return f"z{self.symbols[expr]}"
        fn = _EXPRESSIONS.get(type(expr).__name__)
        if fn is None or not expr.args:
            raise ValueError(f"ms_aten cannot compute the size expression {expr} "
                             f"({type(expr).__name__})")
        tokens = [self.token(arg) for arg in expr.args]
        if len(tokens) == 1:
            result = self.line(fn, tokens[0])
        else:
            result = tokens[0]
            for token in tokens[1:]:
                result = self.line(fn, result, token)
        self._tokens[expr] = result
        return result

    def bind_inputs(self, inputs: list[tuple[int, str, torch.Tensor]],
                    dim_names: Mapping[tuple[int, int], str],
                    ranges: Mapping[sympy.Symbol, object]) -> None:
        """Reads each symbol from the first input size that is exactly it, then checks every
        other input size against its expression (a shared dim, a derived one such as 2*s0,
        whose symbol is solved for when no size gives it alone, or a static one) and each
        symbol against its range. `inputs`: (value id, name, example) per user input."""
        later: list[tuple[str, InputDim, sympy.Expr]] = []
        for index, (vid, name, example) in enumerate(inputs):
            for dim, size in enumerate(example.shape):
                where = InputDim(index, name, dim, dim_names.get((index, dim)))
                read = self.line("size", f"z{vid}", f"i{dim}")
                expr = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
                if isinstance(expr, sympy.Symbol) and expr not in self.symbols:
                    self.symbols[expr] = int(read[1:])
                    self.sources[expr] = where
                else:
                    later.append((read, where, expr))
        for read, where, expr in later:
            for symbol in sorted(expr.free_symbols - set(self.symbols), key=str):
                self._solve(symbol, expr, read, where)
            self._check_equal(read, expr, where)
        for symbol, vid in self.symbols.items():
            bounds = ranges.get(symbol)
            low = _bound(getattr(bounds, "lower", None))
            high = _bound(getattr(bounds, "upper", None))
            label = quote(self.sources[symbol].describe(), safe="")
            self.emit(f"r {vid} {low or 0} {'-' if high is None else high} {label}")

    def _check_equal(self, read: str, expr: sympy.Expr, where: InputDim) -> None:
        """Checks an input size against its expression: `e` against a computed size, `r` with
        equal bounds against a static one."""
        token = self.token(expr)
        label = quote(where.describe(), safe="")
        if token.startswith("z"):
            self.emit(f"e {read[1:]} {token[1:]} {label}")
        else:
            self.emit(f"r {read[1:]} {token[1:]} {token[1:]} {label}")

    def _solve(self, symbol: sympy.Symbol, expr: sympy.Expr, read: str, where: InputDim) -> None:
        """Binds `symbol` from a size that is a*symbol + b (torch's derived dims); the equality
        check that follows rejects a size that is not of that form."""
        poly = sympy.Poly(expr, symbol) if expr.is_polynomial(symbol) else None
        if poly is None or poly.degree() != 1:
            raise ValueError(f"{where.describe()} has the size {expr}, from which ms_aten cannot "
                             f"read {symbol}: give {symbol} a dim of its own")
        a, b = poly.all_coeffs()
        solved = self.line("floordiv", self.line("sub", read, self.token(b)), self.token(a))
        self.symbols[symbol] = int(solved[1:])
        self.sources[symbol] = where


def _bound(bound: object) -> int | None:
    """A range bound as an int; None for none or an infinite one (torch's int_oo)."""
    try:
        value = float(bound)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(value) if math.isfinite(value) else None
