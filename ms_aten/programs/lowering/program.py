"""A torch graph captured by torch.export, as one program spec for the bridge
(csrc/program/program.h).

Every node of the exported graph becomes one OpCall of the same spec grammar `ms_aten.op`
uses, with its tensor slots naming values of one table instead of MindSpore's inputs; the
library runs the whole list in one kernel launch, and its VJP in one more.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

from ...native import dtypes
from ...ops import constants as consts
from ...ops.schema import is_written
from ..base import CaptureError, Compiled, Shape, Signature
from ..capture import nodes
from ..capture.rewrite import REPLACED
from . import inplace, symbolic

# The generator state of the launch's device, which the forward of a random program hands to its
# VJP: a buffer of the CPU state's size, the largest (a CUDA state, its seed and offset, fills
# its first 16 bytes; csrc/program/program.cpp, record_rng_state).
RNG_STATE_BYTES = torch.get_rng_state().numel()
# The handle of the autograd graph a forward keeps for its VJP (csrc/program/saved.h).
HANDLE_SHAPE: tuple[int, ...] = (1,)


def _shape(sizes) -> Shape:
    """A meta tensor's shape, None for each symbolic size."""
    return tuple(None if isinstance(n, torch.SymInt) else int(n) for n in sizes)


@dataclass(frozen=True)
class Program:
    """One captured graph: its forward and VJP specs and what the caller needs around them.

    Its inputs are the weights named at build time (a module's parameters and buffers, in
    that order), then the graph's user inputs.
    """

    name: str
    spec: str
    vjp_spec: str
    n_weights: int
    signature: Signature  # of the user inputs, as captured
    input_names: tuple[str, ...]  # of the user inputs, for messages
    output_shapes: tuple[Shape, ...]  # the graph's outputs, without the RNG state
    output_dtypes: tuple[torch.dtype, ...]
    mutations: tuple[str, ...]  # the buffers the program updates in place (inplace.py)
    written: tuple[int, ...]  # their inputs (positions among the weights)
    reinplaced: tuple[str, ...]  # those whose new value the op computing it writes in place
    random: bool  # the forward has one more output, the RNG state its VJP replays
    n_nodes: int
    replaced: int = 0  # matches replace= put the user's replacement in (capture/rewrite.py)
    compiled: Compiled | None = None  # what compile=True built (compile/compiled.py)

    @property
    def dynamic(self) -> bool:
        """Captured with dynamic shapes: one program serves every size its ranges allow."""
        return self.signature.dynamic

    @property
    def n_inputs(self) -> int:
        return self.n_weights + len(self.signature.shapes)

    @property
    def n_outputs(self) -> int:
        return len(self.output_shapes)

    @property
    def n_states(self) -> int:
        """What the forward primitive hands its VJP after the graph's outputs: the RNG state
        (random programs), then the handle of the autograd graph it kept."""
        return int(self.random) + 1

    @property
    def n_results(self) -> int:
        """The forward primitive's outputs: the graph's, then the states."""
        return self.n_outputs + self.n_states

    def result_shapes(self) -> list[list[int]]:
        """The forward primitive's output shapes, for a static capture (a dynamic one's come
        from the library: runtime/family.py, output_shapes)."""
        assert not self.dynamic, "a dynamic capture's shapes depend on its inputs"
        states = [[RNG_STATE_BYTES]] * self.random + [list(HANDLE_SHAPE)]
        return [[int(n) for n in s if n is not None] for s in self.output_shapes] + states

    def result_dtypes(self) -> list[torch.dtype]:
        """The forward primitive's output dtypes: the graph's, then the states'."""
        return [*self.output_dtypes, *[torch.uint8] * self.random, torch.int64]

    def user_signature_of(self, shapes: Sequence[Sequence[int]],
                          ms_dtypes: Sequence[Any]) -> Signature:
        """The Signature of a call's user inputs (all inputs given, weights first)."""
        user = slice(self.n_weights, None)
        return Signature(tuple(tuple(s) for s in shapes[user]),
                         tuple(map(dtypes.to_torch, ms_dtypes[user])))


