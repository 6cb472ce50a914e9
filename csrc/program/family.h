// One torch graph captured for several input signatures. In GRAPH mode MindSpore compiles a
// graph per static input shape, and every compile hands its kernel the same primitive
// attribute; so the attribute names a family, Python registers each capture in it during shape
// inference (ms_aten_program_register, before MindSpore builds the kernel that runs it), and a
// launch runs the program captured for its inputs' shapes and dtypes.
//
// A capture with dynamic shapes (torch.export's dynamic_shapes) serves every input signature:
// it is registered under the key "*", and its family holds no other.
//
// Spec: family <kind> <%-escaped name> <id> <first> <count>
//   the launch's inputs [first, first + count) are the user inputs that select the program
//   (the weights before them keep their shapes). The kinds (program.h, saved.h):
//     call    the forward, keeping nothing (inference)
//     record  the forward, parking its autograd graph for the VJP under the handle it
//             outputs, once a VJP has received this kernel's handle (saved.h); a graph nobody
//             took by its next launch is dropped, and the kernel records no more
//     tape    the forward, keeping its graph in the caller's slot (the PYNATIVE fast path,
//             whose autograd node owns it); without a slot it keeps nothing
//     vjp     the backward: the kept graph, or a recompute
//     vjp2    the backward's own backward (recomputes)
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "program/program.h"

namespace ms_aten {

// Registers the forward and VJP programs of family `id` for the user-input signature `key`
// (signature_key's format), and the VJP's own backward (vjp2) from the VJP's spec. Throws
// std::invalid_argument if a spec cannot be decoded. A key registered again replaces its
// programs (a module captured again after a change, Python's runtime/changes.py): every kernel
// of the family runs the new ones from its next launch.
void register_programs(const std::string& id, const std::string& key, const std::string& call,
                       const std::string& vjp);

// Drops every program of family `id`: its primitive is gone (Python frees it with its Cell),
// and with it every graph and kernel that launched it.
void forget_programs(const std::string& id);

// The key under which a capture with dynamic shapes serves every input signature.
inline constexpr const char* kAnySignature = "*";

// "float32[2, 8], int64[]": the dtypes and shapes of `count` buffers, as Python writes a
// Signature (ms_aten/programs/base.py, Signature.describe).
std::string signature_key(int count, const int* ndims, const int64_t* const* shapes,
                          const char* const* dtypes);

class ProgramFamily {
 public:
  explicit ProgramFamily(const std::string& spec);

  const std::string& name() const { return name_; }
  ~ProgramFamily();

  // The program registered for a launch's inputs; throws if there is none.
  std::shared_ptr<const Program> select(int nparam, const int* ndims, const int64_t* const* shapes,
                                        const char* const* dtypes) const;
  // Runs `program` (from select) as this kernel's kind says (the kinds above).
  void run(const Program& program, const std::vector<at::Tensor>& inputs,
           const std::vector<at::Tensor>& outputs, std::unique_ptr<SavedGraph>* slot) const;
  // The output shapes of a launch on inputs of these shapes (MindSpore's C++ shape hook: -1 for
  // a size it does not know yet). Only a capture with dynamic shapes carries them; a static
  // family's shapes come from Python. A backward's gradients take their inputs' shapes.
  // Without `check`, the sizes are not checked against their ranges (the launch checks them).
  std::vector<std::vector<int64_t>> infer_shapes(const int* ndims, const int64_t* const* shapes,
                                                 bool check) const;

 private:
  std::string name_;
  std::string id_;
  std::string kind_;  // call, vjp or vjp2 (program.h)
  int first_ = 0;
  int count_ = 0;
  // A compiled graph launches its kernel with one signature: remember the last one.
  // The program of one kind ("call", "vjp" or "vjp2") registered under `key`, or nullptr.
  std::shared_ptr<const Program> find(const std::string& key) const;

  mutable std::mutex mutex_;
  mutable std::string last_key_;
  mutable std::shared_ptr<const Program> last_;
  mutable uint64_t last_generation_ = 0;  // the registry's generation when last_ was found
  // A record kernel: the handle of the graph it parked last, and whether it still records.
  mutable std::mutex record_mutex_;
  mutable int64_t last_handle_ = 0;
  mutable bool recording_ = true;
  int64_t kernel_id_ = 0;  // this kernel's id (saved.h), for a record kernel
};

}  // namespace ms_aten
