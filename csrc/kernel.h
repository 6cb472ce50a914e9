// One MindSpore kernel instance: a decoded op spec plus the launch logic for its kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spec.h"

namespace ms_aten {

class Kernel {
 public:
  // Never throws: a spec that cannot be decoded yields a kernel that raises `error` at launch.
  static Kernel* create(const char* spec, const char* error) noexcept;

  void launch(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
              c10::Device device) const;
  const std::string& name() const { return name_; }

 private:
  Kernel(std::unique_ptr<OpCall> call, std::string name, std::string error)
      : call_(std::move(call)), name_(std::move(name)), error_(std::move(error)) {}

  void run_call(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;
  void run_out(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const;

  std::unique_ptr<OpCall> call_;
  std::string name_;
  std::string error_;
};

// Writes `result` into MindSpore's output buffer after checking that shape and dtype agree
// with what the Python side inferred; copy_ alone would broadcast or cast silently.
void copy_into_output(const at::Tensor& output, const at::Tensor& result, size_t index);

}  // namespace ms_aten
