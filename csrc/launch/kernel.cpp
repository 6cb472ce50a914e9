#include "launch/kernel.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "boundary/bridge_abi.h"
#include "boundary/ms_ext.h"
#include "device/device.h"
#include "launch/launch_thread.h"
#include "op/bounded.h"
#include "op/grad.h"
#include "op/mutate.h"
#include "op/results.h"

namespace ms_aten {
namespace {

// Holds the warnings of an out= attempt (c10's handler is per thread): they reach the user only
// if its result is kept. An out= kernel that resizes our fixed views (soft_margin_loss.out
// writes the elementwise loss, then reduces) warns about the resize, and is then retried as the
// functional call, which is what actually ran.
class HeldWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { held_.push_back(warning); }
  void release() const {
    for (const auto& warning : held_) c10::warn(warning);
  }

 private:
  std::vector<c10::Warning> held_;
};

}  // namespace

Kernel::Kernel(std::unique_ptr<OpCall> call, std::unique_ptr<OpCall> out, std::string error)
    : call_(std::move(call)), out_(std::move(out)), error_(std::move(error)) {
  if (!call_) {
    name_ = "ms_aten";
  } else {
    name_ = call_->name() + (call_->kind() == SpecKind::kVjp ? vjp_suffix(call_->order()) : "");
  }
}

Kernel::Kernel(std::shared_ptr<const Program> program)
    : program_(std::move(program)), name_(program_->name()) {}

Kernel::Kernel(std::unique_ptr<ProgramFamily> family)
    : family_(std::move(family)), name_(family_->name()) {}

Kernel* Kernel::create(const char* spec, const char* error) noexcept {
  try {
    if (error != nullptr) return new Kernel(nullptr, nullptr, error);
    const std::string text(spec);
    if (text.rfind("program ", 0) == 0) return new Kernel(std::make_shared<const Program>(text));
    if (text.rfind("family ", 0) == 0) return new Kernel(std::make_unique<ProgramFamily>(text));
    const size_t split = text.find(';');
    auto call = std::make_unique<OpCall>(text.substr(0, split));
    auto out =
        split == std::string::npos ? nullptr : std::make_unique<OpCall>(text.substr(split + 1));
    const auto writes = [](const OpCall& c) {
      return c.kind() == SpecKind::kOut || c.kind() == SpecKind::kInplace;
    };
    if (call->kind() == SpecKind::kCall && call->writes()) {
      throw std::invalid_argument("op spec '" + text +
                                  "': only a program node or a mutate spec writes its tensors");
    }
    if (writes(*call) || (out && !writes(*out))) {
      throw std::invalid_argument("malformed op spec '" + text +
                                  "': expected '<call or vjp spec>[;<out spec>]'");
    }
    return new Kernel(std::move(call), std::move(out), "");
  } catch (const std::exception& e) {
    try {
      return new Kernel(nullptr, nullptr, e.what());
    } catch (...) {
      return nullptr;
    }
  } catch (...) {
    return nullptr;
  }
}

namespace {
std::atomic<int64_t> g_launches{0};

// For an in-place spec: copies call-time tensor 0 into the single output, which the in-place op
// then updates; false (nothing done) unless both are contiguous with one shape and dtype.
bool start_in_place(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  if (inputs.empty() || outputs.size() != 1) return false;
  const at::Tensor& in = inputs[0];
  const at::Tensor& out = outputs[0];
  if (in.sizes() != out.sizes() || in.scalar_type() != out.scalar_type() || !in.is_contiguous() ||
      !out.is_contiguous()) {
    return false;
  }
  // ATen's vectorized copy: glibc's memcpy of a few KiB (rep movsb) was slower on a test VM.
  if (in.data_ptr() != out.data_ptr()) out.copy_(in);  // equal: MindSpore reused the buffer
  return true;
}

}  // namespace

int64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }

namespace {
std::atomic<int64_t> g_host_reads{0};
thread_local int t_launches_here = 0;  // launches running on this thread (launch_here)

// Marks this thread as running a launch, for the host-read observer.
class InLaunch {
 public:
  InLaunch() { ++t_launches_here; }
  ~InLaunch() { --t_launches_here; }
  InLaunch(const InLaunch&) = delete;
  InLaunch& operator=(const InLaunch&) = delete;
};

bool reads_on_host(const char* op) {
  static const std::unordered_set<std::string> ops = {
      "aten::_local_scalar_dense", "aten::nonzero",   "aten::masked_select", "aten::_unique2",
      "aten::unique_consecutive",  "aten::unique_dim"};
  return ops.count(op) > 0;
}

void observe_host_reads() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::addGlobalCallback(at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                                         -> std::unique_ptr<at::ObserverContext> {
                            if (t_launches_here > 0 && reads_on_host(fn.name())) note_host_read();
                            return nullptr;
                          }).scopes({at::RecordScope::FUNCTION}));
  });
}
}  // namespace

void note_host_read() { g_host_reads.fetch_add(1, std::memory_order_relaxed); }

