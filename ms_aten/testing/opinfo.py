"""OpInfo oracle: how much of ATen runs correctly through ms_aten.

The oracle walks PyTorch's OpInfo database (`common_methods_invocations.op_db`), takes each
OpInfo's CPU sample inputs in a dtype (float32 unless asked for another) and finds out which
ATen op each sample reaches, by running
`opinfo.op(sample.input, *sample.args, **sample.kwargs)` under a TorchDispatchMode that records
every OpOverload dispatched to it, with autograd off (torch.no_grad) so that autograd's own
bookkeeping (the aten::detach of a saved output) is not recorded.

Scope criterion (exact). A sample is in scope when all of these hold:
  1. the OpInfo supports the dtype on CPU and the sample's call runs in torch;
  2. the recording mode sees exactly one OpOverload call in total (not zero, as for a
     dropout with p=0; not several, as for CompositeImplicit decompositions);
  3. that overload's schema has no mutable argument (no in-place, out= or running-stat op)
     and returns only `Tensor` / `Tensor[]` values;
  4. none of its tensor arguments or results is sparse (MindSpore tensors are dense);
  5. the overload runs in torch on compact (contiguous, offset-free) copies of its tensor
     arguments, which is what MindSpore tensors are (an as_strided that reaches into the
     storage of a view does not);
  6. its tensors, inputs plus torch's outputs, hold at most MAX_ELEMENTS elements;
  7. none of its tensors, inputs or outputs, nor a dtype argument has a dtype MindSpore lacks
     (complex32, the float8 types, ...: the dtypes outside ms_aten.dtypes' table).
Every out-of-scope sample keeps the reason. Dtypes MindSpore lacks are not swept at all.

An in-scope call is mapped onto ms_aten with the overload's schema: Tensor-typed arguments
(Tensor, Tensor?, Tensor[] as a tuple, Tensor?[]) become call-time inputs in schema order,
everything else becomes a constant by schema name (a None or absent Tensor? is the constant
None), and `ms_aten.op("ns::name.overload", **constants)` runs on MindSpore copies of the
same data, in PYNATIVE mode and in GRAPH mode (inside an nn.Cell). Its outputs are compared
with the torch eager result of the same overload on the same data (torch.testing.assert_close
with its per-dtype default tolerances, `tolerances(dtype)`: rtol 1.3e-6, atol 1e-5 for float32
and complex64, 1e-7 and 1e-7 for float64 and complex128, 1e-3 and 1e-5 for float16, 1.6e-2
and 1e-5 for bfloat16, exact for integers and bool; NaNs equal; dtypes and shapes must match).
Random ops are compared after reseeding torch's global generator before each run; for ops
whose values are not defined (aten::*empty*: uninitialized memory) or that torch does not
reproduce from one seed, only shapes and dtypes are compared.

The gradient check (for OpInfos that support autograd, when the torch reference has a
derivative) differentiates L = sum_i sum(out_i * w_i) over the floating outputs out_i, with
fixed random cotangents w_i, with respect to the inputs the OpInfo sample marks requires_grad:
ms.grad in both modes against torch.autograd.grad. It runs for samples of GRAD_DTYPES (float32
and float64) only; samples of other dtypes are drawn without requires_grad and get the forward
checks alone.

Each check ends as one Outcome: pass, fail-mismatch, fail-error (exception type and first
line) or skipped (reason). `sweep` runs OpInfos in a worker process with a per-sample time
limit and restarts it after a crash or a timeout, so one bad sample cannot stop a sweep.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import mindspore as ms
import numpy as np
import torch
from mindspore import nn
from torch.utils._python_dispatch import TorchDispatchMode

import ms_aten  # noqa: I001  (imports torch first, then loads the bridge library)

from ..native.dtypes import TORCH_TO_MS
from . import flat, regroup, to_ms, to_torch

ms.set_device("CPU")

MAX_ELEMENTS = 1_000_000
SEED = 0
DEFAULT_CAP = 20  # in-scope samples checked per OpInfo by a sweep (0: all)
DEFAULT_SAMPLE_TIMEOUT = 120.0  # seconds a sweep waits for progress before giving up on a sample

PASS, MISMATCH, ERROR, SKIPPED = "pass", "fail-mismatch", "fail-error", "skipped"
MODES = {"pynative": ms.PYNATIVE_MODE, "graph": ms.GRAPH_MODE}
FORWARD_CHECKS = ("forward/pynative", "forward/graph")
GRAD_CHECKS = ("grad/pynative", "grad/graph")
CHECKS = FORWARD_CHECKS + GRAD_CHECKS
DTYPES = tuple(TORCH_TO_MS)  # the dtypes a sweep can check: those MindSpore has
GRAD_DTYPES = (torch.float32, torch.float64)  # the dtypes whose samples get the gradient checks

Input = torch.Tensor | tuple  # a tensor, or a tuple of tensors for a Tensor[] argument
OpInfo = Any  # torch.testing._internal.opinfo.core.OpInfo


@dataclass(frozen=True)
class Outcome:
    status: str  # PASS, MISMATCH, ERROR or SKIPPED
    reason: str = ""


@dataclass
class SampleResult:
    opinfo: str  # OpInfo key: name, plus '.variant' when it has a variant_test_name
    dtype: str  # the dtype the samples were drawn in, by name: 'float32'
    index: int  # the sample's position in opinfo.sample_inputs order
    aten: str | None  # the recorded overload, 'aten::add.Tensor', when there is exactly one
    scope: str | None  # None when in scope, else why not
    checks: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class OpInfoSkipped:
    """An OpInfo without samples in a dtype."""

    opinfo: str
    dtype: str
    reason: str


@dataclass(frozen=True)
class RecordedCall:
    func: torch._ops.OpOverload
    args: tuple
    kwargs: dict


@dataclass
class Case:
    """One sample of one OpInfo, recorded; `call` is set when it reached a single op."""

    opinfo: str
    dtype: torch.dtype
    index: int
    supports_autograd: bool
    scope: str | None
    call: RecordedCall | None = None


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[RecordedCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls.append(RecordedCall(func, args, kwargs))
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# OpInfos, samples and the scope criterion


@lru_cache(maxsize=1)
def opinfos() -> dict[str, OpInfo]:
    """Every OpInfo of op_db by key ('add', 'logspace.tensor_overload')."""
    from torch.testing._internal.common_methods_invocations import op_db
    return {opinfo_key(info): info for info in op_db}


def opinfo_key(info: OpInfo) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_named(name: str) -> torch.dtype:
    """The torch dtype of a name ('float64'); ValueError if MindSpore lacks it."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"torch has no dtype {name!r}")
    if dtype not in DTYPES:
        raise ValueError(f"MindSpore has no dtype {name!r}; sweepable: "
                         + ", ".join(map(dtype_name, DTYPES)))
    return dtype


