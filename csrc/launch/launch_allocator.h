// The memory ms_aten's ATen work allocates on the launch thread: its large blocks are kept for the
// next launches instead of going back to the C library.
//
// glibc serves a thread other than the main one from an arena of its own, whose heaps (64 MiB
// each) it unmaps as soon as they are empty, and maps blocks above its mmap threshold (32 MiB at
// most) one by one. A program frees its activations and gradients at the end of every launch, so
// each launch touched its memory anew: GPT-2 small's forward+backward page-faulted about 800 MiB
// per call, and took ×1.2–1.5 of torch eager's time, whose main thread keeps its heap. Here a
// block of at least kMinBytes that ATen allocates on the launch thread comes from a cache of
// blocks of the same (rounded) size that earlier launches freed, up to a limit in bytes
// (MS_ATEN_CPU_CACHE_MB, read once; 0: no cache). Allocations on every other thread go to the
// allocator torch had, unchanged.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ms_aten {

// Routes the calling thread's large allocations through the cache; the first call puts the
// cache in front of torch's CPU allocator (c10::SetCPUAllocator). The launch thread calls it
// once, at its start. Nothing happens when the limit is 0.
void cache_this_threads_blocks();

// Bytes the cache holds for reuse now (blocks handed out are not counted).
int64_t cached_bytes();

// Gives every cached block back to the C library (ms_aten.empty_cache()).
void empty_cache();

}  // namespace ms_aten