int64_t host_read_count() {
  observe_host_reads();
  return g_host_reads.load(std::memory_order_relaxed);
}

void Kernel::launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                    c10::Device device, std::unique_ptr<SavedGraph>* slot) const {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (!call_ && !program_ && !family_) throw std::runtime_error(error_);
  const auto work = [&] { launch_here(nparam, params, ndims, shapes, dtypes, device, slot); };
  if (!device.is_cpu()) return work();  // on the device's stream, from MindSpore's thread
  // A program runs on the launch thread; a single op there only above ATen's grain size.
  if (!program_ && !family_ && too_small_to_split(nparam, ndims, shapes)) return run_inline(work);
  run_on_launch_thread(work);
}

void Kernel::launch_here(int nparam, void** params, int* ndims, int64_t** shapes,
                         const char** dtypes, c10::Device device,
                         std::unique_ptr<SavedGraph>* slot) const {
  // One profiler event per launch, the parent of the ATen ops it runs: torch's profiler (with
  // profile_all_threads: launches run on ms_aten's launch thread) then shows each launch's
  // phases (benchmarks/profile_models.py). Without a profiler it costs a flag check.
  RECORD_FUNCTION("ms_aten launch: " + name_, c10::ArrayRef<const c10::IValue>{});
  const InLaunch in_launch;
  const auto program = family_ ? family_->select(nparam, ndims, shapes, dtypes) : program_;
  const int n_in = program ? program->input_count(nparam) : call_->input_count(nparam);
  if (n_in < 0 || n_in > nparam) {
    throw std::invalid_argument("got " + std::to_string(nparam) +
                                " buffers, which does not fit the op's inputs and outputs");
  }
  auto tensors = views_.views(nparam, params, ndims, shapes, dtypes, device);
  std::vector<at::Tensor> inputs(tensors.begin(), tensors.begin() + n_in);
  std::vector<at::Tensor> outputs(tensors.begin() + n_in, tensors.end());
  if (program) {
    const auto run = [&] {
      if (family_) return family_->run(*program, inputs, outputs, slot);
      program->run(inputs, outputs, Program::Keep::kNothing, slot);
    };
    // Still on the launch thread (the graph a forward keeps, and its thread-local state, stay
    // where they were), with ATen's loops held to it.
    return program->too_small_to_split() ? run_inline(run) : run();
  }
  if (call_->kind() == SpecKind::kVjp) return run_vjp(*call_, inputs, outputs);
  if (call_->kind() == SpecKind::kBounded) return run_bounded(*call_, inputs, outputs);
  if (call_->kind() == SpecKind::kMutate) return run_mutate(*call_, inputs);
  if (uses_out()) {
    if (try_out(inputs, outputs, params + n_in, ndims + n_in, shapes + n_in)) return;
    // The out= kernel may have resized our views: write the functional result into new ones.
    // If the functional call throws too, the input was at fault: it propagates, and the out=
    // kernel stays in use.
    views_.clear();
    auto fresh = get_torch_tensors(nparam - n_in, params + n_in, ndims + n_in, shapes + n_in,
                                   dtypes + n_in, device);
    run_call(inputs, fresh);
    out_unsound_.store(true, std::memory_order_relaxed);
    return;
  }
  run_call(inputs, outputs);
}

void Kernel::run_call(const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& outputs) const {
  c10::InferenceMode guard;
  auto stack = call_->stack(inputs, outputs);
  call_->op().callBoxed(stack);
  const auto results = returned_tensors(stack);
  if (call_->returns_nothing()) return;  // MindSpore's one output is a placeholder
  if (results.size() != outputs.size()) {
    throw std::runtime_error("returned " + std::to_string(results.size()) +
                             " tensors, MindSpore expects " + std::to_string(outputs.size()));
  }
  for (size_t i = 0; i < results.size(); ++i) copy_into_output(outputs[i], results[i], i);
}

bool Kernel::try_out(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                     void* const* data, const int* ndims, int64_t* const* shapes) const {
  c10::InferenceMode guard;
  std::vector<at::Tensor> in_place;
  if (out_->kind() == SpecKind::kInplace) {
    if (!start_in_place(inputs, outputs)) return false;
    in_place = inputs;
    in_place[0] = outputs[0];
  }
  auto stack = out_->stack(in_place.empty() ? inputs : in_place, outputs);
  HeldWarnings warnings;
  {
    c10::WarningUtils::WarningHandlerGuard hold(&warnings);
    try {
      out_->op().callBoxed(stack);
    } catch (const std::exception&) {
      return false;  // the functional retry reports the error if it is the input's fault
    }
  }
  // An out= kernel that resized or re-pointed an output wrote memory MindSpore never sees.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    const auto expected = ndims[i] == 0 ? at::IntArrayRef{}
                                        : at::IntArrayRef(shapes[i], static_cast<size_t>(ndims[i]));
    if (out.data_ptr() != data[i] || out.sizes() != expected || !out.is_contiguous()) {
      return false;
    }
  }
  warnings.release();
  return true;
}

}  // namespace ms_aten