_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def _returned(value: Any) -> list[Any]:
    """A node's results as the program holds them: tensors (a list flattened) and scalars; None
    for anything else."""
    if isinstance(value, (torch.Tensor, *_SCALARS)):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _returned(item)]
    return [None]


def _largest(graph: torch.fx.Graph) -> int | None:
    """The most elements any tensor of the graph holds (its inputs, every node's results), or
    None where a size is symbolic: the launch holds ATen to one thread for a program whose
    every tensor is below ATen's grain size (the `m` line, csrc/program/program.h)."""
    largest = 0
    for node in graph.nodes:
        for value in _returned(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                numel = value.numel()
                if not isinstance(numel, int):
                    return None
                largest = max(largest, numel)
    return largest


def _holds_node(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_holds_node(v) for v in value)
    return isinstance(value, torch.fx.Node)


def _where(node: torch.fx.Node) -> str:
    """The module path a node came from (nn_module_stack), or ''."""
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


@dataclass(frozen=True)
class _Value:
    """A value of the table that no graph node holds (a view a scatter writes through)."""

    id: int


@dataclass(frozen=True)
class _Split:
    """Where the forward and the VJP differ: the forward writes a buffer in place, the VJP runs
    the functional node."""

    forward: list[str]
    vjp: list[str]


class _Builder:
    """Numbers values and writes the program's lines while walking the graph once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ids: dict[torch.fx.Node, int] = {}
        self.lines: list[str | _Split] = []
        self.writes: dict[torch.fx.Node, inplace.Write] = {}  # by the node computing the value
        self.prologue: list[str] = []  # lines that depend on the inputs' sizes alone
        self.n_values = 0
        self.random = False
        self.sizes = symbolic.Sizes(self.new_value, self.prologue.append)
        self.shapes: list[str] = []  # O lines: the outputs' shapes, from the inputs' sizes

    def new_value(self) -> int:
        self.n_values += 1
        return self.n_values - 1

    def fail(self, node: torch.fx.Node, why: str) -> CaptureError:
        where = _where(node)
        return CaptureError(f"ms_aten: {self.name}: node '{node.name}' ({node.target})"
                            f"{f' in {where}' if where else ''}: {why}")

    def tensor_token(self, node: torch.fx.Node, arg, value) -> str:
        kind = consts.tensor_kind(arg)
        if kind in ("Tensor[]", "Tensor?[]"):
            if not isinstance(value, (list, tuple)):
                raise self.fail(node, f"argument '{arg.name}' expects a tensor list, got {value!r}")
            members = ["_" if v is None else str(self.value_of(node, arg, v)) for v in value]
            if "_" in members and kind == "Tensor[]":
                raise self.fail(node, f"argument '{arg.name}' holds None")
            letter = "U" if is_written(arg) else "T" if kind == "Tensor[]" else "Q"
            return f"{letter}[{','.join(members)}]"
        if value is None:
            if kind != "Tensor?":
                raise self.fail(node, f"argument '{arg.name}' is None")
            return "N"
        if isinstance(value, torch.fx.Node) and not isinstance(value.meta.get("val"),
                                                               torch.Tensor):
            return f"Z{self.value_of(node, arg, value)}"  # a size where torch takes a number
        return f"{'u' if is_written(arg) else 't'}{self.value_of(node, arg, value)}"

    def scalar_token(self, node: torch.fx.Node, arg, value) -> str:
        """A non-tensor argument that reads scalar values: z<j>, or J<..> for an int list."""
        if isinstance(value, torch.fx.Node):
            return f"z{self.value_of(node, arg, value)}"
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, torch.fx.Node | int) and not isinstance(v, bool) for v in value):
            raise self.fail(node, f"argument '{arg.name}' ({arg.real_type}) holds sizes the "
                                  f"program computes, in a form it cannot pass: {value!r}")
        return "J" + ",".join(f"z{self.value_of(node, arg, v)}" if isinstance(v, torch.fx.Node)
                              else str(v) for v in value)

    def scalar(self, node: torch.fx.Node) -> None:
        """A scalar node: a tensor's size, or arithmetic on sizes (csrc/program/scalars.h)."""
        fn = symbolic.scalar_function(node.target)
        assert fn is not None  # build() sends only these here
        if node.kwargs:
            raise self.fail(node, f"keyword arguments {sorted(node.kwargs)} to a scalar function")
        operands = []
        for value in node.args:
            if isinstance(value, torch.fx.Node):
                if value not in self.ids:
                    raise self.fail(node, f"reads {value.name}, which the program does not hold")
                operands.append(f"z{self.ids[value]}")
            else:
                try:
                    operands.append(symbolic.scalar_token(value))
                except TypeError as error:
                    raise self.fail(node, str(error)) from None
        self.ids[node] = vid = self.new_value()
        self.lines.append(" ".join(["z", str(vid), fn, *operands]))

    def value_of(self, node: torch.fx.Node, arg, value) -> int:
        if isinstance(value, _Value):
            return value.id
        if isinstance(value, torch.fx.Node):
            if value not in self.ids:
                raise self.fail(node, f"argument '{arg.name}' reads {value.name}, which is "
                                      f"not a value the program holds")
            return self.ids[value]
        if isinstance(value, (bool, int, float)):  # a Python number in a Tensor slot
            token = consts.encode(_NUMBER_ARG, value)
            vid = self.new_value()
            self.lines.append(f"s {vid} {token}")
            return vid
        raise self.fail(node, f"argument '{arg.name}' got {type(value).__name__} {value!r}")

    def output_shape(self, k: int, node: torch.fx.Node) -> None:
        """Output k's shape from the inputs' sizes; CaptureError for a size that depends on
        tensor values (nonzero, .item())."""
        try:
            sizes = [self.sizes.token(n) for n in node.meta["val"].shape]
        except symbolic.UnboundSize as error:
            raise self.fail(node, f"its shape {list(node.meta['val'].shape)} depends on tensor "
                                  f"values ({error}); MindSpore sizes a program's outputs before "
                                  f"it runs") from None
        except ValueError as error:
            raise self.fail(node, str(error)) from None
        self.shapes.append(f"O {k} {','.join(t[1:] if t[0] == 'i' else t for t in sizes)}"
                           .rstrip())

    def call(self, node: torch.fx.Node) -> None:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            raise self.fail(node, "only ATen/dispatcher ops can run in a program; this is "
                                  f"{type(target).__name__} {target}")
        if any(is_written(a) for a in target._schema.arguments) \
                and not self.writes_buffers(node):
            raise self.fail(node, "the op writes its inputs, which torch.export's "
                                  "functionalization should have removed")
        if torch.Tag.nondeterministic_seeded in target.tags and _draws(node, target):
            self.random = True
        line = self.node_line(node, _STRIDE_FREE.get(target, target), node.args, node.kwargs)
        write = self.writes.get(node)
        if write is None or write.inplace is None:
            self.lines.append(line)
        else:
            self.lines.append(_Split(self.inplace_lines(node, write), [line]))

    def writes_buffers(self, node: torch.fx.Node) -> bool:
        """Whether `node` writes buffers the program updates, and nothing else: the buffers the
        graph gives as their own new values (compile=True's ms_aten.compiled.writes)."""
        written = [v for v in node.all_input_nodes if inplace.writes(node, v)]
        return bool(written) and all(v in self.writes and self.writes[v].value is v
                                     for v in written)

    def inplace_lines(self, node: torch.fx.Node, write: inplace.Write) -> list[str]:
        """The forward's lines for a node whose in-place variant writes its buffer: its result
        is then the buffer itself."""
        assert write.inplace is not None
        result = str(self.ids[node])
        if node.target not in inplace.SCATTER_VIEWS:
            return [self.node_line(node, write.inplace, node.args, node.kwargs, result)]
        # scatter(buffer, src, *view_args): copy_(view(buffer, *view_args), src)
        view = self.new_value()
        kwargs = {k: v for k, v in node.kwargs.items() if k != "src"}
        src = node.kwargs["src"] if "src" in node.kwargs else node.args[1]
        return [self.node_line(node, write.inplace, (node.args[0], *node.args[2:]), kwargs,
                               str(view)),
                self.node_line(node, torch.ops.aten.copy_.default, (_Value(view), src), {}, "_"),
                self.node_line(node, torch.ops.aten.alias.default, (node.args[0],), {}, result)]

    def node_line(self, node: torch.fx.Node, target: torch._ops.OpOverload, args: Sequence,
                  kwargs: Mapping[str, Any], results: str | None = None) -> str:
        """The `n` line calling `target` on these arguments for `node`; `results`: its result
        ids, or None to number the node's results now."""
        schema = target._schema
        tokens = []
        for position, arg in enumerate(schema.arguments):
            if arg.kwarg_only or position >= len(args):
                if arg.name not in kwargs:
                    tokens.append("D")
                    continue
                value = kwargs[arg.name]
            else:
                value = args[position]
            if consts.is_tensor_arg(arg):
                tokens.append(self.tensor_token(node, arg, value))
            elif _holds_node(value):
                tokens.append(self.scalar_token(node, arg, value))
            elif value is not None and _is_device(arg):
                tokens.append(LAUNCH_DEVICE)
            else:
                try:
                    tokens.append(consts.encode(arg, consts.check_constant(arg, value)))
                except consts.ConstantError as error:
                    raise self.fail(node, str(error)) from None
        if results is None:
            results = self.results(node, schema)
        op_spec = " ".join([
            "call", schema.name, schema.overload_name or ".",
            str(len(results.split(",")) if results != "-" else 0), *tokens])
        label = quote(_where(node), safe="") or "-"
        return f"n {results} {label} {op_spec}"

    def results(self, node: torch.fx.Node, schema) -> str:
        """Numbers a node's results: their ids, `_` for one nobody reads, `-` for none."""
        returned = _returned(node.meta.get("val")) if schema.returns else []
        results = [r for r in returned if r is not None]
        if len(results) != len(returned) or (schema.returns and not results):
            raise self.fail(node, f"it returns {', '.join(str(r.type) for r in schema.returns)}"
                                  "; a program node returns tensors or numbers")
        for r in results:
            if isinstance(r, torch.Tensor):
                try:
                    dtypes.to_ms(r.dtype)
                except TypeError as error:
                    raise self.fail(node, str(error)) from None
        # getitem users pick a multi-output node's results; a single result is the node itself.
        picks = {user.args[1]: user for user in node.users if user.target is operator.getitem}
        result_ids = []
        for index in range(len(results)):
            user = node if len(results) == 1 and not picks else picks.get(index)
            if user is None:
                result_ids.append("_")
                continue
            self.ids[user] = self.new_value()
            result_ids.append(str(self.ids[user]))
        return ",".join(result_ids) or "-"


def _draws(node: torch.fx.Node, target: torch._ops.OpOverload) -> bool:
    """Whether a random node's draws can show in what it returns: not when its drop probability
    is the constant 0 (scaled_dot_product_attention's dropout_p in eval mode) or it runs with
    train=False. A program of such nodes carries no RNG state and its backward replays none (on
    a GPU a replay reads the state back to the host, a wait for the stream)."""
    for position, arg in enumerate(target._schema.arguments):
        if arg.name not in ("p", "dropout_p", "train"):
            continue
        if not arg.kwarg_only and position < len(node.args):
            value = node.args[position]
        else:
            value = node.kwargs.get(arg.name, arg.default_value)
        if arg.name == "train" and value is False:
            return False
        if arg.name != "train" and type(value) in (int, float) and value == 0:
            return False
    return True


# Views that hold only for the strides their input had at capture time run as reshape, which is
# the same view where the strides allow one and a copy where they do not: the graph is
# functional, so nothing can tell the two apart. Strides do change at run time: under autograd,
# CPU scaled_dot_product_attention with an attention mask that requires grad (T5's position
# bias) takes the math route, whose output is contiguous, where the fake run's flash route gave
# a (B, S, H, D) layout; the transpose and view after it then fail.
_STRIDE_FREE = {torch.ops.aten.view.default: torch.ops.aten.reshape.default,
                torch.ops.aten._unsafe_view.default: torch.ops.aten.reshape.default}

# A program carries no device of its own: every device torch.export wrote into the graph (the
# capture's, cpu: arange, full, _to_copy, _assert_tensor_metadata, new_zeros, ...) becomes the
# launch's device, that of the buffers MindSpore hands the launch (csrc/op/spec.h, L).
LAUNCH_DEVICE = "L"


def _is_device(arg: torch.Argument) -> bool:
    kind = arg.real_type
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch.DeviceObjType)