def lacking_dtype(values: Iterable[Any]) -> str | None:
    """The name of the first dtype MindSpore lacks among these tensors' dtypes and dtype values,
    or None."""
    for value in values:
        dtype = value.dtype if isinstance(value, torch.Tensor) else value
        if isinstance(dtype, torch.dtype) and dtype not in DTYPES:
            return dtype_name(dtype)
    return None


def lacking_dtype_support() -> dict[str, int]:
    """For each dtype MindSpore lacks, the number of OpInfos supporting it on CPU."""
    counts: dict[str, int] = {}
    for info in opinfos().values():
        for dtype in info.supported_dtypes("cpu"):
            if dtype not in DTYPES:
                counts[dtype_name(dtype)] = counts.get(dtype_name(dtype), 0) + 1
    return dict(sorted(counts.items()))


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol): torch.testing.assert_close's defaults for the dtype, which compare uses."""
    from torch.testing._comparison import default_tolerances
    return default_tolerances(dtype)


def checks_for(dtype: torch.dtype) -> tuple[str, ...]:
    """The checks a sample of this dtype gets: gradients only in GRAD_DTYPES."""
    return CHECKS if dtype in GRAD_DTYPES else FORWARD_CHECKS


def overload_name(func: torch._ops.OpOverload) -> str:
    schema = func._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _returns_only_tensors(schema) -> bool:
    return bool(schema.returns) and all(str(r.type) in ("Tensor", "List[Tensor]")
                                        for r in schema.returns)


