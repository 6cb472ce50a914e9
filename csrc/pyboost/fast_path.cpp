// The PYNATIVE fast path of ms_aten: a MindSpore CustomOpBuilder (pyboost) module that runs any
// libms_aten.so kernel through MindSpore's PyNative pipeline instead of ops.Custom(aot).
//
// Built by ms_aten/native/pyboost_build.py with MindSpore's flags, so with
// -D_GLIBCXX_USE_CXX11_ABI=0, while libms_aten.so uses torch's new ABI: the two meet only through
// the plain-C API of bridge_abi.h (pointers, ints and C strings), never through std::string or
// torch types.
//
// Python API (module built as ms_aten_fast_path):
//   mindspore_version: str              the MindSpore it was compiled against
//   Kernel(spec: str, name: str)        one libms_aten kernel (forward or VJP spec);
//                                       .name, .uses_out (launches go through its out= overload)
//   Outputs(shapes, dtypes, single)     the output tensors of one call: shapes, dtype names
//   run(forward, vjp, inputs, outputs)  -> Tensor (single) or tuple of Tensors
//   adopt(vjp, inputs, outputs, single) -> the same, for outputs computed already
//   run_program(call, tape, vjp, inputs, outputs, n_states, written)
//                                       a whole program (csrc/program/program.h): `call`
//                                       without autograd, else `tape`, which keeps its autograd
//                                       graph for `vjp` in a slot the autograd node owns
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "include/pynative/backward/function.h"
#include "include/utils/pynative/grad_state.h"
#include "ms_extension.h"

#include "boundary/bridge_abi.h"
#include "boundary/dtype_table.h"

namespace ms_aten_fast {
namespace {

namespace py = pybind11;
namespace autograd = mindspore::pynative::autograd;
using mindspore::TypeId;
using mindspore::tensor::TensorPtr;
using TensorPtrList = std::vector<TensorPtr>;

// MindSpore's TypeIds and the dtype names libms_aten.so reads, from the one table.
constexpr std::pair<TypeId, const char*> kDtypes[] = {
#define MS_ATEN_DTYPE_ENTRY(name, aten, mindspore) {TypeId::mindspore, name},
    MS_ATEN_DTYPES(MS_ATEN_DTYPE_ENTRY)
#undef MS_ATEN_DTYPE_ENTRY
};

const char* dtype_name(TypeId type) {
  for (const auto& [id, name] : kDtypes) {
    if (id == type) return name;
  }
  throw std::invalid_argument("ms_aten: MindSpore dtype (TypeId " +
                              std::to_string(static_cast<int>(type)) + ") has no ATen equivalent");
}

TypeId type_id(const std::string& dtype) {
  for (const auto& [id, name] : kDtypes) {
    if (dtype == name) return id;
  }
  throw std::invalid_argument("ms_aten: unsupported dtype name '" + dtype + "'");
}

// One libms_aten.so kernel. Held by shared_ptr: a launch still queued in MindSpore's pipeline
// and an autograd node waiting for its backward both keep it alive after the Python op is gone.
class Kernel {
 public:
  // name: for messages; empty takes libms_aten's ("aten::mm (second-order backward)").
  Kernel(const std::string& spec, std::string name)
      : handle_(ms_aten_kernel_create(spec.c_str(), nullptr)), spec_(spec), name_(std::move(name)) {
    // create() never throws; a spec it cannot decode yields a kernel that fails at launch with
    // the reason, so only an allocation failure gives NULL.
    if (handle_ == nullptr) throw std::runtime_error("ms_aten: cannot create kernel " + spec);
    if (name_.empty()) name_ = ms_aten_kernel_name(handle_);
  }
  ~Kernel() { ms_aten_kernel_destroy(handle_); }
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  const std::string& name() const { return name_; }
  // Whether launches write through the op's out= overload (csrc/launch/kernel.h).
  bool uses_out() const { return ms_aten_kernel_uses_out(handle_) == 1; }

