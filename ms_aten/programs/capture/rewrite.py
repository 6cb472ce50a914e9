"""Subgraph replacement in a captured graph: the `replace=` of ms_aten.module and
ms_aten.function, in the spirit of torch.fx's subgraph_rewriter.

Each pattern is captured as the model is (export.py hands its capture in), so it is a graph of
the same ATen nodes the model's graph holds. torch.fx's SubgraphMatcher finds it: the same ops
on the same literal arguments, wired the same way, with no value inside a match used outside
it (overlapping matches: the first wins). replace_pattern_with_filters splices the replacement
in before program.build; the replacement is captured again for each match's input shapes and
dtypes, so its own nodes (a user's fused kernel, its autograd included) are what run.
"""
from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.passes.utils.matcher_utils import InternalMatch
from torch.fx.subgraph_rewriter import replace_pattern_with_filters

from ..base import CaptureError, Signature

# The graph module's meta entry where apply leaves how many matches it replaced, for
# lowering's Program.replaced.
REPLACED = "ms_aten_replaced"
# export.py's capture of a plain function: (fn, example inputs, name) -> ExportedProgram.
Trace = Callable[[Callable, tuple, str], ExportedProgram]
# A pattern with no example inputs is captured on one of these per input: enough for patterns
# whose ATen graph does not depend on shapes or dtypes (elementwise math, softmax(x, -1)).
DEFAULT_EXAMPLE = (torch.float32, (2, 3))


@dataclass(frozen=True)
class Rule:
    """One (pattern, replacement[, example_inputs]) entry of `replace=`."""

    pattern: Callable
    replacement: Callable
    examples: tuple[torch.Tensor, ...] | None

    @property
    def label(self) -> str:
        return f"replace ({_name(self.pattern)} -> {_name(self.replacement)})"


def rules(replace: Sequence) -> tuple[Rule, ...]:
    """`replace=` checked: a list of (pattern, replacement) or (pattern, replacement,
    example_inputs) tuples of two callables and a tuple of torch tensors."""
    if not isinstance(replace, (list, tuple)) or (replace and callable(replace[0])):
        raise TypeError(f"replace= takes a list of (pattern, replacement) tuples, got "
                        f"{replace!r}; one pair is replace=[(pattern, replacement)]")
    checked = []
    for i, entry in enumerate(replace):
        if not (isinstance(entry, tuple) and len(entry) in (2, 3)
                and callable(entry[0]) and callable(entry[1])):
            raise TypeError(f"replace[{i}] must be (pattern, replacement) or (pattern, "
                            f"replacement, example_inputs), two callables over torch tensors; "
                            f"got {entry!r}")
        examples = entry[2] if len(entry) == 3 else None
        if examples is not None and not (isinstance(examples, tuple) and all(
                isinstance(x, torch.Tensor) for x in examples)):
            raise TypeError(f"replace[{i}]: example_inputs must be a tuple of torch tensors, "
                            f"got {examples!r}")
        checked.append(Rule(entry[0], entry[1], examples))
    return tuple(checked)


def apply(exported: ExportedProgram, replace: Sequence, name: str, trace: Trace) -> None:
    """Applies each rule of `replace` in turn to `exported`'s graph, in place, and records the
    number of matches replaced for program.build (Program.replaced)."""
    exported.graph_module.meta[REPLACED] = sum(
        _apply(exported, rule, name, trace) for rule in rules(replace))


def _apply(exported: ExportedProgram, rule: Rule, name: str, trace: Trace) -> int:
    where = f"{name}: {rule.label}"
    examples = _pattern_examples(rule, where)
    try:
        pattern = _capture(trace, rule.pattern, examples, f"{where}: the pattern")
    except CaptureError as error:
        if rule.examples is not None:
            raise
        raise CaptureError(f"{error}; it was captured on {_describe(examples)}: give example "
                           f"inputs of the shapes and dtypes it meets in the model, "
                           f"(pattern, replacement, (x, ...))") from error
    _check_pattern(pattern, where)
    by_signature: dict[Signature, torch.fx.Graph] = {}

    def replacement_for(match: InternalMatch, *graphs: torch.fx.Graph) -> torch.fx.Graph:
        values = [node.meta["val"] for node in match.placeholder_nodes]
        signature = Signature(tuple(tuple(v.shape) for v in values),
                              tuple(v.dtype for v in values))
        if signature not in by_signature:
            zeros = tuple(torch.zeros(v.shape, dtype=v.dtype) for v in values)
            by_signature[signature] = _capture(trace, rule.replacement, zeros,
                                               f"{where}: the replacement").graph
        _check_outputs(match, by_signature[signature], where)
        return by_signature[signature]

    replaced = replace_pattern_with_filters(
        exported.graph_module, pattern, None, match_filters=[_tensor_inputs],
        replacement_callback=replacement_for)
    for done in replaced:  # errors in the replacement name the module path of what it replaced
        for node in done.replacements:
            node.meta["nn_module_stack"] = done.anchor.meta.get("nn_module_stack")
    if not replaced:
        ops = ", ".join(str(n.target) for n in pattern.graph.nodes if n.op == "call_function")
        warnings.warn(f"ms_aten: {where} matches nothing in the captured graph (the pattern, "
                      f"captured on {_describe(examples)}: {ops}); a match needs the same ops "
                      f"wired the same way, with equal literal arguments of the same Python "
                      f"type", stacklevel=2)
    return len(replaced)


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _describe(tensors: Sequence[torch.Tensor]) -> str:
    return Signature(tuple(tuple(t.shape) for t in tensors),
                     tuple(t.dtype for t in tensors)).describe()


