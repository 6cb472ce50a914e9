// Autograd graphs that a program's forward keeps for its backward, so that the VJP runs one
// backward pass and no second forward (program.h).
//
// A forward that records runs under autograd and keeps what its VJP needs: the outputs, whose
// grad_fn leads back through every node, and the leaves (the inputs it differentiates). Two
// owners:
//  - GRAPH mode (and PYNATIVE off the fast path): the forward parks the graph in a table under
//    a handle it writes into its last output, which MindSpore hands to the VJP; the VJP takes
//    it. Only a forward kernel known to have a backward after it records: one whose handle
//    output a VJP has received. Until then it writes -(its id) there, and a VJP that receives
//    that (and recomputes, this once) marks the kernel. So inference never records, and a
//    graph that nobody takes (MindSpore pruned the backward) is dropped by the kernel at its
//    next launch, which then records no more (program/family.h).
//  - The PYNATIVE fast path: the graph goes into a slot that MindSpore's autograd node owns,
//    freed with the node (csrc/pyboost/fast_path.cpp).
// Either way a VJP that finds no graph recomputes the forward (the fallback).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ms_aten {

struct SavedGraph {
  std::vector<at::Tensor> outputs;  // the program's outputs, as autograd recorded them
  std::vector<at::Tensor> leaves;   // the inputs that require grad
  std::vector<size_t> leaf_index;   // and their input indices
};

// Parks a graph; returns its handle (> 0).
int64_t park(std::unique_ptr<SavedGraph> graph);
// The graph parked under `handle`, removed from the table; nullptr if there is none (never
// parked, taken already, or dropped).
std::unique_ptr<SavedGraph> take(int64_t handle);
// Drops a parked graph; true if it was still there (nobody took it).
bool drop(int64_t handle);
// How many graphs are parked now (tests check that none stays behind).
size_t parked_count();

// Forward kernels (by id, > 0) whose handle output a VJP has received: a backward follows them.
void mark_backward(int64_t kernel);
bool has_backward(int64_t kernel);
// A new forward kernel's id, and forgetting it when the kernel is destroyed.
int64_t new_kernel_id();
void forget_kernel(int64_t kernel);

}  // namespace ms_aten
