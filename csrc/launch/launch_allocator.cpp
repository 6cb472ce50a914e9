#include "launch/launch_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <pthread.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace ms_aten {
namespace {

// Below this glibc's arenas reuse freed memory well, and a lock per allocation would cost more
// than it saves.
constexpr size_t kMinBytes = size_t{256} << 10;
constexpr int64_t kDefaultLimitMb = 2048;
// The most MiB whose bytes an int64_t holds (native/memory.py's MAX_MB).
constexpr int64_t kMaxLimitMb = std::numeric_limits<int64_t>::max() >> 20;

// Sizes rounded up to an eighth of their power of two (at least 64 KiB), so that the nearly equal
// sizes of a growing sequence share blocks, for at most 12.5 % more memory.
size_t rounded(size_t n) {
  const size_t step = std::max<size_t>(size_t{64} << 10, std::bit_floor(n) >> 3);
  return (n + step - 1) / step * step;
}

int64_t limit_from_environment() {
  const char* value = std::getenv("MS_ATEN_CPU_CACHE_MB");
  if (value == nullptr || *value == '\0') return kDefaultLimitMb << 20;
  // ms_aten's import refused a value that is not a whole number, or past kMaxLimitMb, already.
  try {
    return std::clamp<int64_t>(std::stoll(value), 0, kMaxLimitMb) << 20;
  } catch (const std::out_of_range&) {
    return kMaxLimitMb << 20;
  } catch (const std::exception&) {
    return kDefaultLimitMb << 20;
  }
}

thread_local bool t_cached = false;

class CachingAllocator final : public c10::Allocator {
 public:
  CachingAllocator(c10::Allocator* torch_allocator, int64_t limit)
      : torch_(torch_allocator), limit_(limit) {}

  c10::DataPtr allocate(size_t n) override {
    if (!t_cached || n < kMinBytes) return torch_->allocate(n);
    const size_t size = rounded(n);
    void* block = take(size);
    if (block == nullptr) {
      try {
        block = c10::alloc_cpu(size);
      } catch (const c10::Error&) {
        empty();  // out of memory: what the cache holds first
        block = c10::alloc_cpu(size);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[block] = size;
    }
    return {block, block, &give_back, c10::Device(c10::DeviceType::CPU)};
  }

  // torch's: a raw_deallocate of one of this cache's blocks frees it, which is right for a block
  // from alloc_cpu (it only leaves the cache's books).
  c10::DeleterFnPtr raw_deleter() const override { return torch_->raw_deleter(); }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  int64_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_;
  }

  void empty() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [size, free] : free_) {
        for (void* block : free) {
          sizes_.erase(block);
          blocks.push_back(block);
        }
      }
      free_.clear();
      held_ = 0;
    }
    for (void* block : blocks) c10::free_cpu(block);
  }

  // Around fork(): the cache's books are copied whole, never in the middle of a change. The
  // child gives the blocks it holds back (its copies of the parent's, which it would touch only
  // to reuse them); the blocks in use there stay the cache's, and come back to it when freed.
  static void lock_for_fork();
  static void unlock_after_fork();
  static void empty_after_fork();

 private:
  void* take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* block = it->second.back();
    it->second.pop_back();
    held_ -= static_cast<int64_t>(size);
    return block;
  }

  // The deleter of every block the cache handed out, on whatever thread frees it.
  static void give_back(void* block);

  c10::Allocator* const torch_;
  const int64_t limit_;
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;              // every block from alloc_cpu here
  std::unordered_map<size_t, std::vector<void*>> free_;  // by size: blocks to reuse
  int64_t held_ = 0;                                     // bytes in free_
};

CachingAllocator* g_allocator = nullptr;  // set once, never destroyed (tensors outlive statics)
std::once_flag g_installed;

void CachingAllocator::give_back(void* block) {
  CachingAllocator& self = *g_allocator;
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    const size_t size = self.sizes_.at(block);
    if (self.held_ + static_cast<int64_t>(size) <= self.limit_) {
      self.free_[size].push_back(block);
      self.held_ += static_cast<int64_t>(size);
      return;
    }
    self.sizes_.erase(block);
  }
  c10::free_cpu(block);
}

void CachingAllocator::lock_for_fork() { g_allocator->mutex_.lock(); }
void CachingAllocator::unlock_after_fork() { g_allocator->mutex_.unlock(); }
void CachingAllocator::empty_after_fork() {
  g_allocator->mutex_.unlock();
  g_allocator->empty();
}

}  // namespace

void cache_this_threads_blocks() {
  std::call_once(g_installed, [] {
    const int64_t limit = limit_from_environment();
    if (limit == 0) return;
    g_allocator = new CachingAllocator(c10::GetCPUAllocator(), limit);
    // Priority 0, the default allocator's: an allocator that someone registered with a higher
    // priority stays, and then this thread's blocks are simply not cached.
    c10::SetCPUAllocator(g_allocator, 0);
    if (c10::GetCPUAllocator() != g_allocator) {
      g_allocator = nullptr;
      return;
    }
    pthread_atfork(&CachingAllocator::lock_for_fork, &CachingAllocator::unlock_after_fork,
                   &CachingAllocator::empty_after_fork);
  });
  t_cached = g_allocator != nullptr;
}

int64_t cached_bytes() { return g_allocator == nullptr ? 0 : g_allocator->held(); }

void empty_cache() {
  if (g_allocator != nullptr) g_allocator->empty();
}

}  // namespace ms_aten
