"""A captured program as a MindSpore Cell: what TorchModule and TorchFunction share."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mindspore import Tensor, nn

from ...native import dtypes
from ...ops.primitive import graph_mode
from ..base import Signature
from ..capture.structure import LEAVES, Inputs, Node, build, check_call, pick
from ..lowering.program import Program
from .primitive import AtenFunction


class ProgramCell(nn.Cell):
    """Runs a program's forward primitive (AtenFunction) on the Cell's weights, if any, and its
    inputs, and returns the graph's outputs alone, in the structure the torch code returned
    them (structure.build: a ModelOutput or dict as a dict by field name, tuples and lists
    nested as they were, a lone tensor as a Tensor): not the states the primitive hands its
    backward (the RNG state, the kept graph's handle).

    A call gives the inputs as the capture did, by position or by keyword, nested as they were
    (structure.Inputs): from Python they are matched with torch's pytree and the compiled graph
    takes the flat tensors; inside another Cell's graph, construct picks them by their
    positions, keywords and keys (tuples, lists, dicts), in graph syntax.

    A capture with dynamic shapes declares its dynamic sizes to MindSpore (set_inputs with None
    there, for the flat tensors), so GRAPH mode compiles `cell(x)` once for every size; and a
    GRAPH-mode call's sizes are checked against their ranges before the compiled graph runs.
    """

    _weight_shapes: list[list[int]] = []  # a module's Parameters' shapes, before the inputs

    def _take(self, inputs: Inputs) -> None:
        """The structure of the Cell's inputs; construct reads the constant tuples."""
        self._inputs = inputs
        self._sources = inputs.sources
        self._keywords = inputs.keywords
        self._n_positions = inputs.n_positions
        self._constants = inputs.constants
        self._owner = inputs.owner
        self._expected = inputs.expected

    def _use(self, function: AtenFunction, nodes: tuple[Node, ...]) -> None:
        """Runs `function` from now on; its outputs nest as `nodes` (structure.output_nodes)
        says."""
        program = function.program
        self._function = function
        self._n_outputs = program.n_outputs
        self._nodes = nodes
        if program.dynamic:
            self.set_inputs(*[Tensor(shape=list(shape), dtype=dtypes.to_ms(dtype))
                              for shape, dtype in zip(program.signature.shapes,
                                                      program.signature.dtypes, strict=True)])

    @property
    def program(self) -> Program:
        """The program the Cell runs (a module's: in its current mode)."""
        return self._function.program

    @property
    def primitive(self) -> AtenFunction:
        """The forward primitive the Cell calls."""
        return self._function

    def __call__(self, *args, **kwargs):
        # A call from Python (PYNATIVE, or GRAPH mode outside any graph; a graph around the Cell
        # compiles construct without calling this): torch's pytree matches the arguments to the
        # capture's, and construct takes the flat tensors, which is also the form set_inputs
        # declares for a dynamic capture.
        # The outputs come back flat and nest here: a dict among a compiled graph's own outputs
        # makes MindSpore 2.10 type them Any, and recompile the program's kernel where it cannot.
        leaves = self._inputs.flatten(args, kwargs)
        self._check_inputs(leaves)
        if graph_mode():
            run = self.construct if self._runs_directly() else super().__call__
            return build(self._nodes, run(*leaves, **{LEAVES: True}))
        if not kwargs and len(leaves) == len(args) and all(
                a is b for a, b in zip(leaves, args, strict=True)):
            # Inputs that are already the flat tensors go to construct as they came:
            # PYNATIVE's ms.grad(cell) finds its recording by the Cell's own arguments.
            return super().__call__(*args)
        return build(self._nodes, super().__call__(*leaves, **{LEAVES: True}))

    def _runs_directly(self) -> bool:
        """Whether a GRAPH-mode call from Python runs construct at once, as PYNATIVE does,
        rather than through a graph MindSpore compiles: that graph would hold the one
        primitive, which the fast path launches for a fraction of the compiled graph's call
        (GPT-2 tiny's forward: 314 against 557 us); the kernel and its results are the same.
        Not where MindSpore's Cell.__call__ adds work around construct (hooks, amp's casts,
        shard, recompute: the attributes its own PYNATIVE call tests), nor where the user
        declared unknown sizes (set_inputs) for a static capture, which MindSpore's compile
        refuses by name, nor where the primitive takes Custom's route (primitive.direct). A
        graph around the Cell (ms.jit, value_and_grad, another Cell) compiles it as before."""
        return self._function.direct() and not (
            self._forward_pre_hook or self._forward_hook or self._backward_pre_hook
            or self._backward_hook or self._shard_fn or self._recompute_cell
            or self.mixed_precision_type
            or (self._dynamic_shape_inputs is not None and not self.program.dynamic))

    def _check_inputs(self, leaves: Sequence[object], owner: str = "") -> None:
        """TypeError naming the input and what the program takes, for an input that is not a
        MindSpore Tensor (a numpy array), or, for a dynamic capture, of another rank or dtype:
        in the same words in both modes, before MindSpore's call (a static capture takes other
        shapes and dtypes by capturing again)."""
        owner = owner or self._owner
        program = self.program
        for name, value, shape, dtype in zip(program.input_names, leaves,
                                             program.signature.shapes, program.signature.dtypes,
                                             strict=False):
            if not isinstance(value, Tensor):
                kind = type(value).__qualname__
                if type(value).__module__ != "builtins":
                    kind = f"{type(value).__module__}.{kind}"
                raise TypeError(f"{owner}: input '{name}' is a {kind}, where the program takes a "
                                f"MindSpore Tensor {_takes(shape, dtype)}")
            if program.dynamic and (len(value.shape) != len(shape)
                                    or value.dtype != dtypes.to_ms(dtype)):
                got = f"{_dtype_name(value.dtype)}{list(value.shape)}"
                raise TypeError(f"{owner}: input '{name}' is {got}, where the program takes "
                                f"{_takes(shape, dtype)}")

    def extend_repr(self) -> str:
        """MindSpore's repr(cell): the inputs as captured and what runs (TorchModule adds its
        modes and the torch module's own repr)."""
        program = self.program
        inputs = ", ".join(f"{name}: {Signature((shape,), (dtype,)).describe()}" for name, shape,
                           dtype in zip(program.input_names, program.signature.shapes,
                                        program.signature.dtypes, strict=True))
        runs = "AOTInductor's compiled code" if program.compiled else \
            f"{program.n_nodes} ATen call{'s' * (program.n_nodes != 1)}"
        return f"inputs: {inputs}\nruns: {runs} in one launch"

    def _leaves(self, args, kwargs):
        """The program's user inputs from construct's arguments."""
        if kwargs.get(LEAVES, False):
            return args
        check_call(args, kwargs, self._keywords, self._n_positions, self._constants,
                   self._owner, self._expected)
        return [pick(args, kwargs, source, self._owner, self._expected)
                for source in self._sources]

    def _check_construct_args(self, *args) -> None:
        # MindSpore's check of a GRAPH-mode call, right before the compiled graph runs: a size
        # outside a dynamic capture's range is refused here, not by the kernel, whose error
        # would leave the compiled graph unable to run again (MindSpore 2.10 keeps a graph's
        # failure: "An error occurred in the previous step").
        super()._check_construct_args(*args)
        if self.program.dynamic and all(isinstance(x, Tensor) for x in args):
            self._function.check_count(len(self._weight_shapes) + len(args))
            self._function.output_shapes([*self._weight_shapes, *(list(x.shape) for x in args)])

    def _outputs(self, results, kwargs):
        """The graph's outputs among the primitive's results: flat for a call from Python
        (__call__ nests them), in their structure for one inside another graph."""
        outputs = results[:self._n_outputs]
        if kwargs.get(LEAVES, False):
            return outputs
        return build(self._nodes, outputs)


def _takes(shape: Any, dtype: Any) -> str:
    """What the program takes for one input, for an error (made only then: it costs ~10 us)."""
    return Signature((shape,), (dtype,)).describe()


def _dtype_name(dtype: Any) -> str:
    try:
        return dtypes.spec_name(dtype)
    except TypeError:  # a MindSpore dtype torch lacks
        return str(dtype)


def call(function: AtenFunction, weights: tuple, inputs: tuple):
    """function(*weights, *inputs), for a construct (graph syntax): a primitive called with
    starred arguments in construct itself (`self.op(*args)`, `self.op(*self.weights, x)`) makes
    MindSpore 2.10's GRAPH mode keep the Cell alive for the process's life, a MindSpore Cell as
    much as ours; called here, from a function the tuples are passed to, it is freed."""
    return function(*weights, *inputs)


def _opaque_to_rewrite() -> None:
    """MindSpore's rewrite (amp's O1) turns each Cell's construct into a tree of MindSpore
    calls and executes its source again as a module of its own; a ProgramCell's construct calls
    one primitive and nothing to rewrite, so it is a leaf there, as SequentialCell is (rewrite's
    list of leaves has no public API in MindSpore 2.10)."""
    try:
        from mindspore.rewrite.common import namespace
    except ImportError:
        return
    leaves = getattr(namespace, "_subtree_black_list", None)
    if isinstance(leaves, list) and ProgramCell not in leaves:
        leaves.append(ProgramCell)


_opaque_to_rewrite()
