// Graphs compiled ahead of time by AOTInductor (ms_aten/programs/compile/compiled.py), run as one
// dispatcher op, so that a compiled program is a program of one node (program.h):
//   ms_aten::compiled(str key, Tensor[] inputs) -> Tensor[]   (and .random, for a random graph)
//   ms_aten::compiled.writes(str key, Tensor[] inputs, Tensor(a!)[] written) -> Tensor[]
// `key` names a model registered here; `inputs` are the captured graph's flat inputs (weights,
// buffers, constants, user inputs, as torch.export lists them) and the results its flat
// outputs (new buffer values, then the user outputs).
// `writes`: an inference graph that updates buffers (a KV cache) writes them in place, in the
// compiled code, instead of returning their new values: `written` are those buffers, left out
// of `inputs` (the `writes` line says where they go among the graph's inputs), and the results
// are the user outputs only. Inference only: under autograd it refuses a gradient by name.
//
// A model holds up to three shared objects:
//   inference  the whole graph, run when autograd is off (InferenceMode, no input requiring
//              grad);
//   forward    AOTAutograd's forward half: the outputs, then the tensors its backward saves;
//   backward   the other half: gradients from the saved tensors and the outputs' gradients.
// Under autograd the op's Autograd kernel runs forward and keeps the saved tensors in its graph
// node; the node's backward runs backward. A model without them refuses a gradient by name.
//
// Its spec (written by compiled.py), one line per entry, '\n'-separated:
//   name <%-escaped name>                 for messages
//   inference <%-escaped path>            a shared object, each line optional
//   forward <%-escaped path> <n_outputs>  its outputs are the graph's n_outputs, then the saved
//   backward <%-escaped path>
//   differentiates <i,i,..>               the inputs the forward/backward pair differentiates
//   tangents <k,k,..>                     the outputs whose gradients the backward takes
//   backward_inputs <s<j>|t<j>,..>        each backward input: saved tensor j, or tangent j
//   gradients <i,i,..>                    the input each backward output is the gradient of
//   writes <i,i,..>                       the graph's inputs that `written` holds, in order
#pragma once

#include <string>

namespace ms_aten {

// Loads a model's shared objects and registers it under `key`; registering a key again
// replaces its model. Throws on a malformed spec or a library that does not load.
void register_compiled(const std::string& key, const std::string& spec);

}  // namespace ms_aten
