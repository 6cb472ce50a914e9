// An AOT kernel that does nothing: timed as a route, it measures what MindSpore itself spends to
// launch any ops.Custom(func_type="aot") op (benchmarks/run.py builds it with the system
// compiler; it needs no torch).
#include <cstdint>

extern "C" int Empty(int, void**, int*, int64_t**, const char**, void*, void*) { return 0; }