  // For a VJP kernel (spec "vjp[k] ..."): the VJP of this VJP (spec "vjp<k+1> ..."), built on
  // first use, so a chain of backwards is only as long as the gradients taken. A program's VJP
  // ("family vjp ...") has one, "family vjp2 ..."; that one has none.
  std::shared_ptr<const Kernel> next_order() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!next_) {
      const std::string program_vjp = "family vjp ";
      if (spec_.rfind(program_vjp, 0) == 0) {
        next_ = std::make_shared<const Kernel>(
            "family vjp2 " + spec_.substr(program_vjp.size()),
            name_.substr(0, name_.rfind(" (backward)")) + " (second-order backward)");
        return next_;
      }
      if (spec_.rfind("family ", 0) == 0) {
        throw std::runtime_error(
            "ms_aten: " + name_ +
            ": gradients of order 3 through a whole program are not supported; build the "
            "function from ms_aten.op calls, which differentiate to any order");
      }
      const size_t space = spec_.find(' ');
      const std::string kind = spec_.substr(0, space);
      if (kind.rfind("vjp", 0) != 0 || space == std::string::npos) {
        throw std::logic_error("ms_aten: " + name_ + " is not a backward kernel");
      }
      const int order = kind.size() == 3 ? 1 : std::stoi(kind.substr(3));
      next_ = std::make_shared<const Kernel>(
          "vjp" + std::to_string(order + 1) + spec_.substr(space), "");
    }
    return next_;
  }

  // Runs in MindSpore's device task (see AtenRunner) once every buffer is allocated. Throws
  // std::runtime_error with libms_aten's message ("ms_aten: <op>: <reason>"); MindSpore
  // re-raises it in Python at the next sync point, as it does for its own kernels.
  // `saved`: a program's kept autograd graph (csrc/program/saved.h), which a forward of kind
  // tape fills and its VJP takes; nullptr for every other kernel.
  void launch(const std::vector<ms::Tensor>& inputs, const std::vector<ms::Tensor>& outputs,
              void** saved = nullptr) const {
    const size_t n = inputs.size() + outputs.size();
    std::vector<void*> params;
    std::vector<int> ndims;
    std::vector<int64_t*> shapes;
    std::vector<const char*> dtypes;
    params.reserve(n);
    ndims.reserve(n);
    shapes.reserve(n);
    dtypes.reserve(n);
    for (const auto* group : {&inputs, &outputs}) {
      for (const ms::Tensor& t : *group) {
        params.push_back(t.GetDataPtr());
        ndims.push_back(static_cast<int>(t.shape().size()));
        // The C API takes int64_t** but only reads the shapes.
        shapes.push_back(const_cast<int64_t*>(t.shape().data()));
        dtypes.push_back(dtype_name(t.data_type()));
      }
    }
    char error[4096];
    const int status =
        saved == nullptr
            ? ms_aten_kernel_launch(handle_, static_cast<int>(n), params.data(), ndims.data(),
                                    shapes.data(), dtypes.data(), error, sizeof(error))
            : ms_aten_kernel_launch_saved(handle_, static_cast<int>(n), params.data(), ndims.data(),
                                          shapes.data(), dtypes.data(), saved, error,
                                          sizeof(error));
    if (status != 0) throw std::runtime_error(error);
  }

 private:
  void* handle_;
  std::string spec_;
  std::string name_;
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const Kernel> next_;
};
using KernelPtr = std::shared_ptr<const Kernel>;

// The output tensors of one call, built once per input signature on the Python side (from
// AtenOp.infer) and reused: converting nested lists on every call would cost more than the call.
struct Outputs {
  Outputs(const std::vector<mindspore::ShapeVector>& shapes, const std::vector<std::string>& dtypes,
          bool single)
      : shapes(shapes), single(single) {
    if (shapes.size() != dtypes.size() || shapes.empty() || (single && shapes.size() != 1)) {
      throw std::invalid_argument(
          "ms_aten: Outputs needs one dtype per shape, at least one, "
          "and exactly one when single");
    }
    for (const auto& dtype : dtypes) types.push_back(type_id(dtype));
  }
  std::vector<mindspore::ShapeVector> shapes;
  std::vector<TypeId> types;
  bool single;  // return the lone output as a Tensor, not a 1-tuple (AtenOp.__infer__'s rule)
};
using OutputsPtr = std::shared_ptr<const Outputs>;