def scope_of_calls(calls: Sequence[RecordedCall]) -> str | None:
    """Why a recorded call list is out of scope, or None if it is one bridgeable op."""
    names = [overload_name(c.func) for c in calls]
    if not calls:
        return "reaches no ATen op"
    if len(calls) > 1:
        shown = ", ".join(dict.fromkeys(names))
        return f"reaches {len(calls)} ATen ops ({shown[:120]})"
    schema = calls[0].func._schema
    if schema.is_mutable:
        return f"its op writes its inputs ({names[0]})"
    if not _returns_only_tensors(schema):
        returned = ", ".join(str(r.type) for r in schema.returns) or "nothing"
        return f"its op returns {returned} ({names[0]})"
    if any(t.layout != torch.strided for t in _call_tensors(calls[0])):
        return f"it passes a sparse tensor, which MindSpore cannot hold ({names[0]})"
    lacking = lacking_dtype([*_call_tensors(calls[0]), *calls[0].args, *calls[0].kwargs.values()])
    if lacking:
        return f"it passes {lacking}, a dtype MindSpore lacks ({names[0]})"
    return None


def _call_tensors(call: RecordedCall) -> list[torch.Tensor]:
    values = [*call.args, *call.kwargs.values()]
    items = [v for value in values
             for v in (value if isinstance(value, (list, tuple)) else [value])]
    return [item for item in items if isinstance(item, torch.Tensor)]


def record_sample(info: OpInfo, sample) -> tuple[list[RecordedCall], str | None]:
    """The ATen calls a sample makes, or an out-of-scope reason if it raised."""
    recorder = _Recorder()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad(), recorder:  # no autograd bookkeeping (detach) recorded
                info.op(sample.input, *sample.args, **sample.kwargs)
    except Exception as error:  # noqa: BLE001  (any failure of torch itself)
        return [], f"the sample raises in torch ({describe(error)})"
    return recorder.calls, None


