"""A captured program as a MindSpore Cell: what TorchModule and TorchFunction share."""
from __future__ import annotations

from mindspore import Tensor, nn

from ..native import dtypes
from .primitive import AtenFunction
from .program import Program


class ProgramCell(nn.Cell):
    """Runs a program's forward primitive (AtenFunction) on the Cell's weights, if any, and its
    inputs, and returns the graph's outputs alone (a Tensor when there is one): not the states
    the primitive hands its backward (the RNG state, the kept graph's handle).

    A capture with dynamic shapes declares its dynamic sizes to MindSpore (set_inputs with None
    there), so GRAPH mode compiles `cell(x)` once for every size; and a GRAPH-mode call's sizes
    are checked against their ranges before the compiled graph runs.
    """

    _weight_shapes: list[list[int]] = []  # a module's Parameters' shapes, before the inputs

    def _use(self, function: AtenFunction) -> None:
        """Runs `function` from now on."""
        program = function.program
        self._function = function
        self._n_outputs = program.n_outputs
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

    def _check_construct_args(self, *args) -> None:
        # MindSpore's check of a GRAPH-mode call, right before the compiled graph runs: a size
        # outside a dynamic capture's range is refused here, not by the kernel, whose error
        # would leave the compiled graph unable to run again (MindSpore 2.10 keeps a graph's
        # failure: "An error occurred in the previous step").
        super()._check_construct_args(*args)
        if self.program.dynamic and all(isinstance(x, Tensor) for x in args):
            self._function.check_count(len(self._weight_shapes) + len(args))
            self._function.output_shapes([*self._weight_shapes, *(list(x.shape) for x in args)])

    def _outputs(self, results):
        """The graph's outputs among the primitive's results."""
        if self._n_outputs == 1:
            return results[0]
        return results[:self._n_outputs]