// A program's kept autograd graph between its forward and its VJP: the autograd node owns it,
// so the graph goes when the node goes, whether or not the backward ran.
class SavedSlot {
 public:
  SavedSlot() = default;
  ~SavedSlot() { ms_aten_saved_free(graph_); }
  SavedSlot(const SavedSlot&) = delete;
  SavedSlot& operator=(const SavedSlot&) = delete;
  void** get() { return &graph_; }

 private:
  void* graph_ = nullptr;
};
using SlotPtr = std::shared_ptr<SavedSlot>;

class AtenRunner final : public ms::pynative::PyboostRunner {
 public:
  AtenRunner(KernelPtr kernel, SlotPtr slot)
      : PyboostRunner(kernel->name()), kernel_(std::move(kernel)), slot_(std::move(slot)) {}
  void LaunchKernel() override {
    kernel_->launch(inputs(), outputs(), slot_ ? slot_->get() : nullptr);
  }

 protected:
  // Launch inside the device task, right after the buffers are allocated. The default queues
  // the launch on the separate launch thread, but MindSpore's native CPU kernels launch in the
  // device task itself: a native op queued after this one could then read our outputs before
  // they are written (and we its outputs), which tests/test_fast_path.py's chain tests caught.
  void _DispatchLaunchTask() override { LaunchKernel(); }

 private:
  KernelPtr kernel_;
  SlotPtr slot_;
};

// Allocates the outputs and queues the kernel (memory, then launch) in MindSpore's pipeline.
std::vector<ms::Tensor> launch(const KernelPtr& kernel, const std::vector<ms::Tensor>& inputs,
                               const std::vector<mindspore::ShapeVector>& shapes,
                               const std::vector<TypeId>& types, const SlotPtr& slot = nullptr) {
  // libms_aten reads dense buffers, but a PyNative view (transpose, ...) arrives strided and
  // PyboostRunner::Run does not copy it: queue MindSpore's own contiguous op first.
  std::vector<ms::Tensor> dense;
  dense.reserve(inputs.size());
  for (const ms::Tensor& x : inputs) dense.push_back(x.is_contiguous() ? x : x.contiguous());
  std::vector<ms::Tensor> outputs;
  outputs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) outputs.emplace_back(types[i], shapes[i]);
  std::make_shared<AtenRunner>(kernel, slot)->Run(dense, outputs);
  return outputs;
}

TensorPtrList tensor_ptrs(const std::vector<ms::Tensor>& tensors) {
  TensorPtrList ptrs;
  ptrs.reserve(tensors.size());
  for (const ms::Tensor& t : tensors) ptrs.push_back(t.tensor());
  return ptrs;
}

// ---- autograd -----------------------------------------------------------------------------

// MS_DECLARE_PARENT names this helper unqualified.
using mindspore::ConstStringHash;

// Carries what the backward needs from the forward through AutogradContext::saved_data, the
// only per-node storage MindSpore's Function interface gives a static Backward: the VJP kernel;
// how many of the forward's last outputs it takes as they are (a program's states: the RNG
// state, the kept graph's handle); how many of the forward's last inputs have no gradient (those
// states again, where the forward is a program's VJP); and a program's kept graph.
class BackwardValue final : public mindspore::Value {
 public:
  BackwardValue(KernelPtr vjp, size_t n_states, size_t n_passive, SlotPtr slot)
      : vjp_(std::move(vjp)), n_states_(n_states), n_passive_(n_passive), slot_(std::move(slot)) {}
  MS_DECLARE_PARENT(BackwardValue, Value)
  bool operator==(const mindspore::Value& other) const override { return this == &other; }
  const KernelPtr& vjp() const { return vjp_; }
  size_t n_states() const { return n_states_; }
  size_t n_passive() const { return n_passive_; }
  const SlotPtr& slot() const { return slot_; }

 private:
  KernelPtr vjp_;
  size_t n_states_;
  size_t n_passive_;
  SlotPtr slot_;
};
constexpr char kBackwardKey[] = "ms_aten_backward";

TensorPtrList apply_with_grad(const KernelPtr& forward, const KernelPtr& vjp,
                              const std::vector<ms::Tensor>& inputs,
                              const std::vector<mindspore::ShapeVector>& shapes,
                              const std::vector<TypeId>& types, size_t n_passive = 0);

