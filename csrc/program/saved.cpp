#include "program/saved.h"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace ms_aten {
namespace {

struct Table {
  std::mutex mutex;
  int64_t next = 1;
  std::unordered_map<int64_t, std::unique_ptr<SavedGraph>> graphs;
  int64_t next_kernel = 1;
  std::unordered_set<int64_t> with_backward;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

int64_t park(std::unique_ptr<SavedGraph> graph) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const int64_t handle = t.next++;
  t.graphs.emplace(handle, std::move(graph));
  return handle;
}

std::unique_ptr<SavedGraph> take(int64_t handle) {
  Table& t = table();
  std::unique_ptr<SavedGraph> graph;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    const auto found = t.graphs.find(handle);
    if (found == t.graphs.end()) return nullptr;
    graph = std::move(found->second);
    t.graphs.erase(found);
  }
  return graph;
}

bool drop(int64_t handle) {
  // The graph is freed outside the lock: its tensors' destructors may take a while.
  return take(handle) != nullptr;
}

size_t parked_count() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.graphs.size();
}

void mark_backward(int64_t kernel) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.with_backward.insert(kernel);
}

bool has_backward(int64_t kernel) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.with_backward.count(kernel) != 0;
}

int64_t new_kernel_id() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.next_kernel++;
}

void forget_kernel(int64_t kernel) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.with_backward.erase(kernel);
}

}  // namespace ms_aten
