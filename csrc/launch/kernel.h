// One MindSpore kernel instance: a decoded op spec plus the launch logic for its kind.
//
// The primitive attribute holds one spec, or two separated by ';': the functional call, then
// the out= overload to try first (or the in-place one, where out= is only a composite wrapper
// that allocates and copies); or a mutating call that writes its inputs (op/mutate.h); or a whole
// program (program/program.h), whose spec starts with "program"; or a family of programs, one
// per input signature (program/family.h), "family".
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "launch/view_cache.h"
#include "op/spec.h"
#include "program/family.h"
#include "program/program.h"

namespace ms_aten {

class Kernel {
 public:
  // Never throws: a spec that cannot be decoded yields a kernel that raises `error` at launch.
  static Kernel* create(const char* spec, const char* error) noexcept;

  // `slot`: for a program's forward (kind tape), where it keeps its autograd graph; for its
  // VJP, the graph to use (program/saved.h). Ignored by other kernels.
  void launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
              c10::Device device, std::unique_ptr<SavedGraph>* slot = nullptr) const;
  const std::string& name() const { return name_; }
  // Whether launches write through the out= overload (false: none, or it proved unsound).
  bool uses_out() const { return out_ && !out_unsound_.load(std::memory_order_relaxed); }
  // The reason the spec could not be decoded, or "" (ms_aten_kernel_error).
  const std::string& error() const { return error_; }

 private:
  Kernel(std::unique_ptr<OpCall> call, std::unique_ptr<OpCall> out, std::string error);
  explicit Kernel(std::shared_ptr<const Program> program);
  explicit Kernel(std::unique_ptr<ProgramFamily> family);

  // launch() on the thread that runs it (launch_thread.h).
  void launch_here(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
                   c10::Device device, std::unique_ptr<SavedGraph>* slot) const;
  void run_call(const std::vector<at::Tensor>& inputs,
                const std::vector<at::Tensor>& outputs) const;
  // False when the out= (or in-place) kernel threw, or left an output other than MindSpore's
  // buffer (data, ndims, shapes): resized or re-pointed; the outputs are then suspect.
  bool try_out(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
               void* const* data, const int* ndims, int64_t* const* shapes) const;

  std::unique_ptr<OpCall> call_;
  std::unique_ptr<OpCall> out_;
  std::shared_ptr<const Program> program_;
  std::unique_ptr<ProgramFamily> family_;
  // Set once the out= overload failed, resized or re-pointed an output where the functional
  // overload then worked (torch's mse_loss.out resizes its 0-dim output, which throws on
  // MindSpore's non-resizable buffers): later launches go straight to the functional. A failure
  // the functional overload shares (a user's bad input) says nothing about the out= kernel and
  // leaves it in use.
  mutable std::atomic<bool> out_unsound_{false};
  mutable ViewCache views_;
  std::string name_;
  std::string error_;
};

// How many kernel launches (forward, VJP, program) this process made: tests observe the
// launch count of a whole-model forward through it (ms_aten_launch_count).
int64_t launch_count();

// How many times a launch read tensor values back to the host: on a device each such read
// waits for the stream, so none belongs on a launch path (a test keeps the count at zero over a
// model's forward and backward, on the CPU, where every read of device memory would be one).
// Counted: the ATen ops a launch runs, on the thread that runs it, whose CUDA kernels read
// device memory on the host (item() and every Scalar read: _local_scalar_dense; nonzero,
// masked_select and unique, which size their outputs from the data), and ms_aten's own reads
// (note_host_read). The ops are observed through torch's RecordFunction from the first call
// on (ms_aten_host_read_count), which costs every op of the process a little, so not before.
int64_t host_read_count();
void note_host_read();

}  // namespace ms_aten