// Backward = the node's VJP kernel (csrc/op/grad.h): inputs are the node's forward inputs, then one
// gradient per forward output; outputs are one gradient per forward input, shaped and typed like
// it. The same holds at every order: a node whose forward is itself a VJP kernel has the next
// order's VJP as its backward. A program's VJP (csrc/program/program.h) takes the forward's
// last outputs, its states, as they are instead of their gradients, and its kept graph; the
// program's second-order VJP gives no gradient for those states, inputs of the VJP.
struct AtenFunction {
  static TensorPtrList Backward(autograd::AutogradContext* ctx, TensorPtrList grad_outputs) {
    const TensorPtrList saved = ctx->GetSavedTensors();  // the inputs, then the states
    const auto* backward = ctx->saved_data.at(kBackwardKey)->cast_ptr<BackwardValue>();
    const KernelPtr& vjp = backward->vjp();
    const size_t n_states = backward->n_states();
    const size_t n_inputs = saved.size() - n_states;
    const size_t n_grads = n_inputs - backward->n_passive();  // the gradients the VJP returns
    std::vector<ms::Tensor> inputs;
    std::vector<mindspore::ShapeVector> shapes;
    std::vector<TypeId> types;
    for (size_t i = 0; i < n_inputs; ++i) {
      inputs.emplace_back(saved[i]);
      if (i >= n_grads) continue;
      shapes.push_back(saved[i]->shape());
      types.push_back(saved[i]->data_type());
    }
    for (size_t j = 0; j + n_states < grad_outputs.size(); ++j) {
      // Materialized grads are the default (SetMaterializeGrads is never turned off).
      if (grad_outputs[j] == nullptr) {
        throw std::runtime_error("ms_aten: " + vjp->name() + ": missing output gradient");
      }
      inputs.emplace_back(grad_outputs[j]);
    }
    for (size_t i = n_inputs; i < saved.size(); ++i) inputs.emplace_back(saved[i]);
    // MindSpore's autograd engine runs every backward under RequireGradGuard(create_graph): set
    // exactly while this backward is itself differentiated (ms.grad of ms.grad), and restored
    // when the backward ends, even by an exception. GradState, which MindSpore can leave set
    // after an exception inside ms.grad, says nothing about this backward.
    TensorPtrList grads;
    if (mindspore::kernel::pyboost::OpRunStatus::Get().RequireGrad()) {
      // The VJP itself recorded, for a higher order: it recomputes (a kept graph is not
      // differentiable), and its own inputs' states get no gradient.
      grads = apply_with_grad(vjp, vjp->next_order(), inputs, shapes, types, n_states);
    } else {
      grads = tensor_ptrs(launch(vjp, inputs, shapes, types, backward->slot()));
    }
    grads.resize(n_inputs, nullptr);  // no gradient for passive inputs
    return grads;
  }
};

// Function<AtenFunction>::Apply with a run-time number of tensor inputs: Apply takes them as a
// C++ parameter pack, but an ATen op's input count (a Tensor[] above all) is known only at call
// time. The steps are Apply's own (include/pynative/backward/function.h), in its order;
// `produce` makes the outputs (launches the forward, or hands over ones computed already). The
// last `n_states` outputs are saved for the backward as they are; `slot`, a program's kept
// graph, goes with the node.
TensorPtrList record_with_grad(const std::string& name, const KernelPtr& vjp,
                               const std::vector<ms::Tensor>& inputs,
                               const std::function<TensorPtrList()>& produce, size_t n_states = 0,
                               size_t n_passive = 0, const SlotPtr& slot = nullptr) {
  const TensorPtrList input_ptrs = tensor_ptrs(inputs);
  auto node = std::make_shared<autograd::CppFunctionNode<AtenFunction>>("ms_aten[" + name + "]");
  for (const TensorPtr& x : input_ptrs) {
    x->set_need_pipeline_sync(true);
    node->is_tensor_input_.push_back(true);
  }
  autograd::PrepareForForward();
  TensorPtrList output_ptrs;
  {
    mindspore::kernel::pyboost::RequireGradGuard no_grad(false);
    output_ptrs = produce();
    TensorPtrList saved = input_ptrs;
    saved.insert(saved.end(), output_ptrs.end() - static_cast<std::ptrdiff_t>(n_states),
                 output_ptrs.end());
    node->context_.SaveForBackward(saved);
    node->context_.saved_data[kBackwardKey] =
        std::make_shared<BackwardValue>(vjp, n_states, n_passive, slot);
  }
  mindspore::abstract::AbstractBasePtrList abstracts;
  abstracts.reserve(output_ptrs.size());
  for (const TensorPtr& y : output_ptrs) {
    auto abstract = y->ToAbstract();
    abstract->set_value(mindspore::kValueAny);
    abstracts.push_back(abstract);
  }
  node->SetContextBackwardNode(node);
  node->outputs_abstract_ = std::move(abstracts);
  node->SetOutputSize(output_ptrs.size());
  // Declared only as AutogradContext's friend, so found by argument-dependent lookup.
  CppFunctionDoGrad(&node->context_, input_ptrs, &output_ptrs);
  return output_ptrs;
}

