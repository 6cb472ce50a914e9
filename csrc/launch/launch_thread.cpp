#include "launch/launch_thread.h"

#include "launch/launch_allocator.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/ThreadLocalState.h>
#include <c10/util/ParallelGuard.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

// The OpenMP runtime torch loaded (libgomp, or LLVM's libomp): weak, so that the library still
// loads against a torch without OpenMP (omp_pause_resource_all is OpenMP 5.0: GCC 9 and later).
extern "C" int omp_pause_resource_all(int kind) __attribute__((weak));
extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" void omp_set_num_threads(int n) __attribute__((weak));

namespace ms_aten {
namespace {

constexpr int kOmpPauseSoft = 1;  // omp_pause_soft: threads go, settings stay

std::atomic<int> g_num_threads{0};  // 0: ATen's default (one per core)

struct Task {
  const std::function<void()>& work;
  at::ThreadLocalState state;  // the caller's, captured at construction
  std::exception_ptr error;
  bool done = false;  // guarded by LaunchThread::mutex_
};

class LaunchThread {
 public:
  // Never destroyed: joining at exit could wait on a task MindSpore's teardown abandoned, and the
  // thread holds no resource the process's end does not release. A child process that fork()
  // made has none of its parent's threads: the first launch there starts a launch thread of its
  // own (forget_after_fork), with an OpenMP team of its own.
  static LaunchThread& get() {
    if (LaunchThread* current = current_.load(std::memory_order_acquire)) return *current;
    std::lock_guard<std::mutex> lock(starting_);
    LaunchThread* current = current_.load(std::memory_order_relaxed);
    if (current == nullptr) {
      static const bool handlers = [] {
        return pthread_atfork(&lock_for_fork, &unlock_after_fork, &forget_after_fork) == 0;
      }();
      (void)handlers;  // registered once; the child of a fork inherits them
      current = new LaunchThread();
      current_.store(current, std::memory_order_release);
    }
    return *current;
  }

  bool is_current() const { return std::this_thread::get_id() == id_; }

  void run(Task& task) {
    {
      // One lock for the hand-off and the wait: wait() releases it for the launch thread.
      std::unique_lock<std::mutex> lock(mutex_);
      queue_.push_back(&task);
      ready_.notify_one();
      finished_.wait(lock, [&task] { return task.done; });
    }
    if (task.error) std::rethrow_exception(task.error);
  }

 private:
  LaunchThread() {
    std::thread thread([this] { loop(); });
    id_ = thread.get_id();
    thread.detach();
  }

  [[noreturn]] void loop() {
    // Named for top, perf and py-spy; the OpenMP workers it starts inherit the name.
    pthread_setname_np(pthread_self(), "ms_aten launch");
    at::init_num_threads();
    cache_this_threads_blocks();
    for (;;) {
      Task* task = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        task = queue_.front();
        queue_.pop_front();
      }
      // OpenMP's thread count is a per-thread setting: the configured one applies here, the only
      // thread that opens ATen's parallel regions for ms_aten.
      if (const int wanted = num_threads(); wanted > 0 && at::get_num_threads() != wanted) {
        at::set_num_threads(wanted);
      }
      try {
        at::ThreadLocalStateGuard guard(task->state);
        task->work();
      } catch (...) {
        task->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        task->done = true;
      }
      // A condition of the thread's, not of the task: the caller may return (and its task go
      // away) as soon as the lock is released.
      finished_.notify_all();
    }
  }

  // Around fork(): no thread may be starting the launch thread while the process is copied.
  static void lock_for_fork() { starting_.lock(); }
  static void unlock_after_fork() { starting_.unlock(); }
  // In the child: the parent's launch thread is not there, and its queue and lock are as
  // fork() found them (a launch under way holds the lock). It is left behind, never touched
  // again; the next launch starts a new one.
  static void forget_after_fork() {
    current_.store(nullptr, std::memory_order_relaxed);
    starting_.unlock();
  }

  static inline std::atomic<LaunchThread*> current_{nullptr};
  static inline std::mutex starting_;

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable finished_;
  std::deque<Task*> queue_;
  std::thread::id id_;
};

}  // namespace

void run_on_launch_thread(const std::function<void()>& work) {
  LaunchThread& thread = LaunchThread::get();
  if (thread.is_current()) return work();
  Task task{work, at::ThreadLocalState(), nullptr};
  thread.run(task);
}

namespace {
// Holds OpenMP to one thread on the calling thread while it lives. ATen's OpenMP build ignores
// c10::ParallelGuard (its at::in_parallel_region() is omp_in_parallel()), and a loop with a
// small grain (_fused_adam_ splits over its tensors, grain 0) would open a team on MindSpore's
// thread. at::get_num_threads() first: it runs ATen's once-per-thread initialisation, which
// would otherwise set the thread's count back at the first parallel loop.
class OneOpenMPThread {
 public:
  OneOpenMPThread() {
    if (omp_get_max_threads == nullptr || omp_set_num_threads == nullptr) return;
    at::get_num_threads();
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
  ~OneOpenMPThread() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  OneOpenMPThread(const OneOpenMPThread&) = delete;
  OneOpenMPThread& operator=(const OneOpenMPThread&) = delete;

 private:
  int saved_ = 0;
};
}  // namespace

void run_inline(const std::function<void()>& work) {
  OneOpenMPThread one_thread;
  c10::ParallelGuard guard(true);  // the same for ATen's own thread pool (a build without OpenMP)
  work();
}

bool too_small_to_split(int nparam, const int* ndims, const int64_t* const* shapes) {
  for (int i = 0; i < nparam; ++i) {
    int64_t numel = 1;
    for (int d = 0; d < ndims[i]; ++d) numel *= shapes[i][d];
    if (numel >= at::internal::GRAIN_SIZE) return false;
  }
  return true;
}

bool release_idle_team() {
  return omp_pause_resource_all != nullptr && omp_pause_resource_all(kOmpPauseSoft) == 0;
}

void set_num_threads(int n) { g_num_threads.store(n < 0 ? 0 : n, std::memory_order_relaxed); }
int num_threads() { return g_num_threads.load(std::memory_order_relaxed); }

}  // namespace ms_aten