def _pattern_examples(rule: Rule, where: str) -> tuple[torch.Tensor, ...]:
    if rule.examples is not None:
        return rule.examples
    dtype, shape = DEFAULT_EXAMPLE
    try:
        parameters = inspect.signature(rule.pattern).parameters.values()
    except (TypeError, ValueError):
        parameters = None
    if parameters is None or any(p.kind is p.VAR_POSITIONAL for p in parameters):
        raise TypeError(f"ms_aten: {where}: cannot tell how many inputs the pattern takes; "
                        f"give example inputs: (pattern, replacement, (x, ...))")
    count = sum(1 for p in parameters if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return tuple(torch.zeros(shape, dtype=dtype) for _ in range(count))


def _capture(trace: Trace, fn: Callable, examples: tuple, what: str) -> torch.fx.GraphModule:
    """`fn` captured as the model is, as a graph whose only inputs are its tensor arguments."""
    exported = trace(fn, examples, what)
    signature = exported.graph_signature
    if any(spec.kind != InputKind.USER_INPUT for spec in signature.input_specs):
        raise CaptureError(f"ms_aten: {what} holds tensor constants (torch.tensor(...) or "
                           f"tensors it closes over); it must be a function of its inputs only: "
                           f"pass them as inputs, or write numbers as Python numbers")
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in signature.output_specs):
        raise CaptureError(f"ms_aten: {what} writes its inputs in place; return new tensors")
    return exported.graph_module


def _check_pattern(pattern: torch.fx.GraphModule, where: str) -> None:
    """What SubgraphMatcher needs of a pattern: ops to match, and no input left unused."""
    nodes = list(pattern.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    unused = [str(i + 1) for i, n in enumerate(inputs) if not n.users]
    if unused:
        raise CaptureError(f"ms_aten: {where}: the pattern does not use its input number "
                           f"{', '.join(unused)}; every input must feed one of its ops")
    if not any(n.op == "call_function" for n in nodes):
        raise CaptureError(f"ms_aten: {where}: the pattern holds no op to match")


def _tensor_inputs(match: InternalMatch, *graphs: torch.fx.Graph) -> bool:
    """A pattern input matches a tensor of the model, not a Python number in an op's argument
    (torch.fx lets an input match either)."""
    return all(isinstance(node, torch.fx.Node) and isinstance(node.meta.get("val"), torch.Tensor)
               for node in match.placeholder_nodes)


def _check_outputs(match: InternalMatch, replacement: torch.fx.Graph, where: str) -> None:
    """The replacement returns what the matched nodes returned: as many outputs, each of the
    same shape and dtype."""
    expected = match.returning_nodes
    output = next(n for n in reversed(replacement.nodes) if n.op == "output")
    got = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n for n in output.args[0]]
    if len(got) != len(expected):
        raise CaptureError(f"ms_aten: {where}: the replacement returns {len(got)} outputs, the "
                           f"pattern {len(expected)}")
    for i, (value, node) in enumerate(zip(got, expected, strict=True)):
        want = node.meta["val"]
        if not isinstance(value, torch.Tensor) or (
                tuple(value.shape) != tuple(want.shape) or value.dtype != want.dtype):
            shown = _describe([value]) if isinstance(value, torch.Tensor) else repr(value)
            raise CaptureError(f"ms_aten: {where}: output {i} of the replacement is {shown}, "
                               f"the pattern's (node '{node.name}') is {_describe([want])}")