TensorPtrList apply_with_grad(const KernelPtr& forward, const KernelPtr& vjp,
                              const std::vector<ms::Tensor>& inputs,
                              const std::vector<mindspore::ShapeVector>& shapes,
                              const std::vector<TypeId>& types, size_t n_passive) {
  return record_with_grad(
      forward->name(), vjp, inputs,
      [&] { return tensor_ptrs(launch(forward, inputs, shapes, types)); }, 0, n_passive);
}

// ---- Python entry -------------------------------------------------------------------------

py::object wrap(const TensorPtrList& tensors, bool single) {
  if (single) return py::reinterpret_steal<py::object>(mindspore::tensor::Wrap(tensors[0]));
  return py::reinterpret_steal<py::object>(mindspore::tensor::Wrap(tensors));
}

// Without autograd: PyboostRunner::Call's pipeline, with a run-time output count. The caller
// gets placeholder tensors at once; MindSpore's frontend thread allocates and queues the kernel
// and then fulfils the placeholders (or hands them the exception).
py::object run_async(const KernelPtr& forward, const std::vector<ms::Tensor>& inputs,
                     const OutputsPtr& outputs) {
  auto py_outputs = mindspore::tensor::MakeVector<false>(outputs->shapes.size());
  auto promises = mindspore::tensor::TransformVectorPromise(py_outputs);
  mindspore::pynative::DispatchOp(std::make_shared<mindspore::pynative::PassthroughFrontendTask>(
      [forward, inputs, outputs, promises]() {
        for (const ms::Tensor& x : inputs) x.ConvertStubNodeToTensor();
        const auto results = launch(forward, inputs, outputs->shapes, outputs->types);
        mindspore::tensor::SetPromise(promises, tensor_ptrs(results));
      },
      [promises]() { mindspore::tensor::SetException(promises); }));
  // Each placeholder holds one new reference; the returned object takes it over.
  if (outputs->single) return py::reinterpret_steal<py::object>(py_outputs[0].value());
  return py::reinterpret_steal<py::object>(mindspore::tensor::TransformVectorOutput(py_outputs));
}

// pybind11 holds the Python objects by shared_ptr<T>; const-ness is added here.
py::object run(const std::shared_ptr<Kernel>& forward, const std::shared_ptr<Kernel>& vjp,
               const std::vector<ms::Tensor>& inputs, const std::shared_ptr<Outputs>& outputs) {
  if (!forward || !vjp || !outputs) throw std::invalid_argument("ms_aten: run() got None");
  // Only a call that autograd records needs the Function node (and the synchronous frontend
  // work it implies); a plain call takes the cheaper asynchronous pipeline.
  if (mindspore::pynative::GradState::Get().RequiresGrad()) {
    for (const ms::Tensor& x : inputs) x.ConvertStubNodeToTensor();
    return wrap(apply_with_grad(forward, vjp, inputs, outputs->shapes, outputs->types),
                outputs->single);
  }
  return run_async(forward, inputs, outputs);
}

