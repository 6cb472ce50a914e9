// Where ms_aten's ATen work runs on the CPU: one long-lived thread of ms_aten's own, so that ATen
// has one OpenMP team whatever thread MindSpore launches a kernel from.
//
// libgomp gives every thread that opens a parallel region a team (a pool of worker threads) of
// its own, and keeps it for the thread's life. MindSpore launches kernels from several threads
// of its own (the actor threads of a graph, the PYNATIVE device task), so ATen's regions opened
// there gave the process several teams: libgomp then manages more threads than the machine has
// cores and cuts its workers' spinning to a few hundred iterations before they sleep, and every
// parallel region waits for a sleeping worker (benchmarks/results/models/profile/profile.md).
// Here every kernel whose work ATen may split runs on the launch thread, one team for all of
// them, with the thread count ms_aten.set_num_threads chose. Work too small for ATen to split
// runs inline on the caller's thread, where a hand-off would cost more than the work, with
// ATen's parallel loops held to that thread so that no team is opened there. Idle, the launch
// thread gives its team back after a wait that adapts (launch_thread.cpp): its spinning workers
// would otherwise take the cores MindSpore's own kernels run on between ms_aten's launches.
#pragma once

#include <functional>

namespace ms_aten {

// Runs `work` on the launch thread with the caller's thread-local state (grad mode, inference
// mode, dispatch keys, the profiler) and waits for it; rethrows what it threw. On the launch
// thread itself it simply runs `work`.
void run_on_launch_thread(const std::function<void()>& work);

// Runs `work` on the calling thread with ATen's parallel loops kept on it: no OpenMP team is
// opened there.
void run_inline(const std::function<void()>& work);

// Whether a kernel with these buffers is too small for ATen to split: every buffer holds fewer
// elements than ATen's grain size (at::internal::GRAIN_SIZE), below which its parallel loops
// run on one thread anyway.
bool too_small_to_split(int nparam, const int* ndims, const int64_t* const* shapes);

// Gives back the calling thread's idle OpenMP workers (libgomp's pool of the team it opened, by
// OpenMP 5's omp_pause_resource_all): a thread that ran torch's parallel work (a model's
// construction, a capture) keeps its team for its life, and a second team beside the launch
// thread's makes libgomp throttle the workers of both. The thread's next parallel region starts
// a team again; nothing else changes. False where the OpenMP runtime has no such call, or the
// thread is inside a parallel region.
bool release_idle_team();

// ATen intra-op threads on the launch thread (0: ATen's default, one per core); see
// ms_aten.set_num_threads.
void set_num_threads(int n);
int num_threads();

}  // namespace ms_aten