# A stand-in schema argument for encoding Python numbers (torch's Scalar).
_NUMBER_ARG = next(a for a in torch.ops.aten.add.Scalar._schema.arguments if a.name == "other")


def _constant_line(vid: int, tensor: torch.Tensor) -> str:
    tensor = tensor.detach().contiguous().cpu()
    shape = ",".join(map(str, tensor.shape))
    data = tensor.view(-1).view(torch.uint8).numpy().tobytes().hex() if tensor.numel() else ""
    return f"k {vid} {dtypes.spec_name(tensor.dtype)} I{shape} {data}".rstrip()


def build(exported: ExportedProgram, name: str, weights: Sequence[str] = (),
          trainable: frozenset[str] = frozenset(),
          aliases: Mapping[str, str] | None = None,
          dim_names: Mapping[tuple[int, int], str] | None = None,
          input_names: Sequence[str] | None = None,
          compiled: Compiled | None = None) -> Program:
    """The program for an exported graph. Its inputs: the parameters and buffers named in
    `weights` (in that order; one the graph does not read is simply unused), then the graph's
    user inputs; lifted tensor constants are embedded in the spec. `aliases` maps the other
    names of tied weights (GPT-2's lm_head.weight) to theirs in `weights`. The VJP
    differentiates the floating user inputs and the `trainable` weights.

    A graph exported with dynamic shapes reads its symbolic sizes from its inputs at launch,
    checks them against torch.export's ranges (`dim_names`: (input, dim) -> the Dim's name,
    `input_names`: the user inputs' names, for messages) and computes its outputs' shapes from
    them (symbolic.py)."""
    builder = _Builder(name)
    position = {target: i for i, target in enumerate(weights)}
    position.update({alias: position[target] for alias, target in (aliases or {}).items()})
    builder.n_values = len(weights)
    graph = exported.graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    user_inputs, constant_nodes = [], []
    for node, spec in zip(placeholders, exported.graph_signature.input_specs, strict=True):
        if spec.kind == InputKind.CONSTANT_TENSOR:
            constant_nodes.append((node, spec))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target in position:
            builder.ids[node] = position[spec.target]
        elif spec.kind == InputKind.USER_INPUT and isinstance(node.meta.get("val"), torch.Tensor):
            builder.ids[node] = builder.new_value()
            user_inputs.append(node)
        elif spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument):
            continue  # use_cache=False, None: torch.export specialized the graph on it
        else:
            raise builder.fail(node, f"input {spec.target or node.name} ({spec.kind.name}) "
                                     f"is not a tensor the program can take")
    for node, spec in constant_nodes:
        builder.ids[node] = vid = builder.new_value()
        builder.lines.append(_constant_line(vid, exported.constants[spec.target]))
    names = tuple(input_names or (n.name for n in user_inputs))
    signature = Signature(tuple(_shape(n.meta["val"].shape) for n in user_inputs),
                          tuple(n.meta["val"].dtype for n in user_inputs))
    if signature.dynamic:
        try:
            builder.sizes.bind_inputs(
                [(builder.ids[n], label, n.meta["val"]) for n, label in zip(user_inputs, names,
                                                                            strict=True)],
                dim_names or {}, exported.range_constraints)
        except ValueError as error:
            raise CaptureError(f"ms_aten: {name}: {error}") from None
    output_node = next(n for n in graph.nodes if n.op == "output")
    specs = exported.graph_signature.output_specs
    buffers = {spec.target: node for node, spec in zip(
        placeholders, exported.graph_signature.input_specs, strict=True)
        if spec.kind == InputKind.BUFFER}
    writes = []
    for value, spec in zip(output_node.args[0], specs, strict=True):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            if spec.target not in position or not isinstance(value, torch.fx.Node):
                raise CaptureError(f"ms_aten: {name} updates buffer {spec.target}, which is "
                                   f"not among its weights")
            writes.append(inplace.plan(spec.target, buffers[spec.target], value))
            builder.writes[value] = writes[-1]
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if symbolic.scalar_function(node.target) is not None:
            builder.scalar(node)
        else:
            builder.call(node)
    output_ids, shapes, out_dtypes, user_outputs = [], [], [], []
    for value, spec in zip(output_node.args[0], specs, strict=True):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            raise CaptureError(f"ms_aten: {name} writes its input {spec.target} in place; "
                               f"MindSpore owns its inputs: return the new value instead")
        if not isinstance(value, torch.fx.Node) or value not in builder.ids:
            raise CaptureError(f"ms_aten: {name} returns {value!r}; a program returns tensors")
        if spec.kind == OutputKind.BUFFER_MUTATION:
            continue  # written into the buffer (inplace.py)
        user_outputs.append(value)
        meta = value.meta["val"]
        if not isinstance(meta, torch.Tensor):
            raise CaptureError(f"ms_aten: {name} returns the number {value.name}; a program "
                               f"returns tensors")
        output_ids.append(str(builder.ids[value]))
        shapes.append(_shape(meta.shape))
        out_dtypes.append(meta.dtype)
        if signature.dynamic:
            builder.output_shape(len(shapes) - 1, value)
        elif None in shapes[-1]:
            raise builder.fail(value, f"its shape {list(meta.shape)} depends on tensor values; "
                                      f"MindSpore sizes a program's outputs before it runs")
    floating = [i for i, node in enumerate(user_inputs) if node.meta["val"].is_floating_point()]
    grad_inputs = [position[t] for t in weights if t in trainable]
    grad_inputs += [len(weights) + i for i in floating]
    if not output_ids:
        raise CaptureError(f"ms_aten: {name} returns no tensor; a program returns tensors")
    # The forward needs the differentiated inputs too: a recording forward makes them leaves.
    tail = [f"o {','.join(output_ids)}", *builder.shapes,
            f"g {','.join(map(str, grad_inputs))}"]
    largest = _largest(graph)
    if largest is not None:
        tail.append(f"m {largest}")
    if writes:
        exact = inplace.exact(writes, user_outputs)
        tail.append(f"w {int(exact)} {quote(','.join(w.buffer for w in writes), safe='')}")
    forward = [line for entry in builder.lines
               for line in (entry.forward if isinstance(entry, _Split) else [entry])]
    vjp = [line for entry in builder.lines
           for line in (entry.vjp if isinstance(entry, _Split) else [entry])]
    # The buffers no node writes in place take their new values after the program.
    copies = [f"c {position[w.buffer]} {builder.ids[w.value]}" for w in writes
              if w.inplace is None]
    n_inputs = len(weights) + len(user_inputs)
    header = f"{quote(name, safe='')} {n_inputs} {builder.n_values} {int(builder.random)}"
    program = Program(
        name=name,
        spec="\n".join([f"program call {header}", *builder.prologue, *forward, *copies, *tail]),
        vjp_spec="\n".join([f"program vjp {header}", *builder.prologue, *vjp, *tail]),
        n_weights=len(weights),
        signature=signature, input_names=names,
        output_shapes=tuple(shapes), output_dtypes=tuple(out_dtypes),
        mutations=tuple(w.buffer for w in writes),
        written=tuple(position[w.buffer] for w in writes),
        reinplaced=tuple(w.buffer for w in writes if w.inplace is not None),
        random=builder.random,
        n_nodes=sum(1 for line in forward if line.startswith("n ")),
        replaced=exported.graph_module.meta.get(REPLACED, 0),
        compiled=compiled)
    # The custom autograd.Functions and opaque regions its nodes run live as long as the program.
    nodes.own(program, exported.graph_module)
    return program