// An op whose outputs were computed already, from its inputs' values
// (ms_aten/ops/value_dependent.py: nonzero, masked_select, ...): records `vjp` as their backward
// when autograd records this call.
py::object adopt(const std::shared_ptr<Kernel>& vjp, const std::vector<ms::Tensor>& inputs,
                 const std::vector<ms::Tensor>& outputs, bool single) {
  if (!vjp || outputs.empty() || (single && outputs.size() != 1)) {
    throw std::invalid_argument("ms_aten: adopt() needs a VJP kernel and the op's outputs");
  }
  if (!mindspore::pynative::GradState::Get().RequiresGrad()) {
    return wrap(tensor_ptrs(outputs), single);
  }
  for (const ms::Tensor& x : inputs) x.ConvertStubNodeToTensor();
  return wrap(record_with_grad(vjp->name(), vjp, inputs, [&] { return tensor_ptrs(outputs); }),
              single);
}

// A whole program (csrc/program/program.h): `call` when autograd does not record (it keeps
// nothing), else `tape`, which keeps its autograd graph in a slot that the autograd node owns,
// for `vjp` to take; the last `n_states` outputs (the RNG state, the handle) go to the VJP as
// they are. The program writes the inputs `written` (buffers it updates, Parameters) in place.
py::object run_program(const std::shared_ptr<Kernel>& call, const std::shared_ptr<Kernel>& tape,
                       const std::shared_ptr<Kernel>& vjp, const std::vector<ms::Tensor>& inputs,
                       const std::shared_ptr<Outputs>& outputs, size_t n_states,
                       const std::vector<size_t>& written) {
  if (!call || !tape || !vjp || !outputs || outputs->shapes.size() <= n_states) {
    throw std::invalid_argument("ms_aten: run_program() needs three kernels and the outputs");
  }
  // As MindSpore's own in-place ops do: a backward that saved one of them before this write
  // (a MindSpore op that read the Parameter) then fails its version check instead of reading
  // the new values.
  for (const size_t i : written) inputs.at(i).tensor()->BumpVersion();
  if (!mindspore::pynative::GradState::Get().RequiresGrad()) {
    return run_async(call, inputs, outputs);
  }
  for (const ms::Tensor& x : inputs) x.ConvertStubNodeToTensor();
  auto slot = std::make_shared<SavedSlot>();
  return wrap(
      record_with_grad(
          call->name(), vjp, inputs,
          [&] { return tensor_ptrs(launch(tape, inputs, outputs->shapes, outputs->types, slot)); },
          n_states, 0, slot),
      outputs->single);
}

}  // namespace
}  // namespace ms_aten_fast

PYBIND11_MODULE(MS_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using ms_aten_fast::Kernel;
  using ms_aten_fast::Outputs;
  m.doc() = "ms_aten's PYNATIVE fast path (see csrc/pyboost/fast_path.cpp)";
  // ms_aten/native/pyboost_build.py passes -DMS_ATEN_MINDSPORE_VERSION=<mindspore.__version__>.
#define MS_ATEN_STRINGIZE(x) MS_ATEN_STRINGIZE_(x)
#define MS_ATEN_STRINGIZE_(x) #x
  m.attr("mindspore_version") = MS_ATEN_STRINGIZE(MS_ATEN_MINDSPORE_VERSION);
  py::class_<Kernel, std::shared_ptr<Kernel>>(m, "Kernel")
      .def(py::init<const std::string&, std::string>(), py::arg("spec"), py::arg("name"))
      .def_property_readonly("name", &Kernel::name)
      .def_property_readonly("uses_out", &Kernel::uses_out);
  py::class_<Outputs, std::shared_ptr<Outputs>>(m, "Outputs")
      .def(py::init<const std::vector<mindspore::ShapeVector>&, const std::vector<std::string>&,
                    bool>(),
           py::arg("shapes"), py::arg("dtypes"), py::arg("single"));
  m.def("run", &ms_aten_fast::run, py::arg("forward"), py::arg("vjp"), py::arg("inputs"),
        py::arg("outputs"), "Run `forward` on `inputs` (a list of Tensors), `vjp` as backward.");
  m.def("adopt", &ms_aten_fast::adopt, py::arg("vjp"), py::arg("inputs"), py::arg("outputs"),
        py::arg("single"), "Outputs computed from `inputs` already, with `vjp` as backward.");
  m.def("run_program", &ms_aten_fast::run_program, py::arg("call"), py::arg("tape"), py::arg("vjp"),
        py::arg("inputs"), py::arg("outputs"), py::arg("n_states"), py::arg("written"),
        "Run a program: `call`, or `tape` keeping its graph for `vjp` when autograd records.");
}
