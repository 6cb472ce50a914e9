#include "launch/launch_thread.h"

#include "launch/launch_allocator.h"

#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/ThreadLocalState.h>
#include <c10/util/ParallelGuard.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// How long the launch thread waits for its next task before it gives its OpenMP team back.
// Idle, libgomp's workers spin for a while (about 10 ms on a 2-core EPYC: GOMP_SPINCOUNT's
// default, throttled only when the process manages more threads than cores) on the cores that
// MindSpore's own kernels need between ms_aten's launches, its optimizer and its loss
// (GPT-2 medium's nn.Adam step: 60.6 -> 47.7 ms, docs/devices.md). The first launch after a
// release starts the team again and its workers' first work runs cold: a decoding loop that
// paid that every token made a third fewer tokens a second. So the wait adapts (adapt_wait),
// from the shortest up to about the spin's length.
constexpr std::chrono::microseconds kShortestIdle{500};
constexpr std::chrono::microseconds kLongestIdle{8000};
constexpr double kBusyCores = 1.5;  // see adapt_wait

int64_t process_cpu_ns() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

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
        const auto has_task = [this] { return !queue_.empty(); };
        if (!ready_.wait_for(lock, idle_before_release_, has_task)) {
          lock.unlock();  // a caller may queue its task meanwhile
          release_idle_team();
          const auto released = std::chrono::steady_clock::now();
          const int64_t cpu_at_release = process_cpu_ns();
          lock.lock();
          ready_.wait(lock, has_task);
          adapt_wait(std::chrono::steady_clock::now() - released,
                     process_cpu_ns() - cpu_at_release);
        }
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

  // After a release and the rest that followed it (wall and the process's CPU nanoseconds).
  // The release paid where the process's other threads kept more than one core busy meanwhile
  // (MindSpore's optimizer or loss: the cores the team's spin would have taken). Where they did
  // not, and the rest was shorter than the spin (host work on one thread), the team's restart
  // bought nothing: twice in a row, wait longer. A release that paid brings the wait back down;
  // a longer rest costs nothing either way (the workers would have been asleep by then).
  // Requiring the rest to outlast the wait as well kept decoding loops' releases away but lost
  // most of the training gain (MindSpore's loss between launches is often shorter): measured,
  // not taken (benchmarks/results/models/2026-11-29_idle_team_release.md).
  void adapt_wait(std::chrono::nanoseconds rest, int64_t cpu_ns) {
    const bool paid = cpu_ns > kBusyCores * static_cast<double>(rest.count());
    if (paid) idle_before_release_ = std::max(idle_before_release_ / 2, kShortestIdle);
    if (paid || rest >= kLongestIdle) {
      idle_releases_in_a_row_ = 0;
    } else if (++idle_releases_in_a_row_ == 2) {
      idle_before_release_ = std::min(idle_before_release_ * 2, kLongestIdle);
      idle_releases_in_a_row_ = 0;
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
  // The launch thread's own: how long it waits before a release, and the releases in a row
  // that bought nothing (adapt_wait).
  std::chrono::microseconds idle_before_release_ = kShortestIdle;
  int idle_releases_in_a_row_ = 0;
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