def record_cases(key: str, dtype: torch.dtype = torch.float32) -> list[Case]:
    """Every CPU sample of an OpInfo in a dtype, recorded and scoped; ValueError if none can be.
    Samples of GRAD_DTYPES are drawn with requires_grad where the OpInfo supports autograd."""
    info = opinfos()[key]
    if dtype not in info.supported_dtypes("cpu"):
        raise ValueError("no CPU support for the dtype")
    requires_grad = info.supports_autograd and dtype in GRAD_DTYPES
    torch.manual_seed(SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = list(info.sample_inputs("cpu", dtype, requires_grad=requires_grad))
    except Exception as error:  # noqa: BLE001
        raise ValueError(f"sample generation fails ({describe(error)})") from error
    cases = []
    for index, sample in enumerate(samples):
        calls, reason = record_sample(info, sample)
        reason = reason or scope_of_calls(calls)
        cases.append(Case(key, dtype, index, info.supports_autograd, reason,
                          calls[0] if len(calls) == 1 else None))
    return cases


def apply_cap(cases: list[Case], cap: int) -> list[Case]:
    """At most `cap` in-scope cases stay in scope, evenly spread; the others are marked."""
    in_scope = [c for c in cases if c.scope is None]
    if cap <= 0 or len(in_scope) <= cap:
        return cases
    keep = {in_scope[i].index for i in np.linspace(0, len(in_scope) - 1, cap).round().astype(int)}
    for case in in_scope:
        if case.index not in keep:
            case.scope = f"over the cap of {cap} checked samples per OpInfo"
    return cases


@cache
def in_scope_cases(key: str, dtype: torch.dtype = torch.float32) -> tuple[Case, ...]:
    """The in-scope cases of an OpInfo in a dtype, in sample order (for tests that name them by
    position)."""
    return tuple(c for c in record_cases(key, dtype) if c.scope is None)


# ---------------------------------------------------------------------------------------------
# Mapping a recorded call onto ms_aten


class Unsupported(Exception):
    """A recorded call that ms_aten's calling convention cannot express."""


def _is_tensor_arg(arg) -> bool:
    """Tensor, Tensor?, Tensor[] or Tensor?[]: a call-time input of an ms_aten op."""
    text = str(arg.real_type)
    if text.startswith("Optional[") and text.endswith("]"):
        text = text[len("Optional["):-1]
    return text in ("Tensor", "List[Tensor]", "List[Optional[Tensor]]")


def _fresh(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous, detached, conj/neg-resolved copy."""
    return tensor.detach().resolve_conj().resolve_neg().clone().contiguous()


@dataclass
class BoundCall:
    """A recorded call split the ms_aten way: call-time inputs and constants."""

    func: torch._ops.OpOverload
    inputs: list[Input]  # schema order; tuples for Tensor[] / Tensor?[]
    constants: dict[str, Any]
    differentiable: list[bool]  # per flat input: floating and requires_grad in the sample

    @property
    def name(self) -> str:
        return overload_name(self.func)

    def torch_kwargs(self, inputs: Sequence[Input]) -> dict[str, Any]:
        """Keyword arguments calling the overload with these inputs (schema order)."""
        kwargs, position = dict(self.constants), iter(inputs)
        for arg in self.func._schema.arguments:
            if _is_tensor_arg(arg) and arg.name not in self.constants:
                value = next(position)
                kwargs[arg.name] = list(value) if isinstance(value, tuple) else value
        return kwargs

    def run_torch(self, inputs: Sequence[Input]) -> list[torch.Tensor]:
        torch.manual_seed(SEED)
        return flatten(self.func(**self.torch_kwargs(inputs)))

    def ms_op(self) -> ms_aten.AtenOp:
        # A default overload is named with a bare trailing dot ('aten::bernoulli.'): ms_aten
        # resolves 'aten::bernoulli' among all overloads and rejects 'aten::bernoulli.default'.
        schema = self.func._schema
        return ms_aten.op(f"{schema.name}.{schema.overload_name}", **self.constants)


def bind(call: RecordedCall) -> BoundCall:
    """Split a recorded call by its schema; Unsupported if ms_aten cannot take it."""
    arguments = call.func._schema.arguments
    values = dict(zip((a.name for a in arguments), call.args, strict=False))
    values.update(call.kwargs)
    inputs: list[Input] = []
    constants: dict[str, Any] = {}
    originals: list[torch.Tensor] = []
    for arg in arguments:
        present = arg.name in values
        value = values.get(arg.name)
        if not _is_tensor_arg(arg):
            if present:
                constants[arg.name] = value
        elif value is None:
            constants[arg.name] = None  # an absent or None Tensor?
        elif isinstance(value, torch.Tensor):
            inputs.append(_fresh(value))
            originals.append(value)
        elif any(item is None for item in value):
            raise Unsupported(f"Tensor?[] argument '{arg.name}' has None entries")
        else:
            inputs.append(tuple(_fresh(item) for item in value))
            originals.extend(value)
    # The OpInfo marks the inputs it differentiates with requires_grad (not running stats).
    differentiable = [t.is_floating_point() and t.requires_grad for t in originals]
    return BoundCall(call.func, inputs, constants, differentiable)


def flatten(result: Any) -> list[torch.Tensor]:
    if isinstance(result, (torch.Tensor, ms.Tensor)):
        return [result]
    return [t for item in result for t in flatten(item)]


# MindSpore's wrapper around every error a Custom kernel reports; the kernel's own text follows.
_KERNEL_ERROR = re.compile(r"For 'Custom' on CPU, operator failed when executing user defined "
                           r"file \S+! Error message is ")


def describe(error: BaseException) -> str:
    """'TypeError: first non-blank line of the message' (at most 240 characters)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip(" -")]
    first = _KERNEL_ERROR.sub("", lines[0]) if lines else ""
    return f"{type(error).__name__}: {first}"[:240]


# ---------------------------------------------------------------------------------------------
# Comparing


def compare(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
            values: bool = True) -> str | None:
    """None if the outputs agree, else a one-line description of the first difference."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, torch gives {len(expected)}"
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        if got.dtype != want.dtype or got.shape != want.shape:
            return (f"output {i}: {got.dtype}{list(got.shape)}, "
                    f"torch gives {want.dtype}{list(want.shape)}")
        if not values:
            continue
        try:
            torch.testing.assert_close(got, want, equal_nan=True)
        except AssertionError as error:
            detail = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
            return f"output {i}: " + "; ".join(detail[:2])[:200]
    return None


# ---------------------------------------------------------------------------------------------
# MindSpore side: Cells and checks


class Apply(nn.Cell):
    """Calls its op on its inputs: one generic Cell class for every forward check."""

    def __init__(self, op: ms_aten.AtenOp) -> None:
        super().__init__()
        self.op = op

    def construct(self, *args):
        return self.op(*args)


class WeightedSum(nn.Cell):
    """sum_i sum(outputs[picks[i]] * weights[i]): its gradient is the VJP with `weights`.
    The products are summed in float64 (MindSpore's CPU ReduceSum has no bfloat16 kernel).

    It takes its op's inputs flat: ms.grad gives no gradient for a tuple input, so a Tensor[]
    input of `list_len` tensors from flat position `list_at` (-1: none) is packed here."""

    def __init__(self, op: ms_aten.AtenOp, picks: tuple[int, ...], weights: tuple,
                 single: bool, list_at: int, list_len: int) -> None:
        super().__init__()
        self.op = op
        self.picks = picks
        self.weights = weights
        self.single = single
        self.list_at = list_at
        self.list_end = list_at + list_len

    def construct(self, *flat):
        args = flat
        if self.list_at >= 0:
            args = flat[:self.list_at] + (flat[self.list_at:self.list_end],) + flat[self.list_end:]
        out = self.op(*args)
        if self.single:
            return (out * self.weights[0]).astype(ms.float64).sum()
        total = 0.0
        for i in range(len(self.picks)):
            total = total + (out[self.picks[i]] * self.weights[i]).astype(ms.float64).sum()
        return total


class Grad(nn.Cell):
    """The gradients of a scalar Cell with respect to the inputs at `positions`."""

    def __init__(self, net: nn.Cell, positions: tuple[int, ...]) -> None:
        super().__init__()
        self.grad = ms.grad(net, grad_position=positions)

    def construct(self, *args):
        return self.grad(*args)


def _run_in_mode(mode: str, fn: Callable[[], str | None]) -> Outcome:
    ms.set_context(mode=MODES[mode])
    try:
        problem = fn()
    except Exception as error:  # noqa: BLE001  (every failure is a result)
        return Outcome(ERROR, describe(error))
    return Outcome(PASS) if problem is None else Outcome(MISMATCH, problem)


def _forward(bound: BoundCall, expected: list[torch.Tensor], values: bool) -> str | None:
    net = Apply(bound.ms_op())
    ms_inputs = to_ms(bound.inputs)
    torch.manual_seed(SEED)
    actual = [to_torch(t) for t in flatten(net(*ms_inputs))]
    return compare(actual, expected, values)


def cotangents(outputs: Sequence[torch.Tensor]) -> dict[int, torch.Tensor]:
    """Fixed random cotangents for the floating outputs, by output position."""
    rng = np.random.default_rng(SEED)
    return {i: torch.from_numpy(rng.standard_normal(tuple(o.shape))).to(o.dtype)
            for i, o in enumerate(outputs) if o.is_floating_point()}


def list_span(inputs: Sequence[Input]) -> tuple[int, int]:
    """(flat start, length) of the Tensor[] input, or (-1, 0) when there is none."""
    position = 0
    for item in inputs:
        if isinstance(item, tuple):
            return position, len(item)
        position += 1
    return -1, 0


@dataclass
class GradReference:
    positions: tuple[int, ...]  # flat positions of the inputs differentiated
    weights: dict[int, torch.Tensor]  # cotangent by output position
    grads: list[torch.Tensor]  # by position in `positions`


def torch_gradients(bound: BoundCall) -> GradReference | str:
    """The gradient check's torch reference, or why the sample has none."""
    inputs = flat(bound.inputs)
    positions = tuple(i for i, wanted in enumerate(bound.differentiable) if wanted)
    if not positions:
        return "no differentiable input"
    leaves = [t.clone().requires_grad_() if i in positions else t for i, t in enumerate(inputs)]
    try:
        outputs = bound.run_torch(regroup(leaves, bound.inputs))
        weights = cotangents(outputs)
        if not weights:
            return "no differentiable floating output"
        loss = torch.stack([(outputs[i] * w).double().sum() for i, w in weights.items()]).sum()
        if not loss.requires_grad:
            return "no differentiable floating output"
        wrt = [leaves[i] for i in positions]
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    except RuntimeError as error:
        return f"torch has no gradient ({describe(error)})"
    return GradReference(positions, weights, [torch.zeros_like(t) if g is None else g
                                              for t, g in zip(wrt, grads, strict=True)])


def _gradient(bound: BoundCall, reference: GradReference) -> str | None:
    list_at, list_len = list_span(bound.inputs)
    net = WeightedSum(bound.ms_op(), tuple(reference.weights),
                      tuple(map(to_ms, reference.weights.values())),
                      _single_output(bound.func), list_at, list_len)
    ms_inputs = [to_ms(t) for t in flat(bound.inputs)]
    torch.manual_seed(SEED)
    actual = [to_torch(t) for t in flatten(Grad(net, reference.positions)(*ms_inputs))]
    return compare(actual, reference.grads)


def _single_output(func: torch._ops.OpOverload) -> bool:
    """Whether the ms_aten op returns one tensor rather than a tuple."""
    returns = func._schema.returns
    return len(returns) == 1 and str(returns[0].type) == "Tensor"


Progress = Callable[[str, Outcome | None], None]  # (check, None when it starts)


def _no_progress(name: str, outcome: Outcome | None) -> None:
    pass


def check_case(case: Case, checks: Sequence[str] = CHECKS,
               progress: Progress = _no_progress) -> SampleResult:
    """Run the requested checks that apply to the case's dtype (checks_for) on an in-scope case;
    every failure becomes an Outcome. `progress` hears of each check as it starts and ends."""
    start = time.perf_counter()
    checks = [name for name in checks if name in checks_for(case.dtype)]
    result = SampleResult(case.opinfo, dtype_name(case.dtype), case.index,
                          overload_name(case.call.func) if case.call else None, case.scope)
    if case.scope is None:
        try:
            _checks(case, checks, result, progress)
        except Exception as error:  # noqa: BLE001  (binding or the torch reference failed)
            for name in checks:
                result.checks.setdefault(name, Outcome(ERROR, describe(error)))
    result.seconds = time.perf_counter() - start
    return result


def values_comparable(bound: BoundCall, expected: list[torch.Tensor]) -> bool:
    """False for ops whose values are uninitialized memory (aten::*empty*), or that torch
    does not reproduce from the same seed; only their shapes and dtypes are compared."""
    if "empty" in bound.func._schema.name:
        return False
    # The second run has torch fill new memory (NaN, or the largest integer), as it does in
    # deterministic mode: any part the op leaves uninitialized (_ctc_loss's log_alpha) then
    # differs from the first run's instead of matching it by chance.
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ops without a deterministic kernel say so
            again = bound.run_torch(bound.inputs)
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    return compare(again, expected) is None


def _checks(case: Case, checks: Sequence[str], result: SampleResult,
            progress: Progress) -> None:
    assert case.call is not None  # only in-scope cases are checked, and they reached one op
    bound = bind(case.call)
    try:
        expected = bound.run_torch(bound.inputs)
    except Exception as error:  # noqa: BLE001  (as_strided past the end of a compact copy)
        result.scope = f"it raises in torch on compact copies of its inputs ({describe(error)})"
        return
    if any(t.layout != torch.strided for t in expected):
        result.scope = f"it returns a sparse tensor, which MindSpore cannot hold ({bound.name})"
        return
    lacking = lacking_dtype(expected)
    if lacking:
        result.scope = f"it returns {lacking}, a dtype MindSpore lacks ({bound.name})"
        return
    size = sum(t.numel() for t in flat(bound.inputs) + expected)
    if size > MAX_ELEMENTS:
        result.scope = f"over {MAX_ELEMENTS:.0e} elements"
        return
    values = values_comparable(bound, expected)

    def run(name: str, fn: Callable[[], str | None]) -> None:
        progress(name, None)
        result.checks[name] = _run_in_mode(name.split("/")[1], fn)
        progress(name, result.checks[name])

    for name in FORWARD_CHECKS:
        if name in checks:
            run(name, lambda: _forward(bound, expected, values))
    wanted = [name for name in GRAD_CHECKS if name in checks]
    if not wanted:
        return
    reference = torch_gradients(bound) if case.supports_autograd else "OpInfo has no autograd"
    if not values and not isinstance(reference, str):
        reference = "forward values not comparable"
    for name in wanted:
        if isinstance(reference, str):
            result.checks[name] = Outcome(SKIPPED, reference)
        else:
            run(name, lambda: _gradient(bound, reference))


# ---------------------------------------------------------------------------------------------
# Sweeping op_db in a worker process


def opinfo_results(key: str, dtype: torch.dtype, cap: int, start: int = 0,
                   on_begin: Callable[[Case], None] = lambda case: None,
                   progress: Progress = _no_progress) -> Iterator[SampleResult | OpInfoSkipped]:
    """Results of one OpInfo's samples in a dtype from sample index `start` on, or one
    OpInfoSkipped."""
    try:
        cases = apply_cap(record_cases(key, dtype), cap)
    except ValueError as error:
        yield OpInfoSkipped(key, dtype_name(dtype), str(error))
        return
    for case in cases[start:]:
        if case.scope is None:
            on_begin(case)
        yield check_case(case, CHECKS, progress)


def _worker(conn) -> None:
    """Runs (key, dtype, cap, start) jobs from the pipe; sends ('begin', (index, aten)),
    ('check', (name, outcome or None)) and ('result', item) messages, then ('end', None) per
    job."""
    workdir = os.path.join(tempfile.gettempdir(), "opinfo_oracle_worker")
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)  # MindSpore writes rank_0/ files (analyze_fail.ir) to the working dir
    warnings.simplefilter("ignore")
    while True:
        job = conn.recv()
        if job is None:
            return
        key, dtype, cap, start = job

        def on_begin(case: Case) -> None:
            assert case.call is not None  # in scope
            conn.send(("begin", (case.index, overload_name(case.call.func))))

        items = opinfo_results(key, dtype, cap, start, on_begin=on_begin,
                               progress=lambda name, outcome: conn.send(("check", (name, outcome))))
        for item in items:
            conn.send(("result", item))
        conn.send(("end", None))


class _Worker:
    """A spawned process running _worker."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.checked = 0  # samples it began checking

    def receive(self, timeout: float) -> tuple[str, Any] | None:
        """The next message, or None if the worker died or stayed silent for `timeout` s."""
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        return None

    def failure(self, timeout: float) -> str:
        if self.process.is_alive():
            return f"Timeout: no progress within {timeout:.0f} s"
        return f"WorkerCrash: the process died (exit code {self.process.exitcode})"

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def sweep(keys: Sequence[str], caps: Sequence[tuple[torch.dtype, int]] = (
              (torch.float32, DEFAULT_CAP),),
          sample_timeout: float = DEFAULT_SAMPLE_TIMEOUT,
          recycle_every: int = 250) -> Iterator[SampleResult | OpInfoSkipped]:
    """Results for every sample of the OpInfos `keys` in each dtype of `caps`, (dtype, cap)
    pairs, OpInfo by OpInfo. A worker process runs them; it is restarted after a crash or a
    timeout (the check in flight becomes a fail-error, the sweep resumes at the next sample)
    and once it began checking `recycle_every` samples (GRAPH mode keeps compiled Cells)."""
    worker: _Worker | None = None
    try:
        for key in keys:
            for dtype, cap in caps:
                start: int | None = 0
                while start is not None:
                    if worker is not None and worker.checked >= recycle_every:
                        worker.stop()
                        worker = None
                    worker = worker or _Worker()
                    worker.conn.send((key, dtype, cap, start))
                    start = yield from _follow(worker, key, dtype, sample_timeout)
                    if start is not None:
                        worker.stop()
                        worker = None
    finally:
        if worker is not None:
            worker.stop()


def _follow(worker: _Worker, key: str, dtype: torch.dtype, timeout: float):
    """Relays one job's results; returns None when it ends, else the index to resume from
    after yielding the failure of the sample in flight."""
    begun: SampleResult | None = None
    while True:
        message = worker.receive(timeout)
        if message is None:
            why = worker.failure(timeout)
            if begun is None:
                yield OpInfoSkipped(key, dtype_name(dtype),
                                    f"the worker failed outside a sample ({why})")
                return None
            yield _interrupted(begun, checks_for(dtype), why)
            return begun.index + 1
        kind, payload = message
        if kind == "end":
            return None
        if kind == "begin":
            index, aten = payload
            worker.checked += 1
            begun = SampleResult(key, dtype_name(dtype), index, aten, None,
                                 seconds=time.perf_counter())
        elif kind == "check":
            assert begun is not None  # a sample's checks follow its "begin"
            name, outcome = payload
            begun.checks[name] = outcome
        else:
            begun = None
            yield payload


def _interrupted(begun: SampleResult, expected: Sequence[str], why: str) -> SampleResult:
    """The result of a sample whose worker died or hung: the check in flight failed with `why`,
    the ones after it, of the `expected` checks, did not run."""
    checks = {name: outcome for name, outcome in begun.checks.items() if outcome is not None}
    for name in expected:
        if name not in checks:
            in_flight = name in begun.checks
            checks[name] = Outcome(ERROR, why) if in_flight or not begun.checks else Outcome(
                SKIPPED, "not run: an earlier check of this sample died")
    begun.checks = checks
    begun.seconds = time.perf_counter() - begun.seconds
    return begun
